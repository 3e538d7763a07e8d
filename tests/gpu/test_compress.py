"""Compression wires, bit-cast kernels, staging pool and top-k with error feedback (one rank)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mpievo.comm.wire import cast as cast_wire, host as wires
from mpievo.comm import staging, topk
from mpievo.kernels import bitcast, host


# ------------------------------------------------------------------ staging pool
def test_pool_reuses_the_best_fitting_free_slot():
    pool = staging.StagingPool()
    small, large = pool.take(10), pool.take(staging.SLOT_GRANULE + 1)
    assert small.capacity == staging.SLOT_GRANULE and large.capacity == 2 * staging.SLOT_GRANULE
    pool.give(large)
    pool.give(small)
    assert pool.take(100) is small
    assert pool.take(100) is large
    assert pool.allocated == 2


def test_pool_waits_for_a_slots_pending_copy():
    waited = []

    class Event:
        def synchronize(self):
            waited.append(True)

    pool = staging.StagingPool()
    slot = pool.take(8)
    pool.give(slot, Event())
    assert waited == []
    assert pool.take(8) is slot and waited == [True] and slot.event is None


def test_slot_views():
    slot = staging.StagingPool().take(64)
    view = slot.view(np.float32, 5)
    assert view.shape == (5,) and view.dtype == np.float32


# ----------------------------------------------------------- conversion kernels
WIRE_DTYPES = {"fp16": np.dtype(np.float16), "bf16": host.BFLOAT16}
EDGES = np.array([0.0, -0.0, 1.0, 65504, 65519.99, 65520, -70000, 1e30, np.inf, -np.inf, np.nan,
                  6e-8, 2.98e-8, 2.99e-8, 5.96e-8, 1e-5, 6.103515625e-05, 1.00048828125,
                  1.00146484375, 1.00390625, 1.01171875, 3.4e38, 1e-40], np.float32)


def _nan_aware_equal(got_bits, want, width):
    nan = np.isnan(want.astype(np.float32))
    return (np.array_equal(np.isnan(got_bits.view(want.dtype).astype(np.float32)), nan)
            and np.array_equal(got_bits[~nan], want.view(width)[~nan]))


@pytest.mark.parametrize("fmt", wires.WIRE_FORMATS)
def test_decoding_every_16_bit_pattern_matches_numpy(fmt):
    wire_dtype = WIRE_DTYPES[fmt]
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = np.empty(patterns.size, np.uint32)
    bitcast.decode_bits(patterns, got, fmt == "bf16")
    want = patterns.view(wire_dtype).astype(np.float32)
    assert _nan_aware_equal(got, want, np.uint32)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("fmt", wires.WIRE_FORMATS)
def test_encoding_and_rounding_match_numpy_casts(fmt):
    wire_dtype = WIRE_DTYPES[fmt]
    patterns = np.random.default_rng(5).integers(0, 2**32, 1 << 18, dtype=np.uint32)
    values = np.concatenate([EDGES, -EDGES, patterns.view(np.float32)])
    encoded = np.empty(values.size, np.uint16)
    bitcast.encode_bits(values.view(np.uint32), encoded, fmt == "bf16")
    assert _nan_aware_equal(encoded, values.astype(wire_dtype), np.uint16)
    rounded = values.view(np.uint32).copy()
    bitcast.round_bits(rounded, fmt == "bf16")
    assert _nan_aware_equal(rounded, values.astype(wire_dtype).astype(np.float32), np.uint32)


# ------------------------------------------------------------------- cast wires
@pytest.mark.parametrize("fmt", wires.WIRE_FORMATS)
def test_cast_wire_encodes_in_the_wire_format(fmt):
    wire = cast_wire.compression_wire(fmt, np.float32)
    region = np.array([1.0, 1.0 + 2.0 ** -12, 3e4, -7.25], np.float32)
    buf = wire.encode(region)
    assert buf.dtype == wire.wire_dtype and buf.dtype.itemsize == 2
    np.testing.assert_array_equal(buf, region.astype(wire.wire_dtype))
    wire.release(buf)
    wire.finish()


@pytest.mark.parametrize("fmt", wires.WIRE_FORMATS)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_cast_wire_accumulates_in_float32_and_rounds_once(fmt, op):
    wire = cast_wire.compression_wire(fmt, np.float32)
    left = np.array([1.0, 2049.0, -3.5, 0.1], np.float32)
    incoming = np.array([2.0 ** -11, 1.0, 1.25, 0.2], np.float32).astype(wire.wire_dtype)
    dst = np.empty(4, np.float32)
    buf = wire.scratch(4)
    buf[:] = incoming
    wire.reduce(dst, buf, op, left=left)
    exact = host.REDUCE_OPS[op](left, incoming.astype(np.float32))
    np.testing.assert_array_equal(dst, exact.astype(wire.wire_dtype).astype(np.float32))
    wire.finish()


def test_cast_wire_store_and_divide_give_wire_precision():
    wire = cast_wire.Fp16Wire()
    dst = np.zeros(3, np.float32)
    buf = wire.recv_into(dst)
    buf[:] = np.array([1.0, 3.0, 5.0], np.float16)
    wire.store(dst, buf)
    np.testing.assert_array_equal(dst, [1.0, 3.0, 5.0])
    wire.divide(dst, 3)
    np.testing.assert_array_equal(dst, (np.array([1.0, 3.0, 5.0], np.float32) / 3).astype(np.float16))
    wire.finish()


def test_cast_wire_returns_every_slot():
    pool = staging.StagingPool()
    wire = cast_wire.Bf16Wire(pool=pool)
    bufs = [wire.encode(np.ones(10, np.float32)) for _ in range(3)]
    wire.scratch(10)
    work = wire.workspace(10)
    assert work.dtype == np.float32 and work.size == 10
    for buf in bufs:
        wire.release(buf)
    wire.finish()
    assert pool.free_slots == pool.allocated == 5


def test_cast_wire_copies_at_full_precision():
    wire = cast_wire.Fp16Wire()
    src = np.array([1.0 + 2.0 ** -20, 1e-30], np.float32)
    dst = np.zeros(2, np.float32)
    wire.copy(dst, src)
    np.testing.assert_array_equal(dst, src)
    wire.finish()


def test_applies_to_float32_only():
    assert wires.applies_to("fp16", np.float32) and wires.applies_to("bf16", "float32")
    assert not wires.applies_to("fp16", np.float64) and not wires.applies_to(None, np.float32)
    with pytest.raises(ValueError, match="expected compression among"):
        wires.applies_to("zip", np.float32)


def test_cast_wire_errors():
    with pytest.raises(TypeError, match="expected float32 data for fp16 compression, got float64"):
        cast_wire.Fp16Wire(np.float64)
    with pytest.raises(ValueError, match="expected compression among"):
        cast_wire.compression_wire("int8", np.float32)


# --------------------------------------------------------------------- top-k
def test_topk_count():
    assert topk.topk_count(100, k=7) == 7
    assert topk.topk_count(100, ratio=0.011) == 2
    assert topk.topk_count(5, ratio=1e-9) == 1
    for kwargs, match in [({}, "exactly one"), ({"k": 3, "ratio": 0.5}, "exactly one"),
                          ({"k": 0}, "k in"), ({"k": 101}, "k in"), ({"ratio": 1.5}, "ratio in")]:
        with pytest.raises(ValueError, match=match):
            topk.topk_count(100, **kwargs)


def test_topk_select_picks_the_largest_magnitudes_and_nan():
    values = np.array([0.1, -5.0, 3.0, np.nan, -0.2, 4.0], np.float32)
    idx, picked = topk.topk_select(values, 3)
    np.testing.assert_array_equal(idx, [1, 3, 5])
    np.testing.assert_array_equal(picked, values[[1, 3, 5]])
    idx, _ = topk.topk_select(values, 6)
    np.testing.assert_array_equal(idx, np.arange(6))


@given(st.data())
def test_sent_plus_residual_is_the_input_plus_the_previous_residual_exactly(data):
    n = data.draw(st.integers(1, 40))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    feedback = topk.ErrorFeedback()
    previous = np.zeros(n, dtype)
    for _ in range(3):
        x = data.draw(hnp.arrays(dtype, n, elements=st.floats(-1e6, 1e6, width=8 * np.dtype(dtype).itemsize)))
        k = data.draw(st.integers(1, n))
        idx, values = topk.topk_compress(x, k, feedback, "layer")
        sent = np.zeros(n, dtype)
        sent[idx] = values
        residual = feedback.get("layer")
        np.testing.assert_array_equal(sent + residual, x + previous)
        assert len(idx) == k and np.all(residual[idx] == 0)
        previous = residual.copy()


def test_topk_without_feedback_leaves_nothing_behind():
    idx, values = topk.topk_compress(np.array([3.0, -1.0, 2.0]), 1)
    np.testing.assert_array_equal(idx, [0])
    np.testing.assert_array_equal(values, [3.0])


def test_error_feedback_keys():
    feedback = topk.ErrorFeedback()
    feedback.residual("a", np.zeros(3, np.float32))
    assert "a" in feedback and len(feedback) == 1 and feedback.get("b") is None
    with pytest.raises(ValueError, match="expected 3 elements of float32 for residual 'a'"):
        feedback.residual("a", np.zeros(4, np.float32))
    feedback.reset("a")
    assert "a" not in feedback
    feedback.residual("b", np.zeros(2))
    feedback.reset()
    assert len(feedback) == 0
