"""Genome encodings (``engine.genome``): what a row of an archive means.

* ``dense`` -- a row is the genome (the engine's default; :func:`encode` returns the
  problem as it is).
* ``delta`` -- a row is the genome's difference from a base model (:mod:`.delta`).
* ``seeded`` -- a row is a recipe: merge weights over base models and the (key, step,
  rate) of each mutation (:mod:`.seeded`); bytes per migrant do not grow with the
  genome.

The base models come with the problem (``Problem(..., bases=...)``, see
:class:`mpievo.evo.base_models.BaseModels`). An encoding is a Problem over rows
(:class:`.encoded.EncodedProblem`) that materialises whole genomes for the user's
fitness under ``engine.materialize_budget``; archives, operators, migration and
checkpoints work on its rows unchanged.
"""

from __future__ import annotations

import numpy as np

from .. import device
from ..problems import Problem
from ..base_models import BaseModels, checksum
from .delta import DeltaProblem
from .encoded import EncodedProblem, encoding_of
from .seeded import RecipeLayout, SeededProblem

#: settings that must be the same on every island (the rows must mean the same)
SHARED_SETTINGS = ("genome", "materialize_budget", "recipe_terms", "dtype")


def row_dtype(problem: Problem, dtype) -> np.dtype:
    """The dtype of the rows islands keep for ``problem``: its encoding's (seeded recipes:
    float64), else the engine's genome ``dtype``."""
    return np.dtype(getattr(problem, "row_dtype", dtype))


def check_encoding(config, algorithm: str | None = None, problem: Problem | None = None) -> None:
    """Refuse settings an encoding cannot run.

    Raises:
        ValueError: ``engine.device = "cuda"`` with delta for a ``problem`` that does not
            evaluate on the device (a device island hands it device arrays), or seeded
            without the GA's interpolation crossover.
    """
    if config.genome == "dense":
        return
    if (config.genome == "delta" and config.device == "cuda" and problem is not None
            and not device.evaluates_on_device(problem)):
        raise ValueError("engine.device: expected 'cpu' or 'auto' with engine.genome = 'delta' for a "
                         "problem that evaluates on the host (or a problem that evaluates on the device: "
                         f"a built-in, or Problem(..., device=True)), got 'cuda' for {problem.name!r}")
    algorithm = config.algorithm if algorithm is None else algorithm
    if config.genome == "seeded" and (algorithm != "ga" or config.crossover != "interpolate"):
        raise ValueError("engine.genome = 'seeded': expected algorithm 'ga' with crossover "
                         f"'interpolate' (recipes merge linearly), got algorithm {algorithm!r} "
                         f"with crossover {config.crossover!r}")


def encode(problem: Problem, config) -> Problem:
    """``problem`` over the rows of ``config.genome`` (dense: ``problem`` itself).

    Raises:
        ValueError: an encoding without base models, bases of another dimension, or
            settings the encoding cannot run (:func:`check_encoding`); an already
            encoded problem of another encoding.
    """
    check_encoding(config, problem=problem)
    encoded = encoding_of(problem)
    if encoded is not None:
        if encoded.genome != config.genome:
            raise ValueError(f"engine.genome: expected {encoded.genome!r} for a problem encoded so, "
                             f"got {config.genome!r}")
        return problem
    if config.genome == "dense":
        return problem
    bases = problem.bases
    if bases is None:
        raise ValueError(f"engine.genome = {config.genome!r}: expected a problem with base models "
                         f"(Problem(..., bases=...)), got none for {problem.name!r}")
    if bases.dim != problem.dim:
        raise ValueError(f"expected base models of {problem.dim} genes for {problem.name!r}, "
                         f"got {bases.dim}")
    common = dict(dtype=config.dtype, budget=config.materialize_budget)
    if config.genome == "delta":
        return DeltaProblem(problem, bases, **common)
    from ..algorithms.ga import GENES_PER_CHILD

    rate = (min(1.0, GENES_PER_CHILD / problem.dim) if config.mutation_rate is None
            else float(config.mutation_rate))
    return SeededProblem(problem, bases, terms=config.recipe_terms, initial_step=config.mutation_sigma,
                         rate=rate, on_device=materializes_on_device(config.device, problem), **common)


def materializes_on_device(setting: str, problem: Problem) -> bool:
    """Whether seeded genomes are materialised and evaluated on the rank's GPU
    (``engine.device``; the recipes stay on the host): ``cuda`` yes, ``auto`` when
    the rank has a real GPU and the problem evaluates on the device.

    Raises:
        ValueError: ``cuda`` for a problem that does not evaluate on the device.
        RuntimeError: ``cuda`` without a usable GPU.
    """
    if setting == "cpu":
        return False
    if setting == "auto":
        return device.evaluates_on_device(problem) and device.real_gpu()
    device.require_cuda()
    if not device.evaluates_on_device(problem):
        raise ValueError(f"engine.device 'cuda' with seeded genomes: expected a problem that evaluates on "
                         f"the device (a built-in, or Problem(..., device=True)), got {problem.name!r}")
    return True


def check_shared(configs) -> None:
    """Refuse islands whose rows would mean different things (:data:`SHARED_SETTINGS`).

    Raises:
        ValueError: naming the setting and the two values.
    """
    first = configs[0]
    if first.genome == "dense":
        return
    for index, config in enumerate(configs):
        for name in SHARED_SETTINGS:
            if getattr(config, name) != getattr(first, name):
                raise ValueError(f"engine.{name}: expected the same value on every island with "
                                 f"engine.genome = {first.genome!r}, got {getattr(first, name)!r} on "
                                 f"island 0 and {getattr(config, name)!r} on island {index}")


__all__ = ["BaseModels", "DeltaProblem", "EncodedProblem", "RecipeLayout", "SeededProblem",
           "check_encoding", "check_shared", "checksum", "encode", "encoding_of", "row_dtype"]
