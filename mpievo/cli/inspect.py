"""``mpievo inspect PATH``: summarise checkpoints and verify their checksums.

PATH is a run directory (``mpievo run --out DIR``, whose ``checkpoints/`` is read), a
checkpoint directory, or one rank's checkpoint file. Exit status: 0 when the latest
checkpoint (or the file) verifies, 1 when it does not (the newest good one is named),
2 when there is no checkpoint at all, 141 when the reader of the output left early
(``| head``). Never writes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..jobs import CHECKPOINT_SUBDIR

HELP = "summarise a run's checkpoints (checkpoints, islands, best fitness) and verify their checksums"

EXIT_OK, EXIT_LATEST_BAD, EXIT_NO_CHECKPOINT = 0, 1, 2
#: what a shell reports for a writer killed by SIGPIPE (128 + 13), as for ``cat | head``
EXIT_BROKEN_PIPE = 141


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, metavar="PATH",
                        help="a run directory, its checkpoints/ directory, or one checkpoint file")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="read headers only; skip reading every dataset to check checksums")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
    report = collect(args.path, verify=args.verify)
    text = json.dumps(report, indent=1, default=_json_default) if args.json else render(report)
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # The reader left (`| head`): end quietly like other filters. Stdout goes to
        # devnull so that the interpreter's last flush cannot raise the error again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return report["exit_code"]


def collect(path: str | Path, *, verify: bool = True) -> dict[str, Any]:
    """The inspection report of a run directory, checkpoint directory or file (plain data)."""
    path = Path(path)
    if path.is_file():
        return _collect_file(path, verify)
    return _collect_directory(checkpoint_directory(path), verify)


def checkpoint_directory(path: Path) -> Path:
    """``path`` when it holds checkpoints, else its ``checkpoints/`` when there is one."""
    from ..io.manifest import MANIFEST_NAME, checkpoint_dirs

    holds_checkpoints = (path / MANIFEST_NAME).exists() or bool(checkpoint_dirs(path))
    subdirectory = path / CHECKPOINT_SUBDIR
    return subdirectory if not holds_checkpoints and subdirectory.is_dir() else path


def render(report: dict[str, Any]) -> str:
    """Human-readable text of a ``collect`` report."""
    if "file" in report:
        return _render_file(report)
    lines = [f"checkpoint directory {report['directory']}"]
    if report.get("manifest_problem"):
        lines.append(f"warning: {report['manifest_problem']} (listing the checkpoint files found instead)")
    if report.get("error"):
        lines.append(f"error: {report['error']}")
        return "\n".join(lines)
    check = "checksums" if report["verified"] else "headers"
    lines.append(f"{'checkpoint':<26}{'generation':>11}{'ranks':>7}{'islands':>9}{'size':>12}  {check}")
    for ckpt in report["checkpoints"]:
        status = "ok" if not ckpt["problems"] else "BAD"
        lines.append(f"{ckpt['name']:<26}{ckpt['generation']:>11}{ckpt['nranks']:>7}{len(ckpt['islands']):>9}"
                     f"{_size(ckpt['size_bytes']):>12}  {status}")
        lines.extend(f"    {problem}" for problem in ckpt["problems"])
        lines.extend(_reference_lines(ckpt["references"]))
    for name in report["stray"]:
        lines.append(f"{name:<26} not in the manifest (an incomplete or failed write; ignored)")
    latest = report["checkpoints"][-1]
    lines.append("")
    lines.append(f"latest: {latest['name']} (generation {latest['generation']}, written "
                 f"{_when(latest['created_unix'])} by {latest['nranks']} rank(s), mpievo "
                 f"{latest['mpievo_version'] or '?'}, config sha256 {latest['config_sha256'][:12]})")
    lines.extend(_island_lines(latest["island_table"]))
    if report["exit_code"] == EXIT_OK:
        lines.append(f"result: latest checkpoint {report['latest']} verifies"
                     if report["verified"] else f"result: latest checkpoint {report['latest']} headers are readable")
    else:
        fallback = report["newest_good"] or "none"
        lines.append(f"result: latest checkpoint {report['latest']} is BAD; a resume would use: {fallback}")
    if report["newest_good"] is not None:
        code = report["resume_imports"]
        lines.append("a resume would import: " + (", ".join(code) + " (a checkpoint is trusted like a config file)"
                                                   if code else "no user code (built-in problem and algorithms)"))
    return "\n".join(lines)


# ---------------------------------------------------------------- collecting


def _collect_directory(directory: Path, verify: bool) -> dict[str, Any]:
    from ..io import existing_entries, verify_checkpoint_files  # h5py only when the command runs
    from ..io.manifest import checkpoint_dirs

    report: dict[str, Any] = {"directory": str(directory), "verified": verify, "checkpoints": [],
                              "manifest_problem": None, "stray": [], "latest": None, "newest_good": None}
    if not directory.is_dir():
        report["error"] = f"no such file or directory: {directory}"
        report["exit_code"] = EXIT_NO_CHECKPOINT
        return report
    entries, problem = existing_entries(directory)
    report["manifest_problem"] = problem
    listed = {e.name for e in entries}
    report["stray"] = sorted(p.name for p in checkpoint_dirs(directory).values() if p.name not in listed)
    for entry in entries:
        outcome = verify_checkpoint_files(directory, entry, read_data=verify)
        report["checkpoints"].append(_describe(directory, entry, outcome))
    if not entries:
        report["error"] = f"no checkpoint in {directory}"
        report["exit_code"] = EXIT_NO_CHECKPOINT
        return report
    report["latest"] = entries[-1].name
    good = [c["name"] for c in report["checkpoints"] if not c["problems"]]
    report["newest_good"] = good[-1] if good else None
    report["exit_code"] = EXIT_OK if report["newest_good"] == report["latest"] else EXIT_LATEST_BAD
    if report["newest_good"] is not None:
        chosen = next(e for e in entries if e.name == report["newest_good"])
        report["resume_imports"] = resume_imports(_saved_config(directory / chosen.file_of_rank(0).path))
    return report


def _collect_file(path: Path, verify: bool) -> dict[str, Any]:
    """One rank's file: its header and island table, and whether it verifies on its own."""
    from ..io import CheckpointError, read_header, verify_file

    report: dict[str, Any] = {"file": str(path), "verified": verify, "problems": []}
    try:
        header = verify_file(path) if verify else read_header(path)
    except CheckpointError as err:
        report["problems"].append(str(err))
        report["exit_code"] = EXIT_LATEST_BAD
        return report
    maximize = _maximizes(path)
    report.update(checkpoint=header.checkpoint, generation=header.generation, rank=header.rank,
                  nranks=header.nranks, created_unix=header.created_unix,
                  mpievo_version=header.mpievo_version, config_sha256=header.config_sha256,
                  maximize=maximize, island_table=_island_rows(header, maximize), exit_code=EXIT_OK,
                  references=[r.path for r in header.references])
    return report


