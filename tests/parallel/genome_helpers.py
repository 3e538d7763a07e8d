"""A small model-merging-like problem with base models (for ``engine.genome`` tests)."""

from __future__ import annotations

import numpy as np

from mpievo.evo import Problem

DIM = 4000
BASES = np.random.default_rng(11).normal(size=(3, DIM)).astype(np.float32)
TARGET = (0.25 * BASES[0] + 0.45 * BASES[1] + 0.3 * BASES[2]).astype(np.float64)


def distance(genomes):
    return ((genomes - TARGET) ** 2).sum(axis=1)


#: named from jobs as "genome_helpers:MERGE"
MERGE = Problem(distance, DIM, -6, 6, bases=BASES, name="merge-like",
                initial=lambda rng, n: BASES[np.arange(n) % 3] + rng.normal(0, 0.01, (n, DIM)))


def genome_job(nranks: int, genome: str, **tables):
    """A validated 4-island job on :data:`MERGE` with ``engine.genome = genome``."""
    from parallel_helpers import small_job

    base = {"problem": {"name": "genome_helpers:MERGE", "dim": DIM, "lower": -6.0, "upper": 6.0,
                        "shift": False, "rotate": False},
            "engine": {"genome": genome, "capacity": 6, "batch_size": 6, "mutation_sigma": 0.002,
                       "stagnation_patience": 0}}
    for table, values in tables.items():
        base.setdefault(table, {}).update(values)
    return small_job(nranks, **base)
