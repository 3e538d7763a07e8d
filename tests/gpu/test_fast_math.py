"""engine.device_math = "fast" (mpievo.kernels.cuda.fast_math): hardware normals and FMA
in the device mutation; runs repeat exactly, the normals are standard normals.

Under the simulator the fast formulas run in numpy float32, so these tests check the
mapping, the repeatability and the moments, not the GPU's approximate functions or
the speed: those are measured on a GPU (``mpievo bench gpu``, both modes).
"""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island, make_problem
from mpievo.evo import device, device_operators
from mpievo.kernels import counter_operators, random
from mpievo.kernels.cuda import (counter_kernels as cuda_counter_kernels, counter_operators as cuda_counter_operators)
from mpievo.kernels.cuda.reduce import simulator_enabled

KEY, BASE = (11, 22, 33, 44), 5
N, DIM = 32, 64   # 2048 normals: a few seconds in the simulator


def _mutation_normals(math_mode: str) -> np.ndarray:
    """Every gene mutated once from 0 with step 1 and scale 1 in a wide box: the normals."""
    from numba import cuda

    x = cuda.to_device(np.zeros((N, DIM), np.float32))
    ones = np.ones(DIM, np.float32)
    counts = cuda_counter_operators.vary(
        x, None, None, None, False, x, np.ones(N, np.float32), ones, -100 * ones, 100 * ones, "clip",
        counter_operators.rate_threshold(1.0), 0.0, True, KEY, BASE, math=math_mode)
    assert counts.tolist() == [DIM] * N
    return x.copy_to_host()


def _moments(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64).ravel()
    return np.array([z.mean(), z.var(), np.mean(z ** 3), np.mean(z ** 4)])


def test_fast_normals_repeat_exactly_and_have_the_host_normals_moments():
    fast = _mutation_normals("fast")
    assert fast.tobytes() == _mutation_normals("fast").tobytes()   # repeatable
    exact = _mutation_normals("exact")
    # the exact mode is the host generator: the reference, bit for bit (2 ulps allowed on
    # a GPU, as in test_counter_rng_cuda)
    host = random.normals(KEY, BASE, N * DIM // 2).reshape(N, DIM)
    if simulator_enabled():
        assert exact.tobytes() == host.tobytes()
    else:
        np.testing.assert_array_max_ulp(exact, host, maxulp=2)
    assert not np.array_equal(fast, exact)                        # another mapping to normals
    assert np.all(np.isfinite(fast)) and np.abs(fast).max() < 5.8  # the 24-bit radius's cut
    # mean, variance, third and fourth moments: 0, 1, 0, 3; standard errors at 2048
    # draws about 0.02, 0.03, 0.09, 0.22 -- tolerances of about 4 of them
    tolerance = np.array([0.09, 0.13, 0.35, 0.9])
    got, reference = _moments(fast), _moments(host)
    assert np.all(np.abs(got - reference) <= tolerance), (got, reference)
    assert np.all(np.abs(got - [0.0, 1.0, 0.0, 3.0]) <= tolerance), got
    # and the distribution, not just moments: deciles within a few standard errors
    deciles = np.linspace(0.1, 0.9, 9)
    np.testing.assert_allclose(np.quantile(fast, deciles), np.quantile(host, deciles), atol=0.12)


def test_the_two_modes_are_two_kernels_under_two_names():
    exact = cuda_counter_kernels.vary_dense_kernel("<f4", "exact")
    fast = cuda_counter_kernels.vary_dense_kernel("<f4", "fast")
    assert cuda_counter_kernels.vary_dense_kernel("<f4", "fast") is fast
    names = [(getattr(k, "py_func", None) or k.__wrapped__).__qualname__ for k in (exact, fast)]
    assert names[0] != names[1]   # separate disk-cache entries


def _run(math_mode: str, seed: int = 4):
    config = EngineConfig(device="cuda", device_math=math_mode, capacity=6, batch_size=4, population=6,
                          stagnation_patience=0, mutation_rate=0.5)
    island = Island(0, make_problem("rastrigin", 8), config, seed=seed)
    island.run(3)
    return device.to_host(island.archive.genomes).tobytes(), island.archive.fitness.tobytes()


def test_a_fast_island_repeats_exactly_and_differs_from_an_exact_one():
    fast = _run("fast")
    assert _run("fast") == fast
    assert _run("exact") != fast


def test_device_math_is_checked_before_any_work():
    with pytest.raises(Exception, match="device_math.*'quick'"):
        EngineConfig(device_math="quick")
    with pytest.raises(ValueError, match=r"expected device math among \('exact', 'fast'\), got 'quick'"):
        with device_operators.device_math("quick"):
            pass
    from numba import cuda

    x = cuda.device_array((2, 2), np.float32)
    with pytest.raises(ValueError, match="expected device math among"):
        cuda_counter_operators.vary(x, None, None, None, False, x, np.ones(2, np.float32),
                                    np.ones(2, np.float32), np.zeros(2, np.float32),
                                    np.ones(2, np.float32), "clip", 1, 0.0, True, KEY, 0, math="quick")
