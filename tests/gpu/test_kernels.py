"""Device reduction kernels (mpievo.kernels.cuda.reduce) against the host path."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mpievo.kernels import host
from mpievo.kernels.cuda import reduce as kc

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")

OPS = ("sum", "prod", "max", "min", "mean")
DTYPES = [np.dtype(d) for d in host.SUPPORTED_DTYPES]


def _operands(dtype, rng, n=67):
    """Two arrays with wrap-around, NaN (both sides) and infinities where they apply."""
    if host.is_floating(dtype):
        a = (rng.standard_normal(n) * 40).astype(dtype)
        b = (rng.standard_normal(n) * 40).astype(dtype)
        a[[3, 9]] = np.nan
        b[[5, 9]] = np.nan
        a[11], b[12] = np.inf, -np.inf
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return a, b


def _host_result(a, b, op):
    out = a.copy()
    host.REDUCE_OPS[op](a, b, out=out)
    return out


def _same(got, want):
    """Equal values with NaN where NaN; bitwise for non-NaN entries."""
    def nans(a):
        return np.isnan(a.astype(np.float64)) if host.is_floating(a.dtype) else np.zeros(a.shape, bool)

    nan = nans(want)
    np.testing.assert_array_equal(nans(got), nan)
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
    np.testing.assert_array_equal(got[~nan].view(width), want[~nan].view(width))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_matches_host_for_every_op(dtype, rng):
    from numba import cuda

    for op in OPS:
        if op == "mean" and not host.is_floating(dtype):
            with pytest.raises(ValueError, match="floating-point"):
                kc.reduce_kernel(op, kc.dtype_key(dtype))
            continue
        a, b = _operands(dtype, rng)
        out = cuda.device_array(a.shape, kc.kernel_dtype(dtype))
        kc.device_reduce(out, cuda.to_device(a.view(kc.kernel_dtype(dtype))),
                         cuda.to_device(b.view(kc.kernel_dtype(dtype))), op, dtype=dtype)
        _same(out.copy_to_host().view(dtype), _host_result(a, b, op))


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_propagate_nan_from_either_side(op):
    from numba import cuda

    a = np.array([np.nan, 1.0, np.nan, 2.0], np.float32)
    b = np.array([1.0, np.nan, np.nan, 3.0], np.float32)
    d = cuda.to_device(a)
    kc.device_reduce_into(d, cuda.to_device(b), op)
    got = d.copy_to_host()
    assert np.isnan(got[:3]).all()
    assert got[3] == (3.0 if op == "max" else 2.0)


def test_operand_order_is_kept():
    """out = a op b, not b op a: the NaN payload of the left operand wins, as on the host."""
    from numba import cuda

    quiet = np.array([0x7FC00001], np.uint32).view(np.float32)
    other = np.array([0x7FC00002], np.uint32).view(np.float32)
    out = cuda.device_array(1, np.float32)
    kc.device_reduce(out, cuda.to_device(quiet), cuda.to_device(other), "max")
    host_out = np.maximum(quiet, other)
    assert out.copy_to_host().view(np.uint32)[0] == host_out.view(np.uint32)[0] == 0x7FC00001


def test_integer_results_wrap_like_numpy():
    from numba import cuda

    a = np.array([127, -128, 100], np.int8)
    b = np.array([1, -1, 100], np.int8)
    d = cuda.to_device(a)
    kc.device_reduce_into(d, cuda.to_device(b), "sum")
    np.testing.assert_array_equal(d.copy_to_host(), a + b)


def test_half_and_bfloat16_are_computed_in_float32_and_rounded_once():
    """1 + 2**-11 is not a float16 sum of its rounded parts; float32 then one rounding is."""
    from numba import cuda

    a = np.array([2048.0, 1.0, 3.0], np.float16)
    b = np.array([1.0, 2.0 ** -11, 1.0 / 3.0], np.float16)
    d = cuda.to_device(a)
    kc.device_reduce_into(d, cuda.to_device(b), "sum")
    want = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(d.copy_to_host(), want)


def test_bfloat16_conversion_edge_cases():
    """Round-to-nearest-even ties, overflow to inf, NaN stays NaN, subnormals: as ml_dtypes."""
    from numba import cuda

    bf16 = host.BFLOAT16
    bits = np.array([0x3F80, 0x3F81, 0x7F7F, 0x0001, 0x8001, 0x7F80, 0xFF80, 0x7FC0, 0x0000, 0x8000],
                    np.uint16)
    a = bits.view(bf16)
    b = np.array([2.0 ** -9, 2.0 ** -9, 2.0 ** 120, 0, 0, 1, -1, 1, -0.0, 0.0], np.float32).astype(bf16)
    d = cuda.to_device(a.view(np.uint16))
    kc.device_reduce_into(d, cuda.to_device(b.view(np.uint16)), "sum", dtype=bf16)
    _same(d.copy_to_host().view(bf16), _host_result(a, b, "sum"))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
@pytest.mark.parametrize("n", [1, 3, 7, 4096])
def test_divide_matches_host_divide(dtype, n, rng):
    from numba import cuda

    dtype = host.BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    x = (rng.standard_normal(50) * 100).astype(dtype)
    d = cuda.to_device(x.view(kc.kernel_dtype(dtype)))
    kc.device_divide_into(d, n, dtype=dtype)
    want = x.copy()
    host.divide_into(want, n)
    _same(d.copy_to_host().view(dtype), want)


def test_divide_rejects_integers_and_bad_divisors():
    from numba import cuda

    with pytest.raises(ValueError, match="floating-point"):
        kc.device_divide_into(cuda.to_device(np.ones(3, np.int32)), 2)
    with pytest.raises(ValueError, match="divisor >= 1"):
        kc.device_divide_into(cuda.to_device(np.ones(3, np.float32)), 0)


def test_grid_stride_loop_covers_more_elements_than_threads(rng):
    from numba import cuda

    blocks, threads = kc.launch_dims(1 << 40)  # the largest grid this device launches
    n = blocks * threads * 3 + 5
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    d = cuda.to_device(a)
    kc.device_reduce_into(d, cuda.to_device(b), "sum")
    np.testing.assert_array_equal(d.copy_to_host(), a + b)


def test_empty_arrays_launch_nothing():
    from numba import cuda

    d = cuda.device_array(0, np.float32)
    kc.device_reduce_into(d, cuda.device_array(0, np.float32), "sum")
    kc.device_divide_into(d, 3)
    assert d.copy_to_host().size == 0


def test_shape_and_op_errors():
    from numba import cuda

    with pytest.raises(ValueError, match="expected operands of shape"):
        kc.device_reduce_into(cuda.device_array(3, np.float32), cuda.device_array(4, np.float32), "sum")
    with pytest.raises(ValueError, match="expected 1-D"):
        square = cuda.device_array((2, 2), np.float32)
        kc.device_reduce_into(square, square, "sum")
    with pytest.raises(ValueError, match="expected op in"):
        kc.reduce_kernel("xor", kc.dtype_key(np.int32))
    f32 = cuda.device_array(4, np.float32)
    with pytest.raises(TypeError, match="expected a device array of dtype float64"):
        kc.device_reduce(f32, f32, f32, "sum", dtype=np.float64)
    with pytest.raises(TypeError, match="expected a dtype among"):
        kc.reduce_kernel("sum", kc.dtype_key(np.complex64))


def test_kernels_are_cached_per_op_and_dtype():
    assert kc.reduce_kernel("sum", "<f4") is kc.reduce_kernel("sum", "<f4")
    assert kc.reduce_kernel("sum", "<f4") is not kc.reduce_kernel("max", "<f4")
    assert kc.divide_kernel("bfloat16") is kc.divide_kernel("bfloat16")


@pytest.mark.parametrize("n, sm, expected", [
    (0, 80, (0, 256)), (1, 80, (1, 256)), (256, 80, (1, 256)), (257, 80, (2, 256)),
    (1 << 30, 80, (640, 256)), (1 << 30, None, (kc.MAX_BLOCKS, 256)),
])
def test_launch_config(n, sm, expected):
    assert kc.launch_config(n, sm_count=sm) == expected


def test_launch_config_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n >= 0"):
        kc.launch_config(-1)
    with pytest.raises(ValueError, match="sm_count"):
        kc.launch_config(10, sm_count=0)
    with pytest.raises(ValueError, match="threads"):
        kc.launch_config(10, threads=0)


def test_the_backend_is_detected():
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        assert kc.simulator_enabled()
        assert kc.device_sm_count() is None
        assert kc.launch_dims(1 << 40) == (kc.SIMULATOR_BLOCKS, kc.SIMULATOR_THREADS)
    else:
        assert not kc.simulator_enabled()
        sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
        assert kc.device_sm_count() == sm_count > 0
        assert kc.launch_dims(1 << 40) == (sm_count * kc.BLOCKS_PER_SM, kc.THREADS_PER_BLOCK)
