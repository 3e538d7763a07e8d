"""Selection by layout and op, fake node colours, calibration (interleaved, repeated,
median), and the kernels under the new paths: order-preserving float keys and the
multi-operand reduction."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from mpi4py import MPI

from mpievo.bench import calibrate_collectives as calibration
from mpievo.comm import selection
from mpievo.bench.collectives import time_alternating
from mpievo.comm.nodes import fake_colours, layout_key
from mpievo.comm.shm.window import ARENA_BUDGET_BYTES, MIN_PIECE_BYTES, piece_bytes
from mpievo.kernels import host, ordered

TABLE = {"collectives": {
    "allreduce": {"4": [[1024, "native"], [None, "shm"]], "8/2": [[None, "ring"]],
                  "default": [[None, "recursive_doubling"]]},
    "allreduce:maxmin": {"4": [[64, "native"], [None, "ring"]]},
    "reduce_scatter": {"4": [[512, "native"], [None, "shm"]]},
}}


def test_layouts_pick_their_rules_and_other_nodes_borrow_the_rank_count_with_node_aware_algorithms():
    assert layout_key(4, 1) == "4" and layout_key(8, 2) == "8/2"
    assert selection.choose("allreduce", 2048, "4", TABLE) == "shm"
    assert selection.choose("allreduce", 2048, "4/2", TABLE) == "hierarchical"
    assert selection.choose("reduce_scatter", 2048, "4/2", TABLE) == "ring"  # no node-aware reduce-scatter
    assert selection.choose("allreduce", 2048, "8/2", TABLE) == "ring"       # its own entry wins
    assert selection.choose("allreduce", 2048, "3", TABLE) == "recursive_doubling"
    assert selection.choose("allgather", 2048, "4", TABLE) == "ring"         # no entry at all
    assert selection.native_limit("allreduce", "4/2", None, TABLE) == 1024


def test_floating_max_min_have_their_own_rules_else_the_plain_ones():
    maxmin = selection.variant_of("allreduce", True, "max")
    assert maxmin == selection.MAXMIN and selection.variant_of("allreduce", True, "sum") is None
    assert selection.variant_of("allreduce", False, "max") is None
    assert selection.variant_of("reduce_scatter", True, "max") is None
    assert selection.choose("allreduce", 128, "4", TABLE, variant=maxmin) == "ring"
    assert selection.choose("allreduce", 128, "4", TABLE) == "native"
    assert selection.native_limit("allreduce", "4", None, TABLE, variant=maxmin) == 64
    assert selection.choose("allreduce", 128, "3", TABLE, variant=maxmin) == "recursive_doubling"


def test_fake_node_colours_blocks_or_lists_and_their_errors():
    assert fake_colours(5, "") is None
    assert fake_colours(5, "2") == [0, 0, 0, 1, 1]
    assert fake_colours(4, "3") == [0, 0, 1, 2]
    assert fake_colours(3, " 1, 0,1 ") == [1, 0, 1]
    for text in ("6", "0", "a", "1,2", "-1,0,0", "1.5"):
        with pytest.raises(ValueError) as info:
            fake_colours(3, text)
        assert str(info.value) == ("expected MPIEVO_FAKE_NODES to be a node count in [1, 3] or 3 "
                                   f"non-negative colours (one per rank), got {text!r}")


def test_pieces_are_whole_pages_within_the_budget():
    assert piece_bytes(256 << 10, 2) == 256 << 10
    assert piece_bytes(1000, 2) == MIN_PIECE_BYTES
    assert piece_bytes(100_000, 2) == 25 * 4096
    assert piece_bytes(64 << 20, 64) == ARENA_BUDGET_BYTES // 128


def test_segment_options_come_from_environment_then_table(monkeypatch):
    monkeypatch.setenv("MPIEVO_SHM_PIECE_BYTES", "65536")
    assert selection.segment_bytes("shm", {"shm_piece_bytes": 1}) == 65536
    monkeypatch.delenv("MPIEVO_SHM_PIECE_BYTES")
    assert selection.segment_bytes("shm", {"shm_piece_bytes": 131072}) == 131072
    assert selection.segment_bytes("shm", {}) == selection.DEFAULT_SHM_PIECE_BYTES
    with pytest.raises(ValueError, match=r"expected segment kind in \('reduce', 'copy', 'shm'\), got 'x'"):
        selection.segment_bytes("x")


FLOATS = st.sampled_from([np.float32, np.float64]).flatmap(
    lambda dt: hnp.arrays(dt, st.integers(1, 40), elements=st.floats(width=np.dtype(dt).itemsize * 8)))


@given(a=FLOATS, seed=st.integers(0, 2**16))
def test_float_keys_sort_like_floats_and_integer_max_min_give_nan_semantics(a, seed):
    b = np.random.default_rng(seed).permutation(a)  # same values, other places: ties and NaN pairs
    key = ordered.KEY_DTYPES[a.dtype]
    for op, ufunc, nan_high in (("max", np.maximum, True), ("min", np.minimum, False)):
        ka, kb = np.empty(a.size, key), np.empty(a.size, key)
        ordered.encode(a, ka, nan_high)
        ordered.encode(b, kb, nan_high)
        valid = ~np.isnan(a) & ~np.isnan(b)
        assert np.array_equal((ka < kb)[valid], ((a < b) | ((a == b) & np.signbit(a) & ~np.signbit(b)))[valid])
        got = ordered.decode(ufunc(ka, kb))
        assert np.array_equal(got, ufunc(a, b), equal_nan=True), op
    back = np.empty(a.size, key)
    ordered.encode(a, back, True)
    decoded = ordered.decode(back)
    plain = ~np.isnan(a)
    assert np.array_equal(decoded.view(key)[plain], a.view(key)[plain]) and np.isnan(decoded[~plain]).all()


def test_float_keys_in_place():
    x = np.array([np.nan, -0.0, 2.0, -np.inf], np.float32)
    keys = x.view(np.int32)
    ordered.encode(x, keys, False)
    assert keys[0] == np.iinfo(np.int32).min and keys[1] == -1
    assert np.array_equal(ordered.decode(keys), [np.nan, -0.0, 2.0, -np.inf], equal_nan=True)


def test_reduce_all_left_to_right_and_may_overwrite_the_first_operand():
    ops = [np.arange(5.0) + k for k in range(4)]
    out = np.empty(5)
    host.reduce_all(out, ops, "sum")
    assert np.array_equal(out, sum(ops))
    first = ops[0].copy()
    host.reduce_all(first, [first, ops[1], ops[2]], "max")
    assert np.array_equal(first, ops[2])
    strings = [np.array([1.0]), np.array([np.nan]), np.array([3.0])]
    host.reduce_all(out[:1], strings, "min")
    assert np.isnan(out[0])


def test_merged_rules_and_tuning_keep_every_option():
    rules = calibration.merge_rules([(1, "native"), (2, "native"), (4, "ring"), (8, "native"), (16, "shm")])
    assert rules == [[8, "native"], [None, "shm"]]  # the lone ring between natives is noise
    update = {"collectives": {"allreduce:maxmin": {"2": [[None, "shm"]]}}, "segment_bytes": 1,
              "shm_piece_bytes": 65536}
    merged = calibration.merge_tuning({"collectives": {"allreduce:maxmin": {"3": [[None, "ring"]]}},
                                       "copy_segment_bytes": 7}, update)
    assert merged == {"collectives": {"allreduce:maxmin": {"3": [[None, "ring"]], "2": [[None, "shm"]]}},
                      "copy_segment_bytes": 7, "segment_bytes": 1, "shm_piece_bytes": 65536}


def test_candidates_are_what_the_layout_offers():
    assert calibration.candidates("allreduce", True) == ["ring", "recursive_doubling", "native", "shm"]
    assert calibration.candidates("allreduce", False) == ["ring", "recursive_doubling", "native", "hierarchical"]
    assert calibration.candidates("reduce_scatter", False) == ["ring", "native"]


@pytest.mark.mpi(min_size=1)
def test_time_alternating_interleaves_rounds_starting_at_the_next_candidate():
    order = []
    fns = [lambda k=k: order.append(k) for k in range(3)]
    times = time_alternating(MPI.COMM_SELF, fns, min_iters=4, max_iters=4, warmup=1)
    assert len(times) == 3
    assert order == [0, 1, 2] + [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]
    pauses = iter([0.0, 0.0, 0.2, 0.2, 0.2])  # warm-up, then one quick round of four
    slow = [lambda: time.sleep(next(pauses))]
    low = time_alternating(MPI.COMM_SELF, slow, min_iters=4, max_iters=4, warmup=1, quantile=0.0)[0]
    pauses = iter([0.0, 0.0, 0.2, 0.2, 0.2])
    median = time_alternating(MPI.COMM_SELF, slow, min_iters=4, max_iters=4, warmup=1)[0]
    assert low < 0.1 < 0.19 < median


@pytest.mark.mpi(min_size=1)
def test_calibration_repeats_the_sweep_and_takes_the_median_winner(monkeypatch):
    # per sweep, per size: (ring, native) seconds; native wins size 1024 in one sweep only
    script = iter([(1.0, 2.0), (3.0, 1.0), (1.0, 0.5), (3.0, 1.0), (1.0, 2.0), (3.0, 1.0)])
    calls = []

    def fake_timing(comm, fns, **kwargs):
        assert kwargs["quantile"] == calibration.QUANTILE
        for fn in fns:
            fn()  # results must exist: each is checked
        calls.append(len(fns))
        return list(next(script))

    monkeypatch.setattr(calibration, "time_alternating", fake_timing)
    native = MPI.COMM_WORLD.Dup()
    try:
        rules = calibration.calibrate_case(native, "allreduce", "float32", "sum", ["ring", "native"],
                                           [1024, 4096], target_s=1e-3, repeats=3)
    finally:
        native.Free()
    assert calls == [2] * 6 and rules == [[1024, "ring"], [None, "native"]]


@pytest.mark.mpi(min_size=1)
def test_calibration_times_each_candidate_as_an_automatic_choice_runs_it(monkeypatch):
    # native is timed through the direct MPI call, not the general path
    from mpievo.comm import allreduce as allreduce_driver

    monkeypatch.delenv("MPIEVO_COMM_TIMEOUT", raising=False)
    drivers = []
    original = allreduce_driver.run
    monkeypatch.setattr(allreduce_driver, "run", lambda core, *a, **k: drivers.append(core.forced["allreduce"])
                        or original(core, *a, **k))
    native = MPI.COMM_WORLD.Dup()
    try:
        calibration.calibrate_case(native, "allreduce", "float32", "sum", ["ring", "native"], [4096],
                                   target_s=1e-3, repeats=1)
    finally:
        native.Free()
    assert set(drivers) == ({"ring"} if MPI.COMM_WORLD.Get_size() > 1 else {"ring", "native"})
