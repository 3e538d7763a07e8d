"""Compile the engine's kernels before a run's clock starts.

Numba compiles a kernel on its first call, or loads it from its on-disk cache
(:mod:`mpievo.kernels.numba_cache`). Left to the run, that time lands inside
generation 0 and the first progress lines report a few evaluations per second.
:func:`warm_up` breeds two generations of a tiny island of the same engine settings
on a stand-in problem (a sphere, never the user's function: children improve on their
parents, so the kernels of successful steps -- SHADE's memory update -- compile too) so that every
host kernel a GA, jDE or SHADE island calls is ready; ``mpievo run`` prints the seconds
it took.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .engine_config import EngineConfig
from .operators import COUNTER_DIM
from .problems import Problem

#: the stand-in island: as small as the kernels allow
_CAPACITY, _BATCH = 4, 4
#: algorithms whose generations are compiled steps (CMA-ES is numpy and LAPACK)
_COMPILED = ("ga", "de", "shade", "es")


def _sphere(genomes: np.ndarray) -> np.ndarray:
    rows = np.asarray(genomes, np.float64)
    return np.einsum("ij,ij->i", rows, rows)


def warms_up(config: EngineConfig) -> bool:
    """True for the settings :func:`warm_up` compiles for: the GA, jDE and SHADE on host
    dense rows (device islands compile on first use)."""
    return config.algorithm in _COMPILED and config.device == "cpu" and config.genome == "dense"


def warm_up(config: EngineConfig, dim: int) -> float:
    """Compile (or load) the host kernels of an island of ``config`` on ``dim`` genes;
    returns the seconds it took (0.0 when :func:`warms_up` is False).

    Kernels are typed by dtype and path, not size: the stand-in has ``dim`` genes, at
    most :data:`~mpievo.evo.operators.COUNTER_DIM` (the large-genome path from there).
    """
    from .island import Island   # island imports this package's algorithms

    if not warms_up(config):
        return 0.0
    start = time.perf_counter()
    tiny = dataclasses.replace(config, capacity=_CAPACITY, batch_size=_BATCH, population=None,
                               de_population=_BATCH, shade_population=_BATCH, shade_min_population=_BATCH,
                               shade_max_evaluations=None, es_popsize=_BATCH)
    problem = Problem(_sphere, min(int(dim), COUNTER_DIM), -1.0, 1.0, name="warm-up")
    island = Island(0, problem, tiny, seed=0)
    island.run(2)
    island.diversity()
    return time.perf_counter() - start


def warm_up_all(configs, dim: int) -> float:
    """:func:`warm_up` of each distinct config of ``configs`` (e.g. one rank's islands)."""
    distinct = []
    for config in configs:
        if config not in distinct:
            distinct.append(config)
    return sum(warm_up(config, dim) for config in distinct)
