"""A fitness for the requeue test: the sphere function, plus a fixed sleep per batch.

The sleep makes a run last long enough for Slurm's time-limit signal to interrupt it
(the signal comes up to ~30 s after the start of a 1-minute job) while costing no CPU;
it does not change any fitness value, so runs stay deterministic.
"""

from __future__ import annotations

import time

import numpy as np

#: seconds slept per batch (one batch per island and generation)
SECONDS_PER_BATCH = 0.1


def slow_sphere(genomes: np.ndarray) -> np.ndarray:
    """Sum of squares of each row of ``genomes`` (shape (n, dim)), after a sleep."""
    time.sleep(SECONDS_PER_BATCH)
    return np.sum(np.square(genomes, dtype=np.float64), axis=1)
