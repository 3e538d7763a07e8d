"""Device variation operators (mpievo.kernels.cuda.operators) against the host kernels."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo import operators as evo_ops
from mpievo.kernels.cuda import operators as dev_ops
from mpievo.kernels import operators as host_ops

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaWarning",
                                        "ignore:overflow encountered:RuntimeWarning")

DTYPES = [np.float32, np.float64]
MODES = ["clip", "reflect", "resample"]


def _problem(dtype, rng, m=6, n=5, dim=9):
    lower, upper = evo_ops.box_arrays(-np.ones(dim), np.full(dim, 2.0), dtype)
    genomes = rng.uniform(-1, 2, (m, dim)).astype(dtype)
    idx_a, idx_b = rng.integers(0, m, n), rng.integers(0, m, n)
    return genomes, idx_a, idx_b, lower, upper


@pytest.mark.parametrize("dtype", DTYPES)
def test_interpolate_rows_is_bit_identical_to_host(dtype, rng):
    from numba import cuda

    genomes, ia, ib, lower, upper = _problem(dtype, rng)
    omega = rng.random(len(ia)).astype(dtype)
    omega[0] = 1.7  # extrapolates: the clip must act
    want = np.empty((len(ia), genomes.shape[1]), dtype)
    host_ops.interpolate_rows(genomes, ia, ib, omega, lower, upper, want)
    out = cuda.device_array(want.shape, dtype)
    dev_ops.interpolate_rows(cuda.to_device(genomes), ia, ib, omega, lower, upper, out)
    np.testing.assert_array_equal(out.copy_to_host(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_rows_matches_engine_uniform_crossover(dtype, rng):
    from numba import cuda

    genomes, ia, ib, lower, upper = _problem(dtype, rng)
    want = evo_ops.uniform_crossover(genomes, ia, ib, np.random.default_rng(3), lower, upper,
                                     swap_prob=0.3)
    uniforms = np.random.default_rng(3).random(want.shape)  # the engine's draw
    out = cuda.device_array(want.shape, dtype)
    dev_ops.uniform_rows(cuda.to_device(genomes), ia, ib, uniforms, 0.3, out)
    np.testing.assert_array_equal(out.copy_to_host(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rate", [0.0, 0.35, 1.0])
def test_mutate_sparse_is_bit_identical_to_host(dtype, mode, rate, rng):
    from numba import cuda

    genomes, _, _, lower, upper = _problem(dtype, rng, m=5)
    draws = evo_ops.draw_mutation(np.random.default_rng(7), 5, genomes.shape[1], rate, dtype, mode)
    steps = (rng.random(5) * 3).astype(dtype)  # large steps: many genes leave the box
    scale = (upper - lower).astype(dtype)
    want = genomes.copy()
    host_ops.mutate_sparse(want, draws.counts, draws.pos_uniforms, draws.normals,
                           draws.resample_uniforms, steps, scale, lower, upper,
                           host_ops.BOUND_MODES[mode])
    x = cuda.to_device(genomes)
    dev_ops.mutate_sparse(x, draws.counts, draws.pos_uniforms, draws.normals,
                          draws.resample_uniforms, steps, scale, lower, upper, mode)
    np.testing.assert_array_equal(x.copy_to_host(), want)


def test_breed_matches_host_fused_kernel(rng):
    from numba import cuda

    dtype = np.float32
    genomes, ia, ib, lower, upper = _problem(dtype, rng)
    n, dim = len(ia), genomes.shape[1]
    omega = rng.random(n).astype(dtype)
    draws = evo_ops.draw_mutation(np.random.default_rng(2), n, dim, 0.5, dtype, "reflect")
    steps, scale = np.full(n, 0.5, dtype), (upper - lower).astype(dtype)
    want = np.empty((n, dim), dtype)
    host_ops.breed_interpolate_mutate(genomes, ia, ib, omega, draws.counts, draws.pos_uniforms,
                                      draws.normals, draws.resample_uniforms, steps, scale, lower,
                                      upper, host_ops.BOUND_REFLECT, want)
    out = cuda.device_array((n, dim), dtype)
    dev_ops.breed_interpolate_mutate(cuda.to_device(genomes), ia, ib, omega, draws.counts,
                                     draws.pos_uniforms, draws.normals, draws.resample_uniforms,
                                     steps, scale, lower, upper, "reflect", out)
    np.testing.assert_array_equal(out.copy_to_host(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["clip", "reflect"])
def test_bound_rows_matches_host(dtype, mode, rng):
    from numba import cuda

    _, _, _, lower, upper = _problem(dtype, rng)
    x = (rng.standard_normal((5, len(lower))) * 4).astype(dtype)
    x[0, 0] = np.nan
    want = x.copy()
    moved = host_ops.bound_rows(want, lower, upper, host_ops.BOUND_MODES[mode])
    d = cuda.to_device(x)
    assert dev_ops.bound_rows(d, lower, upper, mode) == moved > 0
    np.testing.assert_array_equal(d.copy_to_host(), want)


def test_bound_rows_refuses_resample():
    from numba import cuda

    with pytest.raises(ValueError, match="'clip' or 'reflect'"):
        dev_ops.bound_rows(cuda.to_device(np.zeros((2, 3))), np.zeros(3), np.ones(3), "resample")


def test_gaussian_mutation_rng_properties(rng):
    """Reproducible per seed, counts match the changed genes, results stay in the box."""
    from numba import cuda

    n, dim = 4, 6
    lower, upper = np.full(dim, -1.0, np.float32), np.full(dim, 1.0, np.float32)
    start = rng.uniform(-1, 1, (n, dim)).astype(np.float32)
    steps, scale = np.full(n, 5.0, np.float32), np.ones(dim, np.float32)
    results = []
    for _ in range(2):
        x = cuda.to_device(start)
        counts = dev_ops.gaussian_mutation_rng(x, dev_ops.make_rng_states(n, seed=11), 0.5, steps,
                                               scale, lower, upper, "clip")
        results.append((x.copy_to_host(), counts.copy_to_host()))
    (x1, c1), (x2, c2) = results
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(c1, (x1 != start).sum(axis=1))
    assert 0 < c1.sum() < n * dim
    assert ((x1 >= lower) & (x1 <= upper)).all()


def test_gaussian_mutation_rng_rate_extremes(rng):
    from numba import cuda

    n, dim = 3, 4
    box = np.full(dim, -10.0, np.float64), np.full(dim, 10.0, np.float64)
    start = rng.uniform(-1, 1, (n, dim))
    x = cuda.to_device(start)
    counts = dev_ops.gaussian_mutation_rng(x, dev_ops.make_rng_states(n, seed=1), 0.0, np.ones(n),
                                           np.ones(dim), *box)
    np.testing.assert_array_equal(x.copy_to_host(), start)
    assert counts.copy_to_host().sum() == 0
    counts = dev_ops.gaussian_mutation_rng(x, dev_ops.make_rng_states(n, seed=1), 1.0, np.ones(n),
                                           np.ones(dim), *box, mode="resample")
    assert (counts.copy_to_host() == dim).all()
    assert (x.copy_to_host() != start).all()


def test_host_genomes_are_refused():
    from numba import cuda

    genomes = np.zeros((3, 2), np.float32)
    with pytest.raises(TypeError, match="expected genomes to be a numba device array"):
        dev_ops.interpolate_rows(genomes, [0], [1], np.ones(1, np.float32), np.zeros(2), np.ones(2),
                                 cuda.device_array((1, 2), np.float32))


def test_argument_errors():
    from numba import cuda

    g = cuda.to_device(np.zeros((3, 2), np.float32))
    out = cuda.device_array((1, 2), np.float32)
    with pytest.raises(ValueError, match="expected idx_b of length 1"):
        dev_ops.interpolate_rows(g, [0], [1, 2], np.ones(1), np.zeros(2), np.ones(2), out)
    with pytest.raises(TypeError, match="float32 or float64"):
        dev_ops.bound_rows(cuda.to_device(np.zeros((2, 2), np.int32)), np.zeros(2), np.ones(2), "clip")
    with pytest.raises(ValueError, match="bounds mode"):
        dev_ops.bound_rows(g, np.zeros(2), np.ones(2), "wrap")
    with pytest.raises(ValueError, match="expected 2 normals"):
        dev_ops.mutate_sparse(g, np.array([1, 1, 0]), np.zeros(2), np.zeros(1, np.float32), np.empty(0),
                              np.ones(3), np.ones(2), np.zeros(2), np.ones(2), "clip")
    with pytest.raises(ValueError, match="mutation rate"):
        dev_ops.gaussian_mutation_rng(g, None, 1.5, np.ones(3), np.ones(2), np.zeros(2), np.ones(2))
