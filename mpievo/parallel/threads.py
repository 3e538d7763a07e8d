"""One BLAS (and Numba, and torch) thread per rank by default.

Ranks already use the cores; a multi-threaded BLAS inside each rank oversubscribes
them, and OpenBLAS's spinning threads then slow small matrix products (a 256 x 100
batch times a 100 x 100 rotation) by one to two orders of magnitude on a busy node.
The large-genome breeding kernels are parallel Numba loops: the same limit applies
(their results do not depend on the thread count).

The order matters. Starting Numba's OpenMP threading layer (its first thread query)
sets the calling thread's OpenMP thread count back to all cores, in the libgomp that
torch's CPU build shares; torch's intra-op pool reads that count. Limited before Numba
started, a torch fitness ran on two threads per rank and was 10x slower on a busy
2-core machine (GPT-2 forward, torch 2.13 CPU). So Numba is started and limited first,
then threadpoolctl limits every OpenMP and BLAS pool, then torch (where imported) gets
its own count, each restored when the stack closes.
"""

from __future__ import annotations

import contextlib
import sys

from threadpoolctl import threadpool_limits


def limit_blas_threads(threads: int, stack: contextlib.ExitStack) -> str:
    """Limit the BLAS/OpenMP thread pools (and Numba's, and torch's intra-op pool where
    torch is imported) to ``threads`` until ``stack`` closes.

    Args:
        threads: threads per rank; 0 leaves the libraries' defaults.

    Returns:
        How the limit was applied: "threadpoolctl" or "unchanged".
    """
    if threads <= 0:
        return "unchanged"
    set_torch_threads = _restore_torch_threads(stack)     # read before Numba's start changes it
    _limit_numba_threads(threads, stack)       # next: starting Numba's layer resets OpenMP's count
    stack.enter_context(threadpool_limits(limits=threads))
    set_torch_threads(threads)
    return "threadpoolctl"


def _limit_numba_threads(threads: int, stack: contextlib.ExitStack) -> None:
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    stack.callback(numba.set_num_threads, before)


def _restore_torch_threads(stack: contextlib.ExitStack):
    """Where torch is imported, its intra-op thread count now, restored last when
    ``stack`` closes; returns the setter (a no-op without torch). Never imports torch:
    a fitness that imports it later reads the OpenMP count threadpoolctl set."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):
        return lambda threads: None
    stack.callback(torch.set_num_threads, torch.get_num_threads())
    return torch.set_num_threads
