"""The test-split table of a finished merge run, against the standard merges.

Reads the run's ``summary.json`` (its best genome and the problem it named), writes
the best merged model as a Hugging Face directory ``<run>/merged`` (``mpievo.torch.save_best``:
the recipe or genome beside it, ``mpievo_merge.json``), tunes the baselines on the
validation split and prints exact-match accuracy on the held-out test split of every task::

    PYTHONPATH=examples/merge_transformers python examples/merge_transformers/merge_report.py runs/merge-tf
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np

from baselines import baselines
from data import TASKS
from mpievo.evo.problems import load_object
from mpievo.torch import save_best
from scoring import task_scores
from zoo import Zoo


def best_genome(run_dir: Path, summary: dict) -> np.ndarray:
    """The run's best genome (inline in summary.json, or in the .npy file it names)."""
    genome = summary["best_genome"]
    return np.load(run_dir / genome) if isinstance(genome, str) else np.asarray(genome, np.float64)


def compare(run_dir, problem=None, zoo: Zoo | None = None) -> dict[str, dict]:
    """{row name: {task: test accuracy, "mean": ..., "validation": validation mean}}: the
    base, each expert, the baselines, and ``"mpievo"`` (the run's best, also written to
    ``<run_dir>/merged``). ``problem`` (default: the one the run named) is one of
    ``merge_problems``'; ``zoo`` (default: ``merge_problems.default_zoo()``) its models' zoo."""
    import merge_problems

    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    problem = problem or load_object(summary["config"]["problem"]["name"])
    zoo = zoo or merge_problems.default_zoo()
    genome = best_genome(run_dir, summary)
    best = types.SimpleNamespace(best_genome=genome, best_fitness=summary["best_fitness"])
    rows = {"base": problem.bases.array[0], **{name: w for name, (w, _) in
                                               baselines(problem, zoo.splits, zoo.expert_names).items()}}
    table = {}
    for name, weights in rows.items():
        problem.flat.write(weights)
        table[name] = scores(problem.model, zoo.splits)
    save_best(problem, best, run_dir / "merged")       # the best merge, now the model's weights
    table["mpievo"] = scores(problem.model, zoo.splits)
    return table


def scores(model, splits) -> dict[str, float]:
    """Test scores per task and their mean, and the validation mean (``"validation"``)."""
    table = task_scores(model, splits, "test")
    table["validation"] = task_scores(model, splits, "validation")["mean"]
    return table


def best_baseline(table: dict) -> str:
    """The strongest row on the test mean other than mpievo's and the base (not a merge)."""
    return max((name for name in table if name not in ("mpievo", "base")), key=lambda name: table[name]["mean"])


def format_table(table: dict) -> str:
    """A markdown table (test exact match per task, the mean, the validation mean)."""
    lines = ["| model | " + " | ".join(TASKS) + " | mean (test) | mean (validation) |",
             "|---|" + "---|" * (len(TASKS) + 2)]
    for name, row in table.items():
        cells = [f"{row[t]:.3f}" for t in (*TASKS, "mean", "validation")]
        lines.append(f"| {'**mpievo**' if name == 'mpievo' else name} | " + " | ".join(cells) + " |")
    lead = best_baseline(table)
    lines.append(f"\nmpievo - best baseline ({lead}): {table['mpievo']['mean'] - table[lead]['mean']:+.3f} "
                 f"mean test exact match; mpievo - average: {table['mpievo']['mean'] - table['average']['mean']:+.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="output directory of `mpievo run` (holds summary.json)")
    args = parser.parse_args(argv)
    print(format_table(compare(args.run_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
