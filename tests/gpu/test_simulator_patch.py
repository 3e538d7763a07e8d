"""The simulator's shared arrays under thread interleaving (the conftest patch).

Unpatched, ``FakeCUDAShared.array`` looks the block's array up, allocates one if it is
missing, then stores it: a thread switch inside the allocation lets a second thread of
the block miss too, and the two threads then write different arrays (a block reduction
loses values). Here the allocation itself yields the GIL (a shape whose ``__index__``
sleeps), so every thread switches exactly there: unpatched the threads get different
arrays every time; patched they share one.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from conftest import SIMULATOR

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="a check of the CUDA simulator's patch")


class _SlowLength:
    """An array length whose conversion sleeps, so the allocating thread lets others run."""

    def __index__(self):
        time.sleep(0.01)
        return 8


def test_the_threads_of_a_block_share_one_shared_array_when_they_interleave():
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    shared = FakeCUDAShared(0)
    start = threading.Barrier(4)
    got = []

    def thread():
        start.wait()
        got.append(shared.array(_SlowLength(), np.float64))  # one line: one array per block

    threads = [threading.Thread(target=thread) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(a is got[0] for a in got)
