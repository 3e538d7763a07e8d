"""The counter-based generator's CUDA kernels (mpievo.kernels.random) against the host:
the same integer words bit for bit, the same normals within 2 ulps (the same float
operations; bit-identical expected, see the module docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.kernels import random as kr
from mpievo.kernels.cuda.reduce import launch_dims

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaWarning")

KEYS = [(0, 0, 0, 0), (0xA4093822, 0x299F31D0, 7, 1), (2**32 - 1, 5, 2**32 - 1, 6)]


def _device_fill(name, shape, dtype, key, base):
    from numba import cuda

    out = cuda.device_array(shape, dtype)
    blocks, threads = launch_dims(shape[0])
    kr.device_kernel(name)[blocks, threads](out, np.uint64(base), *(np.uint64(k) for k in key))
    return out.copy_to_host()


@pytest.mark.parametrize("key", KEYS)
def test_device_words_are_the_host_words(key):
    base = 2**32 - 20  # crosses into the counter's second word
    want = kr.words(key, base, 40)
    got = _device_fill("words", (40, 4), np.uint32, key, base)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("key", KEYS)
def test_device_normals_match_the_host(key):
    want = kr.normals(key, 3, 64)
    got = _device_fill("normals", (64, 2), np.float32, key, 3)
    np.testing.assert_array_max_ulp(got, want, maxulp=2)
    assert np.all(np.isfinite(got)) and np.abs(got).max() > 1.0


def test_device_functions_compile_once():
    assert kr.device_functions() is kr.device_functions()
    assert set(kr.device_functions()) == {"block", "uniform_word", "log_unit", "normal_pair"}