def _describe(directory: Path, entry, outcome: dict[str, str | None]) -> dict[str, Any]:
    from ..io import read_header

    table, version, size, maximize = [], "", 0, None
    for file_entry in entry.files:
        path = directory / file_entry.path
        size += path.stat().st_size if path.exists() else 0
        if outcome.get(file_entry.path):  # never hand a damaged file to HDF5
            table.extend({"island": i, "file": Path(file_entry.path).name} for i in file_entry.islands)
            continue
        header = read_header(path)
        version = header.mpievo_version
        maximize = _maximizes(path) if maximize is None else maximize  # one config per checkpoint
        table.extend(_island_rows(header, maximize))
    return {
        "name": entry.name, "sequence": entry.sequence, "generation": entry.generation,
        "created_unix": entry.created_unix, "nranks": entry.nranks, "islands": list(entry.islands),
        "config_sha256": entry.config_sha256, "mpievo_version": version, "size_bytes": size,
        "files": [f.path for f in entry.files], "problems": [p for p in outcome.values() if p],
        "references": sorted({r.path for f in entry.files for r in f.references}),
        "maximize": bool(maximize), "island_table": sorted(table, key=lambda row: row["island"]),
    }


def _island_rows(header, maximize: bool) -> list[dict[str, Any]]:
    """One row per island of a file, from its summary attributes (best fitness in the user's sense)."""
    rows = []
    for island in header.islands:
        summary = {k: _plain(v) for k, v in header.island_summaries.get(island, {}).items() if k != "island_index"}
        if maximize and "best_fitness" in summary:  # stored minimised: the engine negates a maximised fitness
            summary["best_fitness"] = _negate(summary["best_fitness"])
        rows.append({"island": island, "file": header.path.name, **summary})
    return rows


