"""The merge problems, as mpievo Problems named from ``merge.toml`` (``merge_problems:recipe``,
``merge_problems:whole_weights``, ``merge_problems:front``) or passed to ``mpievo.minimize``; all are
``mpievo.torch`` problems (or built on one) over the cached base and experts (:func:`sources`):

* :func:`recipe_problem` -- a :class:`~mpievo.torch.RecipeProblem`: task arithmetic with
  one weight in [0, 1] per layer group and per expert and a fixed ``lambda`` of 1, i.e.
  ``base + sum_k w[g, k] * tau_k[g]`` (groups, :func:`block_half`: the embeddings, each
  block's attention half and MLP half, the final norm). Generation 0 is the plain average
  (every weight ``1/k``) and random recipes.
* :func:`whole_weight_problem` -- a :class:`~mpievo.torch.ModelProblem`: every parameter
  of the merged model is a gene; its bases are the base then the experts, so
  ``engine.genome = "delta"`` holds them once per node and migrates differences. The
  islands start from the experts and their average (then those plus a little noise).
* :func:`front_problem` -- a :class:`~mpievo.evo.moo.MultiObjectiveProblem` over the
  recipe genome of :func:`recipe_problem`: one objective per task, ``1 -`` its validation
  exact match, all minimised (``merge_front.toml``: Pareto islands, the trade-off between tasks).

* :func:`dataflow_problem` -- a :class:`~mpievo.torch.dataflow.DataFlowProblem`: which
  layer of the base and the experts runs at each of ``T = 8 x 2`` slots (small size) and a
  scale on its input; the base's embeddings and head; generation 0 the base's own path and
  its neighbours.
* :func:`combined_problem` -- the same over a parameter-space merge (the recipe's best,
  source 0) plus the base and the experts, from the merge's own path (``merge_problems:combined``
  reads the recipe run named by ``$MERGE_TRANSFORMERS_RECIPE_RUN``).

The first two maximise :func:`scoring.fitness` on the validation split (the mean over tasks of
exact-match accuracy); reports use the test split. Each process loads the sources once
(first use) and writes each genome into one resident model in place. ``run.blas_threads``
(default 1) gives torch one thread per rank: the ranks share the cores.

The size comes from ``$MERGE_TRANSFORMERS_SIZE`` (``full``, the default, or ``small``)
and the cache folder from ``$MERGE_TRANSFORMERS_CACHE``. The module's ``recipe``, ``front`` and
``whole_weights`` are made when first named, from models built if not cached: build
them first (``python examples/merge_transformers/build.py``) so that ranks do not all train them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from data import TASKS
from zoo import SPECS, Zoo, new_model
from mpievo.evo.moo import MultiObjectiveProblem
from mpievo.torch import FlatParameters, ModelProblem, RecipeProblem, hf_bases, load_model, row_scores
from mpievo.torch.dataflow import DataFlowProblem
from scoring import fitness, fitness_rows, task_scores

#: box of every weight of a whole-weight genome (the models' weights lie well inside)
WEIGHT_BOX = 8.0


def block_half(name: str) -> str:
    """The recipe group of a parameter tensor: ``embed``, ``h<i>.attn`` (``ln_1`` and
    attention), ``h<i>.mlp`` (``ln_2`` and MLP), ``final``."""
    block = re.match(r"transformer\.h\.(\d+)\.(\w+)", name)
    if block:
        return f"h{block[1]}.{'attn' if block[2] in ('ln_1', 'attn') else 'mlp'}"
    return "final" if ".ln_f." in name else "embed"


def sources(zoo: Zoo, flat: FlatParameters):
    """The base then the experts (their Hugging Face directories, built if not cached),
    as the bases of ``flat``'s genomes: checked now, loaded on first use."""
    folder = zoo.build()
    return hf_bases([folder / name for name in ["base", *zoo.expert_names]], flat)


def _evaluate(zoo: Zoo):
    def merge_fitness(model) -> float:
        return fitness(model, zoo.splits)

    return merge_fitness


def recipe_problem(zoo: Zoo) -> RecipeProblem:
    """Layer-wise task arithmetic of the experts over the base (module docstring)."""
    flat = FlatParameters(new_model(zoo.spec))      # architecture only: the merges overwrite it
    problem = RecipeProblem(flat, _evaluate(zoo), sources(zoo, flat), base=0, method="task_arithmetic", lam=1.0,
                            group_by=block_half, start="average",
                            name="transformer merge: layer-wise task arithmetic")
    # cheaper fitness (problem.fidelity_sample): the same fitness on some validation lines of each task
    return row_scores(problem, lambda model, rows: fitness_rows(model, zoo.splits, rows),
                      rows=min(len(zoo.splits[task].validation) for task in TASKS))


