"""The test-split view of a merge front run (``merge_front.toml``), against the
single-objective merge and the standard merges.

Reads the run's ``summary.json`` ``front`` (the merged non-dominated set of all islands:
validation objectives ``1 - exact match`` per task and the recipe genomes), re-scores
every front member on the validation split (checking the run's objectives) and on the
held-out test split, tunes the baselines (``baselines.py``) on the validation split, and
with ``--single RUN`` adds the best merge of a ``merge.toml`` run. Prints a table and
writes ``<run>/front_tasks.png``: test exact match per pair of tasks (one panel per pair)::

    PYTHONPATH=examples/merge_transformers python examples/merge_transformers/front_report.py \\
        runs/merge-front --single runs/merge-tf
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from baselines import baselines
from data import TASKS
from merge_report import best_genome, scores
from zoo import Zoo

#: rows of the table besides the front members, in this order
REFERENCE_ROWS = ("average", "task arithmetic", "TIES", "mpievo (one objective)")


def front_of(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(objectives (k, tasks), genomes (k, dim)) of the run's merged front."""
    front = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["front"]
    genomes = front["genomes"]
    genomes = np.load(run_dir / genomes) if isinstance(genomes, str) else np.asarray(genomes, np.float64)
    return np.asarray(front["objectives"], np.float64), genomes


def compare_front(run_dir, problem, zoo: Zoo, single_run=None, standard: bool = True) -> dict:
    """{"front": [row per member], "objectives": the run's (k, tasks), "rescored": the
    validation objectives computed again, "references": {name: row}}; a row is
    :func:`merge_report.scores` (test exact match per task, ``"mean"``, ``"validation"``).
    ``problem`` is ``merge_problems.front_problem(zoo)``; ``single_run`` a ``merge.toml``
    run directory (its best recipe becomes the row ``"mpievo (one objective)"``);
    ``standard=False`` leaves out the tuned standard merges (a quick check)."""
    run_dir = Path(run_dir)
    recipe = problem.recipe
    objectives, genomes = front_of(run_dir)
    rescored = problem(genomes)
    rows = []
    for genome in genomes:
        recipe.materialize(genome)
        rows.append(scores(recipe.model, zoo.splits))
    references = {}
    for name, (weights, _) in (baselines(recipe, zoo.splits, zoo.expert_names) if standard else {}).items():
        if name in REFERENCE_ROWS:
            recipe.flat.write(weights)
            references[name] = scores(recipe.model, zoo.splits)
    if single_run is not None:
        single_run = Path(single_run)
        summary = json.loads((single_run / "summary.json").read_text(encoding="utf-8"))
        genome = best_genome(single_run, summary)
        if genome.shape != (recipe.dim,):
            raise ValueError(f"expected a merge.toml run (a recipe of {recipe.dim} genes) as the single run, "
                             f"got a best genome of shape {genome.shape} in {single_run}")
        recipe.materialize(genome)
        references["mpievo (one objective)"] = scores(recipe.model, zoo.splits)
    return {"front": rows, "objectives": objectives, "rescored": rescored, "references": references}


def at_least_as_good_on_test(row: dict, other: dict) -> bool:
    """Whether ``row`` is at least as good as ``other`` on every task's test exact match."""
    return all(row[task] >= other[task] for task in TASKS)


def format_front(report: dict) -> str:
    """A markdown table: the front members (by test mean, best first), then the references;
    and how many members match or beat each reference on every task (test split)."""
    front, references = report["front"], report["references"]
    lines = ["| merge | " + " | ".join(TASKS) + " | mean (test) | mean (validation) |",
             "|---|" + "---|" * (len(TASKS) + 2)]
    order = sorted(range(len(front)), key=lambda i: -front[i]["mean"])
    named = [(f"front {i}", front[i]) for i in order] + list(references.items())
    for name, row in named:
        lines.append(f"| {name} | " + " | ".join(f"{row[t]:.3f}" for t in (*TASKS, "mean", "validation")) + " |")
    lines.append("")
    lines.append(f"front: {len(front)} members (validation objectives re-scored: max |difference| "
                 f"{np.abs(report['rescored'] - report['objectives']).max():.2g})")
    for name, row in references.items():
        count = sum(at_least_as_good_on_test(member, row) for member in front)
        lines.append(f"members at least as good as {name} on every task (test): {count} of {len(front)}")
    return "\n".join(lines)


def plot_front(report: dict, target: Path) -> Path:
    """Test exact match of the front members and the references, one panel per pair of tasks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(itertools.combinations(TASKS, 2))
    figure, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 4.0), squeeze=False)
    markers = dict(zip(REFERENCE_ROWS, ("s", "^", "D", "*")))
    for axis, (x, y) in zip(axes[0], pairs):
        front = report["front"]
        axis.scatter([r[x] for r in front], [r[y] for r in front], s=18, c="tab:blue", alpha=0.7,
                     label="front (3 objectives)")
        for name, row in report["references"].items():
            axis.scatter(row[x], row[y], marker=markers[name], s=90 if name.startswith("mpievo") else 50,
                         edgecolors="black", label=name, zorder=3)
        axis.set_xlabel(f"{x}: test exact match")
        axis.set_ylabel(f"{y}: test exact match")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    figure.suptitle("merge front over tasks (test split; higher is better)")
    figure.tight_layout()
    figure.savefig(target, dpi=120)
    plt.close(figure)
    return target


def main(argv=None) -> int:
    import merge_problems

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="output directory of `mpievo run merge_front.toml`")
    parser.add_argument("--single", type=Path, default=None, help="a merge.toml run directory to compare with")
    args = parser.parse_args(argv)
    zoo = merge_problems.default_zoo()
    report = compare_front(args.run_dir, merge_problems.front_problem(zoo), zoo, args.single)
    print(format_front(report))
    print(f"plot: {plot_front(report, args.run_dir / 'front_tasks.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
