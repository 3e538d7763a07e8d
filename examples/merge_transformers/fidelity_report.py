"""Cheaper fitness on the recipe merge: full evaluation against racing
(``problem.fidelity_sample``), per seed, at equal budgets in cost units and at a third of it.

Each run is ``merge.toml``'s search (4 CMA-ES islands from the plain average, ring
migration) on one process with ``run.scheme = "island"``; a row gives the cost spent
(``nfev``: cost units, every row scored 1 / N), the children started, and the best merge's
mean exact match on the held-out test split::

    PYTHONPATH=examples/merge_transformers MERGE_TRANSFORMERS_SIZE=small \\
        python examples/merge_transformers/fidelity_report.py --budget 900 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import mpievo
from mpievo.comm.protocol import SelfComm
from mpievo.evo.fidelity import with_fidelity
from merge_problems import default_zoo, recipe_problem
from scoring import task_scores

CONFIG = {"run": {"islands": 4, "scheme": "island", "log_every": 10_000},
          "engine": {"algorithm": "cmaes", "capacity": 16, "cma_popsize": 8, "cma_sigma0": 0.2,
                     "cma_restarts": "none"},
          "migration": {"topology": "ring", "interval": 10, "emigrants": 1}}


def run(problem, splits, budget: int, seed: int, sample: float, margin: float, growth: int) -> dict:
    """One search: its cost (cost units), children started, and the best merge's test mean."""
    searched = with_fidelity(problem, sample, margin, growth)
    cheap = [0, 0]
    if sample < 1:
        inner, stages = searched.evaluate_rows, searched.fidelity.stages

        def counted(genomes, rows):         # every child (and the worst) at the first stage; at the last
            cheap[0] += len(genomes) if len(rows) == stages[0] else 0
            cheap[1] += len(genomes) if len(rows) == stages[-1] - stages[-2] else 0
            return inner(genomes, rows)
        searched.evaluate_rows = counted
    result = mpievo.minimize(searched, config=CONFIG, budget=budget, seed=seed, comm=SelfComm())
    problem.materialize(result.x)
    return {"cost": int(result.nfev), "children": cheap[0], "to the end": cheap[1], "validation": float(result.fun),
            "test": task_scores(problem.model, splits, "test")["mean"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=900, help="cost units of the full-evaluation runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sample", type=float, default=0.125, help="problem.fidelity_sample")
    parser.add_argument("--margin", type=float, default=0.02, help="problem.fidelity_margin")
    parser.add_argument("--growth", type=int, default=4, help="rows of a stage / rows of the last one")
    parser.add_argument("--arms", nargs="+", default=None, help="run only these rows of the table (by name)")
    parser.add_argument("--capacity", type=int, default=2, help="engine.capacity (the archive whose worst screens)")
    parser.add_argument("--algorithm", default="cmaes", help="engine.algorithm (ga: batch_size = cma_popsize)")
    parser.add_argument("--divisor", type=int, default=3, help="the cheap runs' smaller budget: budget / this")
    args = parser.parse_args(argv)
    CONFIG["engine"].update(capacity=args.capacity, algorithm=args.algorithm, batch_size=8)
    zoo = default_zoo()
    problem = recipe_problem(zoo)
    arms = {"full": (args.budget, 1.0), "raced, same budget": (args.budget, args.sample),
            f"raced, budget / {args.divisor}": (args.budget // args.divisor, args.sample),
            f"full, budget / {args.divisor}": (args.budget // args.divisor, 1.0)}
    arms = {name: arm for name, arm in arms.items() if args.arms is None or name in args.arms}
    table = {name: [] for name in arms}
    for seed in args.seeds:
        for name, (budget, sample) in arms.items():
            row = run(problem, zoo.splits, budget, seed, sample, args.margin, args.growth)
            table[name].append(row)
            print(f"seed {seed}  {name:24s} cost {row['cost']:5d}  children {row['children']:5d} "
                  f"(raced to the end {row['to the end']:4d})  "
                  f"validation {row['validation']:.4f}  test {row['test']:.4f}", flush=True)
    print(f"\nmedians over seeds {args.seeds} (sample {args.sample}, margin {args.margin}, growth {args.growth}, "
          f"capacity {args.capacity}, {args.algorithm}): | run | cost units | test mean | validation |")
    for name, rows in table.items():
        print(f"| {name} | {np.median([r['cost'] for r in rows]):.0f} | "
              f"{np.median([r['test'] for r in rows]):.4f} | {np.median([r['validation'] for r in rows]):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
