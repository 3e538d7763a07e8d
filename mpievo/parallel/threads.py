"""One BLAS thread per rank by default.

Ranks already use the cores; a multi-threaded BLAS inside each rank oversubscribes
them, and OpenBLAS's spinning threads then slow small matrix products (a 256 x 100
batch times a 100 x 100 rotation) by one to two orders of magnitude on a busy node.
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
    return "threadpoolctl"