def _maximizes(path: Path) -> bool:
    """Whether the run that wrote ``path`` maximised (its saved config's ``problem.maximize``)."""
    problem = _saved_config(path).get("problem")    # a damaged config: leave values minimised
    return isinstance(problem, dict) and problem.get("maximize") is True


def _saved_config(path: Path) -> dict:
    """The config saved in a checkpoint file ({} when it cannot be read)."""
    from ..io import CheckpointError, parse_config, read_checkpoint_file

    try:
        contents = read_checkpoint_file(path, (), with_run_state=False)
        config = parse_config(contents.config_text, contents.config_format)
    except (CheckpointError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def resume_imports(config: dict) -> list[str]:
    """The user code (``module:name``) a resume from a checkpoint with ``config`` would
    import, as ``key = 'module:name'`` (a checkpoint is trusted like a config file)."""
    found = []
    for table, key in (("problem", "name"), ("engine", "algorithm")):
        value = config.get(table, {}).get(key) if isinstance(config.get(table), dict) else None
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and ":" in item:
                found.append(f"{table}.{key} = {item!r}")
    return list(dict.fromkeys(found))


# ---------------------------------------------------------------- rendering


def _render_file(report: dict[str, Any]) -> str:
    lines = [f"checkpoint file {report['file']}"]
    if report["problems"]:
        lines.extend(f"    {problem}" for problem in report["problems"])
        lines.append(f"result: {report['file']} is BAD")
        return "\n".join(lines)
    lines.append(f"part of {report['checkpoint']} (generation {report['generation']}, written "
                 f"{_when(report['created_unix'])} by rank {report['rank']} of {report['nranks']}, mpievo "
                 f"{report['mpievo_version'] or '?'}, config sha256 {report['config_sha256'][:12]})")
    lines.extend(_island_lines(report["island_table"]))
    lines.extend(_reference_lines(report["references"]))
    lines.append("result: the file verifies" if report["verified"] else "result: the file's header is readable")
    return "\n".join(lines)


def _reference_lines(references: list[str]) -> list[str]:
    """An incremental checkpoint's earlier files (archive rows it reads from them)."""
    return [f"    reads unchanged archive rows from {path}" for path in references]


def _island_lines(table: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'island':>6}  {'file':<24}{'generation':>11}{'evaluations':>13}{'population':>12}  best fitness"]
    for island in table:
        lines.append(f"{island['island']:>6}  {island['file']:<24}{_cell(island.get('generation')):>11}"
                     f"{_cell(island.get('evaluations')):>13}{_cell(island.get('population_size')):>12}  "
                     f"{_fitness(island.get('best_fitness'))}")
    return lines


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def _negate(value: Any) -> Any:
    return [-v for v in value] if isinstance(value, list) else -value


def _json_default(value: Any) -> Any:
    return _plain(value)


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _fitness(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(_fitness(v) for v in value) + "]"
    return "nan" if isinstance(value, float) and math.isnan(value) else f"{value:.6g}"


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"  # pragma: no cover


def _when(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))
