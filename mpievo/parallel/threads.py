"""One BLAS (and Numba) thread per rank by default.

Ranks already use the cores; a multi-threaded BLAS inside each rank oversubscribes
them, and OpenBLAS's spinning threads then slow small matrix products (a 256 x 100
batch times a 100 x 100 rotation) by one to two orders of magnitude on a busy node.
The large-genome breeding kernels are parallel Numba loops: the same limit applies
(their results do not depend on the thread count).
"""

from __future__ import annotations

import contextlib

from threadpoolctl import threadpool_limits


def limit_blas_threads(threads: int, stack: contextlib.ExitStack) -> str:
    """Limit the BLAS/OpenMP thread pools to ``threads`` until ``stack`` closes.

    Args:
        threads: threads per rank; 0 leaves the libraries' defaults.

    Returns:
        How the limit was applied: "threadpoolctl" or "unchanged".
    """
    if threads <= 0:
        return "unchanged"
    stack.enter_context(threadpool_limits(limits=threads))
    _limit_numba_threads(threads, stack)
    return "threadpoolctl"


def _limit_numba_threads(threads: int, stack: contextlib.ExitStack) -> None:
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    stack.callback(numba.set_num_threads, before)
