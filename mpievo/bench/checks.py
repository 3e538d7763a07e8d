"""The one timing and result-check module of the benchmarks.

A benchmark times a path and checks its result against a reference; a wrong result
raises :class:`WrongResultError` naming the case, so that no number is reported for it.
Device timings synchronise or use CUDA events; numba.cuda is imported on first use.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

#: device calls per timed round: issued back to back, each call's launch overhead hides
#: behind the previous call's work (one call per round times the launch at 64 MiB)
CALLS_PER_ROUND = 10


class WrongResultError(RuntimeError):
    """A benchmarked path returned a result that differs from its reference."""


def event_seconds(run, repeats: int) -> float:
    """Device seconds per call of ``run``: CUDA events around CALLS_PER_ROUND calls issued
    back to back (median over ``repeats`` rounds, after one warm-up call)."""
    from numba import cuda

    run()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cuda.event(), cuda.event()
        start.record()
        for _ in range(CALLS_PER_ROUND):
            run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / CALLS_PER_ROUND)  # milliseconds
    return statistics.median(times)


def synced_seconds(run, repeats: int) -> float:
    """Median wall time of ``run`` with the device synchronised before and after."""
    from numba import cuda

    run()
    times = []
    for _ in range(repeats):
        cuda.synchronize()
        start = time.perf_counter()
        run()
        cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def no_sync() -> None:
    """The synchronisation of host work: nothing to wait for."""


def expect_equal(got: np.ndarray, want: np.ndarray, case: str) -> None:
    """Raise :class:`WrongResultError` naming ``case`` unless the bits are equal."""
    if got.shape != want.shape or not np.array_equal(got.view(np.uint8), want.view(np.uint8)):
        wrong = int(np.count_nonzero(got != want)) if got.shape == want.shape else got.size
        raise WrongResultError(f"{case}: expected the numpy reference, got {wrong} differing "
                               f"of {want.size} elements")
