"""Module-level fitness functions for the time-limit tests (picklable for worker processes)."""

from __future__ import annotations

import os
import time

import numpy as np


def sphere(genome):
    return float(np.sum(np.asarray(genome) ** 2))


def sleepy(genome):
    """Sleeps for genome[0] seconds, then returns genome[0]."""
    time.sleep(float(genome[0]))
    return float(genome[0])


def spin(genome):
    """Pure-Python busy loop for genome[0] seconds."""
    end = time.monotonic() + float(genome[0])
    count = 0
    while time.monotonic() < end:
        count += 1
    return float(count)


def swallowing(genome):
    """Busy loop that catches every Exception, as careless user code does."""
    end = time.monotonic() + float(genome[0])
    while time.monotonic() < end:
        try:
            sum(range(100))
        except Exception:
            pass
    return 1.0


def failing(genome):
    raise ValueError(f"bad genome {list(genome)}")


def dying(genome):
    os._exit(3)


def mpi_state(genome):
    """Whether MPI got initialised in this process (it must not in a worker)."""
    from mpi4py import MPI

    return bool(MPI.Is_initialized())
