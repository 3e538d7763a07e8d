"""Checks on the ``summary.json`` files that runs leave in their out directories.

    python summary.py valid DIR...          every DIR/summary.json has a finite best_fitness
    python summary.py same DIR_A DIR_B      both runs found the same best (fitness and every
                                            other best_* entry, e.g. the genome, also when
                                            kept in best_genome.npy), exactly
    python summary.py field DIR KEY VALUE   DIR/summary.json has KEY equal to VALUE (JSON);
                                            KEY may be dotted: config.run.seed
    python summary.py present DIR KEY       DIR/summary.json has KEY, and it is not null

Prints what differs and exits 1 when a check fails, 2 on a usage error.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

#: where mpievo puts a best genome too long for summary.json (the summary names it)
GENOME_FILE = "best_genome.npy"


def load(out_dir: str) -> dict:
    """Return the parsed summary of ``out_dir``.

    Raises:
        ValueError: missing, unreadable or without best_fitness.
    """
    path = Path(out_dir) / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"expected a JSON summary at {path}, got {error}") from error
    if not isinstance(summary, dict) or "best_fitness" not in summary:
        raise ValueError(f"expected best_fitness in {path}, got keys {sorted(summary)}")
    return summary


def short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...]"


def check_valid(out_dirs: list[str]) -> list[str]:
    problems = []
    for out_dir in out_dirs:
        try:
            best = load(out_dir)["best_fitness"]
        except ValueError as error:
            problems.append(str(error))
            continue
        if not isinstance(best, (int, float)) or not math.isfinite(best):
            problems.append(f"expected a finite best_fitness in {out_dir}, got {best!r}")
    return problems


def check_same(dir_a: str, dir_b: str) -> list[str]:
    """Compare best_fitness and every other best_* entry the two summaries share."""
    a, b = load(dir_a), load(dir_b)
    keys = sorted(k for k in a if k.startswith("best") and k in b)
    problems = [f"{key}: {short(a[key])} in {dir_a} but {short(b[key])} in {dir_b}"
                for key in keys if a[key] != b[key]]
    if not problems and a.get("best_genome") == GENOME_FILE:
        # Long genomes are stored beside the summary; the file name alone proves nothing.
        if (Path(dir_a) / GENOME_FILE).read_bytes() != (Path(dir_b) / GENOME_FILE).read_bytes():
            problems.append(f"{GENOME_FILE} differs between {dir_a} and {dir_b}")
    return problems


def lookup(summary: dict, key: str):
    """``summary[a][b]`` for ``key`` "a.b"; None when any part is missing."""
    value = summary
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def check_field(out_dir: str, key: str, value: str) -> list[str]:
    found = lookup(load(out_dir), key)
    expected = json.loads(value)
    if found != expected:
        return [f"expected {key}={expected!r} in {out_dir}, got {found!r}"]
    return []


def check_present(out_dir: str, key: str) -> list[str]:
    if lookup(load(out_dir), key) is None:
        return [f"expected a value for {key} in {out_dir}, got none"]
    return []


def main(argv: list[str]) -> int:
    checks = {"valid": (check_valid, None), "same": (check_same, 2), "field": (check_field, 3),
              "present": (check_present, 2)}
    if not argv or argv[0] not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    check, arity = checks[argv[0]]
    args = argv[1:]
    if arity is None:
        problems = check(args) if args else ["expected at least one DIR, got none"]
    elif len(args) != arity:
        problems = [f"expected {arity} arguments for {argv[0]}, got {len(args)}"]
    else:
        try:
            problems = check(*args)
        except ValueError as error:
            problems = [str(error)]
    for problem in problems:
        print(f"summary.py {argv[0]}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
