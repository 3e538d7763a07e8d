"""Data-flow-space merges against parameter space: the recipe search (parameter space), the
data-flow search (which layer of the base and the experts runs at each slot) and the two
combined (the data flow over the recipe's best merge plus the sources, from its own path),
per seed, on the held-out test split, beside the standard merges.

Each search runs on one process (``run.scheme = "island"``, 4 islands, ring migration) with
the same budget of evaluations; the combined job spends its recipe run's budget and its
own. The best data-flow merge of the first seed is written as a Hugging Face directory and
loaded back with ``from_pretrained`` (its test mean printed beside the module's)::

    PYTHONPATH=examples/merge_transformers MERGE_TRANSFORMERS_SIZE=small \\
        python examples/merge_transformers/dataflow_report.py --budget 640 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile

import numpy as np

import mpievo
from mpievo.comm.protocol import SelfComm
from mpievo.torch import load_model
from mpievo.torch.dataflow import save_dataflow
from baselines import baselines
from fidelity_report import CONFIG as FIDELITY_CONFIG
from merge_problems import dataflow_problem, default_zoo, recipe_merge, recipe_problem
from scoring import task_scores

#: merge.toml's recipe search on one process (4 CMA-ES islands, ring migration)
RECIPE = copy.deepcopy(FIDELITY_CONFIG)
#: the data-flow searches: GA islands (binary run genes rounded, scales continuous)
DATAFLOW = {"run": RECIPE["run"],
            "engine": {"algorithm": "ga", "capacity": 16, "batch_size": 8, "mutation_sigma": 0.1},
            "migration": RECIPE["migration"]}


def search(problem, config: dict, budget: int, seed: int):
    return mpievo.minimize(problem, config=config, budget=budget, seed=seed, comm=SelfComm())


def test_mean(problem, genome, splits) -> float:
    problem.materialize(genome)
    return task_scores(problem.model, splits, "test")["mean"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=640, help="evaluations of each search")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--dataflow-algorithm", default="ga", help="engine.algorithm of the data-flow searches")
    args = parser.parse_args(argv)
    DATAFLOW["engine"]["algorithm"] = args.dataflow_algorithm
    if args.dataflow_algorithm == "cmaes":
        DATAFLOW["engine"].update(RECIPE["engine"])
    zoo = default_zoo()
    recipe = recipe_problem(zoo)
    table = {"recipe (parameter space)": [], "data flow": [], "combined (recipe, then data flow)": [],
             "combined, layers only (scales 1)": []}
    written = None
    for seed in args.seeds:
        ps = search(recipe, RECIPE, args.budget, seed)
        ps_test = test_mean(recipe, ps.x, zoo.splits)
        dfs_problem = dataflow_problem(zoo)
        dfs = search(dfs_problem, DATAFLOW, args.budget, seed)
        dfs_test = test_mean(dfs_problem, dfs.x, zoo.splits)
        combined_problem = dataflow_problem(zoo, merged=recipe_merge(zoo, ps.x))
        combined = search(combined_problem, DATAFLOW, args.budget, seed)
        combined_test = test_mean(combined_problem, combined.x, zoo.splits)
        layers_problem = dataflow_problem(zoo, merged=recipe_merge(zoo, ps.x), scales=False)
        layers = search(layers_problem, DATAFLOW, args.budget, seed)
        layers_test = test_mean(layers_problem, layers.x, zoo.splits)
        rows = [(ps, ps_test), (dfs, dfs_test), (combined, combined_test), (layers, layers_test)]
        for name, (result, test) in zip(table, rows):
            table[name].append((test, float(result.fun)))
        paths = [[(s, layer, round(c, 2)) for s, layer, c in problem.space.decode(x)["path"]]
                 for problem, x in ((dfs_problem, dfs.x), (combined_problem, combined.x))]
        print(f"seed {seed}: test recipe {ps_test:.4f}  data flow {dfs_test:.4f}  combined {combined_test:.4f}"
              f"  combined, layers only {layers_test:.4f} (validation {ps.fun:.4f} {dfs.fun:.4f} {combined.fun:.4f} "
              f"{layers.fun:.4f}); paths (source, layer, scale): "
              f"data flow {paths[0]}, combined {paths[1]}", flush=True)
        if written is None:
            with tempfile.TemporaryDirectory() as folder:
                save_dataflow(combined_problem, combined.x, folder, score=float(combined.fun))
                loaded = load_model(folder)
                written = (loaded.config.n_layer, task_scores(loaded, zoo.splits, "test")["mean"], combined_test)
    print(f"\nwritten combined merge (seed {args.seeds[0]}): n_layer {written[0]}, test mean after "
          f"from_pretrained {written[1]:.4f} (module: {written[2]:.4f})")
    print(f"\n| model | test mean (median over seeds {args.seeds}) | validation (median) |\n|---|---|---|")
    for name, (genome, _) in baselines(recipe, zoo.splits, zoo.expert_names).items():
        recipe.flat.write(genome)
        print(f"| {name} | {task_scores(recipe.model, zoo.splits, 'test')['mean']:.4f} | "
              f"{task_scores(recipe.model, zoo.splits)['mean']:.4f} |")
    recipe.flat.write(recipe.bases.array[0])
    print(f"| base | {task_scores(recipe.model, zoo.splits, 'test')['mean']:.4f} | "
          f"{task_scores(recipe.model, zoo.splits)['mean']:.4f} |")
    for name, rows in table.items():
        tests = [t for t, _ in rows]
        print(f"| **{name}** | {np.median(tests):.4f} (seeds: {', '.join(f'{t:.4f}' for t in tests)}) | "
              f"{np.median([v for _, v in rows]):.4f} |")
    recipe_tests = [t for t, _ in table["recipe (parameter space)"]]
    for name in list(table)[2:]:
        tests = [t for t, _ in table[name]]
        print(f"\n{name} - recipe, test mean per seed: "
              f"{', '.join(f'{c - p:+.4f}' for c, p in zip(tests, recipe_tests))}; "
              f"of the medians: {np.median(tests) - np.median(recipe_tests):+.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
