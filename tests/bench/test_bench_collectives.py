"""The collectives benchmark checks every timed result: wrong results fail it loudly.

The MPI-marked tests run at any number of ranks (serially too), with tiny sizes and
target times; the reference checks themselves are tested without MPI.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

from mpievo.comm import Communicator
from mpievo.bench.checks import WrongResultError
from mpievo.bench.collectives_verify import Spec, parse_cases, rank_input, verify
from mpievo.bench import calibrate_collectives as calibration
from mpievo.comm import selection
from mpievo.bench.collectives import run_collectives

P = MPI.COMM_WORLD.Get_size()
TINY = dict(sizes=[64, 8192], malloc_modes=("default",), target_s=1e-3)
F32 = np.dtype(np.float32)


def quiet(*_):
    pass


@pytest.mark.mpi(min_size=1)
def test_default_cases_pass_the_check_and_rows_name_dtype_and_op():
    lines = []
    out = run_collectives(report=lines.append, **TINY)
    cases = [(r["collective"], r["dtype"], r["op"]) for r in out["rows"]]
    assert cases == [c for c in [("allreduce", "float32", "sum"), ("allreduce", "float32", "max"),
                                 ("allreduce", "float32", "min"), ("allreduce", "int32", "sum"),
                                 ("reduce_scatter", "float32", "sum"), ("allgather", "float32", None),
                                 ("broadcast", "float32", None)] for _ in range(2)]
    assert out["memcpy_GBps"] > 0 and (out["shm_copy_GBps"] > 0) == (P > 1)
    if MPI.COMM_WORLD.Get_rank() == 0:
        table = "\n".join(lines)
        assert "float32:max" in table and "int32:sum" in table and "dtype:op" in table
        assert "shared-memory copy (rank 1 from rank 0's window)" in table and "x memcpy" in table


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "native", "shm", "hierarchical"])
def test_every_forced_algorithm_passes_the_check(algorithm):
    probe = Communicator()
    nodes = len(probe.nodes)
    probe.free()
    if algorithm == "shm" and nodes > 1:
        pytest.skip("shm runs on one node")
    cases = [("float32", "max"), ("float64", "sum"), ("int32", "sum"), ("uint8", "min")]
    out = run_collectives(collectives=["allreduce", "reduce_scatter"], cases=cases, algorithm=algorithm,
                          report=quiet, **dict(TINY, sizes=[8192]))
    used = {(r["collective"], r["dtype"], r["op"]): r["algorithm"] for r in out["rows"]}
    assert used[("allreduce", "float32", "max")] == algorithm
    # the MPI library's reduce-scatter cannot keep NaN semantics: mpievo runs its ring, even forced;
    # an algorithm reduce-scatter lacks leaves the choice to the table, which must not run native
    scattered = used[("reduce_scatter", "float32", "max")]
    if algorithm == "native":
        assert scattered == "ring"
    elif algorithm in selection.ALGORITHMS["reduce_scatter"]:
        assert scattered == algorithm
    else:
        assert scattered != "native"


@pytest.mark.mpi(min_size=1)
def test_shared_inputs_are_read_in_place_and_checked(monkeypatch):
    probe = Communicator()
    nodes = len(probe.nodes)
    probe.free()
    if nodes > 1:
        pytest.skip("shm runs on one node")
    from mpievo.comm import allreduce as allreduce_driver
    from mpievo.comm import reduce_scatter as reduce_scatter_driver

    in_place, fused = [], []
    for driver in (allreduce_driver, reduce_scatter_driver):
        real = driver.reduce_steps

        def spy(*a, _real=real, **k):
            in_place.append(k.get("sources") is not None)
            fused.append(k.get("targets") is not None)
            return _real(*a, **k)
        monkeypatch.setattr(driver, "reduce_steps", spy)
    lines = []
    out = run_collectives(collectives=["allreduce", "reduce_scatter", "broadcast"], cases=[("float32", "sum")],
                          algorithm="shm", shared=True, report=lines.append, **dict(TINY, sizes=[8192, 1 << 16]))
    assert [(r["collective"], r["inputs"], r["outputs"]) for r in out["rows"]] == (
        [("allreduce", "shared", "private")] * 2 + [("allreduce", "shared", "shared")] * 2
        + [("reduce_scatter", "shared", "private")] * 2 + [("broadcast", "private", "private")] * 2)
    assert (bool(in_place) and all(in_place)) if P > 1 else not in_place   # one rank: a copy
    # all-reduce with private outputs gathers, with shared outputs writes them directly; reduce-scatter
    assert [k for k, _ in itertools.groupby(fused)] == ([False, True, False] if P > 1 else [])
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert "inputs in shared arrays (both sides)" in lines[0]
        assert sum("shm (shared out)" in line for line in lines) == 2


def _corrupting(original, rank: int):
    """``original`` collective, then one element of ``rank``'s result set to 7 (no input
    value: floats are in [-1, 1), sums of P of them below P <= 5; NaN is replaced too)."""
    def call(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if self.rank == rank:
            flat = result.reshape(-1)
            flat[flat.size // 2] = 7
        return result
    return call


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("collective, case", [
    ("allreduce", ("float32", "sum")), ("allreduce", ("float32", "max")), ("allreduce", ("float32", "min")),
    ("allreduce", ("int32", "sum")), ("reduce_scatter", ("float32", "sum")),
    ("allgather", ("float32", "sum")), ("broadcast", ("float32", "sum")),
])
def test_a_wrong_result_on_one_rank_fails_every_rank_naming_the_case(monkeypatch, collective, case):
    monkeypatch.setattr(Communicator, collective, _corrupting(getattr(Communicator, collective), P - 1))
    what = case[0] if collective in ("allgather", "broadcast") else ":".join(case)
    count = 16 - 16 % P  # 64 B of 4-byte elements, in equal blocks
    with pytest.raises(WrongResultError) as info:
        run_collectives(collectives=[collective], cases=[case], report=quiet, **TINY)
    message = str(info.value)
    assert message.startswith(f"{collective} {what} {count * 4} B (")
    assert f"mpievo result on rank {P - 1}: expected the numpy reference, got 1 of " in message
    assert "native MPI" not in message


@pytest.mark.mpi(min_size=1)
def test_calibration_checks_the_result_of_each_algorithm_it_times(monkeypatch):
    monkeypatch.setattr(Communicator, "allreduce", _corrupting(Communicator.allreduce, P - 1))
    native = MPI.COMM_WORLD.Dup()
    try:
        with pytest.raises(WrongResultError) as info:
            calibration.calibrate_case(native, "allreduce", "float32", "sum", ["ring"], [4096],
                                       target_s=1e-3, repeats=1)
    finally:
        native.Free()
    assert str(info.value).startswith(f"calibration allreduce float32:sum {(1024 - 1024 % P) * 4} B (ring): "
                                      f"mpievo result on rank {P - 1}: expected the numpy reference")


def _sum_in_order(inputs, order):
    acc = inputs[order[0]].copy()
    for r in order[1:]:
        acc += inputs[r]  # float32 arithmetic, rounded at every step
    return acc


def test_float_sums_pass_in_any_order_and_fail_beyond_the_rounding_bound():
    n, p = 4096, 5
    spec = Spec("allreduce", F32, "sum", n, p)
    inputs = [rank_input(r, 0, n, F32, "sum") for r in range(p)]
    for order in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        assert verify(spec, _sum_in_order(inputs, order), 0) is None
    exact = np.sum(inputs, axis=0, dtype=np.float64)
    bound = (p - 1) * np.finfo(F32).eps * np.sum(np.abs(inputs), axis=0, dtype=np.float64)
    inside, outside = exact.astype(F32), exact.astype(F32)
    inside[100] = exact[100] + 0.5 * bound[100]
    outside[100] = exact[100] + 3 * bound[100]
    assert verify(spec, inside, 0) is None
    message = verify(spec, outside, 0)
    assert message is not None and "got 1 of 4096 elements wrong (first: element 100: expected " in message


def test_max_min_nan_semantics_mpievo_strict_native_compared_where_no_rank_has_nan():
    n, p = 610, 2
    for op, propagate, ignore in (("max", np.maximum, np.fmax), ("min", np.minimum, np.fmin)):
        spec = Spec("allreduce", F32, op, n, p)
        inputs = [rank_input(r, 0, n, F32, op) for r in range(p)]
        assert np.isnan(inputs[1][1]) and not np.isnan(inputs[0][1])  # NaN at i % 61 == rank
        strict, lax = propagate(*inputs), ignore(*inputs)
        assert verify(spec, strict, 0) is None and verify(spec, strict, 0, native=True) is None
        assert verify(spec, lax, 0, native=True) is None
        assert "got 20 of 610 elements wrong (first: element 0: expected nan, got " in verify(spec, lax, 0)
        lax[5] = 7  # no rank holds NaN at 5: the native result must be exact there
        assert "first: element 5:" in verify(spec, lax, 0, native=True)


def test_integers_exact_and_sums_wrap():
    n, p = 1000, 3
    spec = Spec("allreduce", np.dtype(np.int32), "sum", n, p)
    inputs = [rank_input(r, 0, n, np.int32, "sum") for r in range(p)]
    exact = inputs[0] + inputs[1] + inputs[2]  # int32: wraps
    assert (np.abs(inputs[0].astype(np.int64) + inputs[1] + inputs[2]) > 2**31).any()
    assert verify(spec, exact, 0) is None
    exact[999] += 1
    assert "got 1 of 1000 elements wrong (first: element 999:" in verify(spec, exact, 0)


def test_copies_detect_unwritten_elements_and_check_the_right_slice():
    spec = Spec("allgather", F32, None, 12, 3)
    full = np.concatenate([rank_input(r, 4 * r, 4 * r + 4, F32, None) for r in range(3)])
    assert verify(spec, full, 0) is None
    assert verify(spec, full[4:8], 4) is None and verify(spec, full[4:8], 0) is not None
    unwritten = full.copy()
    unwritten[:4].view(np.uint8).fill(0xA5)
    assert "got 4 of 12 elements wrong (first: element 0:" in verify(spec, unwritten, 0)


def test_parse_cases_names_the_bad_entry():
    assert parse_cases("float32:max, int32:sum") == [(F32, "max"), (np.dtype(np.int32), "sum")]
    for text, error in (("float32", "expected dtype:op such as float32:max, got 'float32'"),
                        ("float16:sum", "expected a native-order integer dtype, float32 or float64, got float16"),
                        ("int32:mean", "expected op in ('sum', 'max', 'min'), got 'mean'"),
                        ("nosuch:sum", "expected a numpy dtype name such as float32 or int32, got 'nosuch'"),
                        (" , ", "expected at least one dtype:op case, got ' , '")):
        with pytest.raises(ValueError) as info:
            parse_cases(text)
        assert str(info.value) == error


def test_tuned_malloc_keeps_freed_memory_and_default_returns_it():
    # a subprocess: mallopt changes the whole process; MPI is imported but not started
    code = ("import sys, numpy as np\n"
            "from mpievo.bench.collectives import tune_malloc\n"
            "if sys.argv[1] == 'tuned': assert tune_malloc()\n"
            "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096\n"
            "a = np.ones(64 << 20, np.float32); before = rss(); del a\n"
            "print(before - rss())\n")
    env = dict(os.environ, MPI4PY_RC_INITIALIZE="0")
    released = {mode: int(subprocess.run([sys.executable, "-c", code, mode], env=env, check=True,
                                         capture_output=True, text=True).stdout)
                for mode in ("default", "tuned")}
    assert released["default"] > 200 << 20 and released["tuned"] < 16 << 20, released
