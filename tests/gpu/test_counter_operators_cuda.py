"""Device counter-based breeding kernels (mpievo.kernels.cuda.counter_operators) against
the host kernels (mpievo.kernels.counter_operators) on the same inputs: the same bits,
except SBX on a real GPU (its pow may differ in the last bit)."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.kernels import counter_operators as host
from mpievo.kernels.cuda import counter_operators as dev
from mpievo.kernels.cuda.reduce import simulator_enabled
from mpievo.kernels.operators import BOUND_MODES

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaWarning")

DTYPES = [np.float32, np.float64]
KEY = (0xA4093822, 0x299F31D0, 7, 1)
BASE = 2**32 - 9  # the block index crosses into the counter's second word


def _host_key():
    return tuple(np.uint64(k) for k in KEY)


def _problem(dtype, n, dim, seed=0):
    """Parents, interpolation inputs, a box of varying width, and starting children."""
    rng = np.random.default_rng(seed)
    lower = rng.uniform(-2.0, -0.5, dim).astype(dtype)
    upper = (lower + rng.uniform(0.5, 3.0, dim)).astype(dtype)
    genomes = rng.uniform(lower, upper, (5, dim)).astype(dtype)
    idx_a, idx_b = rng.integers(0, 5, n), rng.integers(0, 5, n)
    omega = rng.uniform(-0.3, 1.3, n).astype(dtype)  # extrapolates: the clip acts
    steps = rng.uniform(0.2, 1.0, n).astype(dtype)  # large: mutated genes leave the box
    x = rng.uniform(lower, upper, (n, dim)).astype(dtype)
    return genomes, idx_a, idx_b, omega, steps, (upper - lower).astype(dtype), lower, upper, x


def _plan(rate):
    inv_log_q = 1.0 / np.log1p(-rate) if 0.0 < rate < 1.0 else 0.0
    return host.rate_threshold(rate), inv_log_q


def _vary_both(dtype, mode, rate, dense, interpolate, n, dim, seed=0):
    """(host children, host counts, device children, device counts) from the same inputs."""
    from numba import cuda

    genomes, ia, ib, omega, steps, scale, lower, upper, x = _problem(dtype, n, dim, seed)
    threshold, inv_log_q = _plan(rate)
    want, want_counts = x.copy(), np.empty(n, np.int64)
    host.vary(genomes, ia, ib, omega, interpolate, want, steps, scale, lower, upper, BOUND_MODES[mode],
              np.uint64(threshold), inv_log_q, dense, _host_key(), np.uint64(BASE), want_counts)
    got = cuda.to_device(x)
    got_counts = dev.vary(cuda.to_device(genomes), ia, ib, omega, interpolate, got, steps,
                          cuda.to_device(scale), cuda.to_device(lower), cuda.to_device(upper),
                          BOUND_MODES[mode], threshold, inv_log_q, dense, KEY, BASE)
    return want, want_counts, got.copy_to_host(), got_counts


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["clip", "reflect", "resample"])
@pytest.mark.parametrize("dense, rate", [(True, 0.3), (False, 0.2), (True, 1.0)])
@pytest.mark.parametrize("interpolate", [True, False])
def test_vary_is_bit_identical_to_host(dtype, mode, dense, rate, interpolate):
    # 6 rows, 19 pairs: more than the simulator's grid, so both grid-stride loops turn
    want, want_counts, got, got_counts = _vary_both(dtype, mode, rate, dense, interpolate, 6, 37)
    assert isinstance(got_counts, np.ndarray) and got_counts.dtype == np.int64
    np.testing.assert_array_equal(got_counts, want_counts)
    assert 0 < want_counts.sum() <= 6 * 37
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("interpolate", [True, False])
def test_rate_zero_only_interpolates(interpolate):
    want, want_counts, got, got_counts = _vary_both(np.float32, "clip", 0.0, True, interpolate, 3, 9)
    np.testing.assert_array_equal(got_counts, np.zeros(3, np.int64))
    np.testing.assert_array_equal(got, want)
    unchanged = np.array_equal(got, _problem(np.float32, 3, 9)[-1])
    assert unchanged != interpolate


# 17,385 genes in the simulator take a minute or more (more on a busy machine): it ran
# past the default 120 s guard with its threads waiting on the simulator's lock around
# device-function calls, which looks like a stall but is only slowness
@pytest.mark.timeout(600)
@pytest.mark.parametrize("dense, rate", [(True, 0.05), (False, 0.01)])
def test_vary_across_tiles(dense, rate):
    # two tiles, the second odd and long enough to mutate: the sparse gaps restart at its start
    dim = host.TILE + 1001
    want, want_counts, got, got_counts = _vary_both(np.float32, "resample", rate, dense, False, 1, dim)
    start = _problem(np.float32, 1, dim)[-1]
    assert np.count_nonzero(want[0, host.TILE:] != start[0, host.TILE:]) >= 3
    np.testing.assert_array_equal(got_counts, want_counts)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", sorted(host.CROSSOVER_CODES))
@pytest.mark.parametrize("dim", [37, 8])
def test_cross_matches_host(dtype, kind, dim):
    from numba import cuda

    genomes, ia, ib, *_ = _problem(dtype, 5, dim)
    code, cast = host.CROSSOVER_CODES[kind], np.dtype(dtype).type
    args = (code, np.uint64(host.rate_threshold(0.3)), cast(0.5), cast(2.0), 15.0)
    want = np.empty((5, dim), dtype)
    host.cross(genomes, ia, ib, *args, _host_key(), np.uint64(BASE), want)
    out = cuda.device_array((5, dim), dtype)
    dev.cross(cuda.to_device(genomes), ia, ib, *args, KEY, BASE, out)
    got = out.copy_to_host()
    if kind == "sbx" and not simulator_enabled():
        # a GPU's pow may differ from libm's in the last bits; the simulator calls libm
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-12)
    else:
        np.testing.assert_array_equal(got, want)
    if kind == "uniform":
        assert (got == genomes[ib]).any() and (got == genomes[ia]).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_resample_outside_matches_host(dtype):
    from numba import cuda

    *_, lower, upper, x = _problem(dtype, 3, 37)
    x[:, ::3] += 4.0
    x[1, 5] = np.nan
    want = x.copy()
    want_moved = host.resample_outside(want, lower, upper, _host_key(), np.uint64(BASE))
    got = cuda.to_device(x)
    assert dev.resample_outside(got, lower, upper, KEY, BASE) == want_moved == 3 * 13 + 1
    np.testing.assert_array_equal(got.copy_to_host(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_fill_is_resampling_every_gene(dtype):
    # the host twin keys gene g like resample_outside: filling equals resampling an all-NaN batch
    *_, lower, upper, x = _problem(dtype, 3, 37)
    want = np.full_like(x, np.nan)
    host.resample_outside(want, lower, upper, _host_key(), np.uint64(BASE))
    host.uniform_fill(x, lower, upper, _host_key(), np.uint64(BASE))
    np.testing.assert_array_equal(x, want)
    assert np.all((x >= lower) & (x <= upper)) and len(np.unique(x)) == x.size


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_fill_matches_host(dtype):
    from numba import cuda

    *_, lower, upper, x = _problem(dtype, 3, 38)
    want = x.copy()
    host.uniform_fill(want, lower, upper, _host_key(), np.uint64(BASE))
    got = cuda.to_device(x)
    dev.uniform_fill(got, cuda.to_device(lower), cuda.to_device(upper), KEY, BASE)
    np.testing.assert_array_equal(got.copy_to_host(), want)


def test_vary_on_a_stream_writes_the_given_counts():
    from numba import cuda

    genomes, ia, ib, omega, steps, scale, lower, upper, x = _problem(np.float64, 2, 11)
    threshold, inv_log_q = _plan(0.4)
    want, want_counts = x.copy(), np.empty(2, np.int64)
    host.vary(genomes, ia, ib, omega, False, want, steps, scale, lower, upper, 0, np.uint64(threshold),
              inv_log_q, True, _host_key(), np.uint64(BASE), want_counts)
    stream = cuda.stream()
    got, counts = cuda.to_device(x, stream=stream), np.full(2, -1, np.int64)
    result = dev.vary(None, None, None, None, False, got, steps, scale, lower, upper, "clip", threshold,
                      inv_log_q, True, KEY, BASE, counts, stream=stream)
    assert result is counts
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_array_equal(got.copy_to_host(stream=stream), want)


def _vary_args(dtype=np.float32, **change):
    from numba import cuda

    genomes, ia, ib, omega, steps, scale, lower, upper, x = _problem(dtype, 2, 6)
    args = dict(genomes=cuda.to_device(genomes), idx_a=ia, idx_b=ib, omega=omega, interpolate=True,
                x=cuda.to_device(x), steps=steps, scale=scale, lower=lower, upper=upper, mode=0,
                threshold=host.rate_threshold(0.5), inv_log_q=0.0, dense=True, key=KEY, base=BASE)
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, message", [
    (dict(x=np.zeros((2, 6), np.float32)), TypeError, "expected x to be a numba device array, got numpy"),
    (dict(genomes=np.zeros((5, 6), np.float32)), TypeError, "expected genomes to be a numba device array"),
    (dict(lower=np.zeros(6, np.float64)), None, None),  # host arrays are cast to the genome dtype
    (dict(steps=np.zeros(3, np.float32)), ValueError, r"expected steps of shape \(2,\), got \(3,\)"),
    (dict(idx_b=np.zeros(1, np.int64)), ValueError, r"expected idx_b of shape \(2,\), got \(1,\)"),
    (dict(mode=7), ValueError, "expected bounds mode code among"),
    (dict(key=(1, 2, 3)), ValueError, "expected a stream key of four ints"),
    (dict(threshold=-1), ValueError, "expected a mutation threshold >= 0, got -1"),
    (dict(counts=np.zeros(2, np.int32)), TypeError, "expected counts to be a contiguous host numpy int64"),
])
def test_vary_argument_errors(change, error, message):
    if error is None:
        dev.vary(**_vary_args(**change))
        return
    with pytest.raises(error, match=message):
        dev.vary(**_vary_args(**change))


def test_device_arrays_of_another_dtype_are_refused():
    from numba import cuda

    with pytest.raises(TypeError, match="expected upper of dtype float32, got float64"):
        dev.vary(**_vary_args(upper=cuda.to_device(np.ones(6))))
    with pytest.raises(ValueError, match="expected genomes of dtype float32 and 6 genes"):
        dev.vary(**_vary_args(genomes=cuda.to_device(np.zeros((5, 6)))))
    x = cuda.to_device(np.zeros((2, 6), np.int64))
    with pytest.raises(TypeError, match="expected x of dtype float32 or float64, got int64"):
        dev.uniform_fill(x, np.zeros(6), np.ones(6), KEY, BASE)


def test_cross_and_resample_errors():
    from numba import cuda

    genomes = cuda.to_device(np.zeros((3, 6), np.float32))
    out = cuda.device_array((2, 6), np.float32)
    with pytest.raises(ValueError, match="expected a crossover code among"):
        dev.cross(genomes, [0, 1], [1, 2], 5, 0, 0.5, 2.0, 15.0, KEY, BASE, out)
    with pytest.raises(TypeError, match="expected out to be a numba device array"):
        dev.cross(genomes, [0, 1], [1, 2], 0, 0, 0.5, 2.0, 15.0, KEY, BASE, np.zeros((2, 6), np.float32))
    with pytest.raises(ValueError, match=r"expected lower of shape \(6,\), got \(5,\)"):
        dev.resample_outside(out, np.zeros(5), np.ones(6), KEY, BASE)
    with pytest.raises(ValueError, match="expected a first block >= 0, got -1"):
        dev.resample_outside(out, np.zeros(6), np.ones(6), KEY, -1)
