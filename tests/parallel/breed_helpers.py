"""A model-sized-row problem for evaluator breeding tests (``run.breed``): rows of the
counter-based kernels' size (100,000 genes), small enough to run in a blink."""

from __future__ import annotations

import numpy as np

from mpievo.evo import Problem
from mpievo.evo.operators import COUNTER_DIM

DIM = COUNTER_DIM
BASES = np.random.default_rng(5).normal(0, 0.5, size=(2, DIM)).astype(np.float32)
TARGET = (0.3 * BASES[0] + 0.7 * BASES[1]).astype(np.float64)


def distance(genomes):
    """Row by row (the same bits for any block of rows)."""
    return np.array([float(np.dot(row - TARGET, row - TARGET)) for row in np.asarray(genomes, np.float64)])


#: named from jobs as "breed_helpers:BIG"
BIG = Problem(distance, DIM, -4, 4, bases=BASES, name="big-rows")


def breed_job(nranks: int, genome: str = "dense", dtype: str = "float32", **tables):
    """A validated job of 2 GA islands on :data:`BIG` (5 generations, migration every 2)."""
    from parallel_helpers import small_job

    config = {"run": {"islands": 2, "generations": 5, "log_every": 5},
              "problem": {"name": "breed_helpers:BIG", "dim": DIM, "lower": -4.0, "upper": 4.0,
                          "shift": False, "rotate": False},
              "engine": {"algorithm": "ga", "genome": genome, "dtype": dtype, "capacity": 4,
                         "batch_size": 3, "mutation_sigma": 0.02, "stagnation_patience": 0},
              "migration": {"interval": 2, "emigrants": 1}}
    for table, values in tables.items():
        config.setdefault(table, {}).update(values)
    return small_job(nranks, **config)
