"""Merged model against the best parent and the plain average, on the test split.

Reads a finished run's ``summary.json`` (its best genome and the problem it named)
and prints the test accuracy of the merged model, of each parent and of the plain
average of the parents, with the fitness-split accuracy beside it (what the
evolution saw; the test split it never saw)::

    python examples/model_merging/report.py runs/merge-whole
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from models import scores
from mpievo.evo.problems import load_object


def best_genome(run_dir: Path, summary: dict) -> np.ndarray:
    """The run's best genome (inline in summary.json, or in the .npy file it names)."""
    genome = summary["best_genome"]
    if isinstance(genome, str):
        return np.load(run_dir / genome)
    return np.asarray(genome, dtype=np.float32)


def compare(run_dir) -> dict:
    """{"merged" | "average" | "parent k": {"fitness": accuracy, "test": accuracy}} of a run."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    merger = load_object(summary["config"]["problem"]["name"]).func
    zoo = merger.zoo
    parents = zoo.parents
    models = {"merged": merger.merged(best_genome(run_dir, summary)[None, :]),
              "average": parents.mean(axis=0, keepdims=True)}
    models.update({f"parent {k}": parents[k:k + 1] for k in range(len(parents))})
    return {name: {split: float(scores(zoo.arch, theta, getattr(zoo.splits, split))[0][0])
                   for split in ("fitness", "test")}
            for name, theta in models.items()}


def best_parent(table: dict) -> str:
    """The parent with the best fitness-split accuracy (chosen without the test split)."""
    return max((name for name in table if name.startswith("parent")), key=lambda name: table[name]["fitness"])


def format_table(table: dict) -> str:
    lead = best_parent(table)
    lines = [f"{'model':<22}{'fitness split':>14}{'test split':>12}"]
    for name, row in table.items():
        label = f"{name} (best)" if name == lead else name
        lines.append(f"{label:<22}{row['fitness']:>14.4f}{row['test']:>12.4f}")
    merged, average, parent = table["merged"]["test"], table["average"]["test"], table[lead]["test"]
    lines.append(f"merged - plain average: {merged - average:+.4f} test accuracy; "
                 f"merged - best parent: {merged - parent:+.4f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="output directory of `mpievo run` (holds summary.json)")
    args = parser.parse_args(argv)
    print(format_table(compare(args.run_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
