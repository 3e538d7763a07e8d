"""Thread limits per rank: BLAS and the parallel Numba kernels."""

import contextlib

import numba

from mpievo.parallel.threads import limit_blas_threads


def test_numba_threads_are_limited_and_restored():
    before = numba.get_num_threads()
    with contextlib.ExitStack() as stack:
        assert limit_blas_threads(1, stack) == "threadpoolctl"
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before


def test_zero_leaves_the_libraries_alone():
    before = numba.get_num_threads()
    with contextlib.ExitStack() as stack:
        assert limit_blas_threads(0, stack) == "unchanged"
        assert numba.get_num_threads() == before