def whole_weight_problem(zoo: Zoo, noise: float = 0.002) -> ModelProblem:
    """Every parameter a gene; islands start from the experts and their average, exactly,
    then with ``noise`` added (module docstring)."""
    flat = FlatParameters(new_model(zoo.spec))
    problem = None

    def experts_and_average(rng: np.random.Generator, n: int) -> np.ndarray:
        experts = problem.bases.array[1:].astype(np.float64)
        starts = np.vstack([experts, experts.mean(axis=0)])
        genomes = starts[np.arange(n) % len(starts)] + noise * rng.standard_normal((n, flat.dim))
        genomes[:len(starts)] = starts[:n]
        return genomes

    problem = ModelProblem(flat, _evaluate(zoo), sources=sources(zoo, flat), lower=-WEIGHT_BOX, upper=WEIGHT_BOX,
                           initial=experts_and_average, name="transformer merge: whole weights")
    return problem


def front_problem(zoo: Zoo) -> MultiObjectiveProblem:
    """One objective per task, ``1 -`` its exact match on the validation split, over
    :func:`recipe_problem`'s genome (its box, its start: the plain average first). The
    recipe problem is the attribute ``recipe`` (``front.recipe.materialize(genome)``
    writes a front member's merge into ``front.recipe.model``). The reference point of the
    hypervolume is 1 on every task (no line solved)."""
    recipe = recipe_problem(zoo)
    recipe.model.eval()        # as ModelProblem scores: no training-mode layers during evaluation

    def task_losses(genomes: np.ndarray) -> np.ndarray:
        losses = np.empty((len(genomes), len(TASKS)))
        for row, genome in enumerate(genomes):
            recipe.materialize(genome)
            scores = task_scores(recipe.model, zoo.splits)
            losses[row] = [1.0 - scores[task] for task in TASKS]
        return losses

    front = MultiObjectiveProblem(task_losses, recipe.dim, recipe.lower, recipe.upper, n_obj=len(TASKS),
                                  reference_point=np.ones(len(TASKS)), initial=recipe.initial, bases=recipe.bases,
                                  name="transformer merge: layer-wise task arithmetic, one objective per task")
    front.recipe, front.row_dtype = recipe, recipe.row_dtype
    return front


#: passes over the sources' layers of the data-flow genome
REPEATS = 2


def dataflow_problem(zoo: Zoo, merged=None, repeats: int = REPEATS, scales: bool = True) -> DataFlowProblem:
    """The data flow through the base's and the experts' layers (module docstring); with
    ``merged`` (a model of the zoo's architecture) that model is source 0: its embeddings,
    head and own path are the start (the combined job); ``scales=False``: the layers only."""
    folder = zoo.build()
    models = [load_model(folder / name) for name in ["base", *zoo.expert_names]]
    if merged is not None:
        models = [merged, *models]
    problem = DataFlowProblem(models, _evaluate(zoo), repeats=repeats, scales=scales, start=0,
                              name="transformer merge: data flow" + (" over a recipe merge" if merged else ""))
    return row_scores(problem, lambda model, rows: fitness_rows(model, zoo.splits, rows),
                      rows=min(len(zoo.splits[task].validation) for task in TASKS))


def recipe_merge(zoo: Zoo, genome) -> "torch.nn.Module":
    """The recipe problem's merge of ``genome`` as a model of its own (a copy)."""
    import copy

    recipe = recipe_problem(zoo)
    recipe.materialize(np.asarray(genome, np.float64))
    return copy.deepcopy(recipe.model).eval()


def combined_problem(zoo: Zoo, recipe_genome=None) -> DataFlowProblem:
    """Data flow over the recipe merge of ``recipe_genome`` (default: the best genome of the
    run in ``$MERGE_TRANSFORMERS_RECIPE_RUN``) plus the base and the experts."""
    if recipe_genome is None:
        run = os.environ.get("MERGE_TRANSFORMERS_RECIPE_RUN")
        if not run:
            raise ValueError("expected $MERGE_TRANSFORMERS_RECIPE_RUN naming a finished merge.toml run, got none")
        summary = json.loads((Path(run) / "summary.json").read_text(encoding="utf-8"))
        recipe_genome = summary["best_genome"]
        if isinstance(recipe_genome, str):         # a large genome: the .npy file it names
            recipe_genome = np.load(Path(run) / recipe_genome)
    return dataflow_problem(zoo, merged=recipe_merge(zoo, recipe_genome))


def default_zoo() -> Zoo:
    size = os.environ.get("MERGE_TRANSFORMERS_SIZE", "full")
    if size not in SPECS:
        raise ValueError(f"expected MERGE_TRANSFORMERS_SIZE in {sorted(SPECS)}, got {size!r}")
    return Zoo(SPECS[size])


#: the jobs' problems (merge.toml, whole_weights.toml, merge_front.toml), made when first named
_MAKERS = {"recipe": recipe_problem, "whole_weights": whole_weight_problem, "front": front_problem,
           "dataflow": dataflow_problem, "combined": combined_problem}


def __getattr__(name: str):
    if name not in _MAKERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    problem = _MAKERS[name](default_zoo())
    globals()[name] = problem
    return problem
