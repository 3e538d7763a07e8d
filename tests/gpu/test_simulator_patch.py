"""The simulator's shared arrays under fine thread interleaving (conftest patch).

Without ``_atomic_shared_arrays`` two threads of a block can get two different
``cuda.shared.array`` objects, and a block's reduction then misses values. A switch
interval of 1 us makes that interleaving common (about 2 % of launches unpatched);
the patch must keep every sum right.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from numba import cuda, float64

from conftest import SIMULATOR

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="a check of the CUDA simulator's patch")


def test_every_thread_of_a_block_shares_one_array_under_fine_interleaving():
    @cuda.jit  # the simulator swaps the kernel's global ``cuda``: imported at module level
    def block_sums(out):
        a = cuda.shared.array(8, float64)
        b = cuda.shared.array(8, float64)
        t = cuda.threadIdx.x
        a[t] = t + 1.0
        b[t] = 2.0 * (t + 1.0)
        cuda.syncthreads()
        if t == 0:
            s = 0.0
            for i in range(8):
                s += a[i] + b[i]
            out[cuda.blockIdx.x] = s

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        sums = []
        for _ in range(400):  # about 2 % of launches went wrong unpatched (8 of 400)
            out = np.zeros(2)
            block_sums[2, 8](out)
            sums.append(out)
    finally:
        sys.setswitchinterval(before)
    assert np.all(np.array(sums) == 3 * 36.0)
