"""The shared-window algorithms' behaviour: timeouts, blocking only, one node only, one
window per communicator, selection by op, and floating max/min on the native path."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from mpi4py import MPI

from mpi_support import all_ranks_agree
from mpievo.comm import CollectiveTimeoutError, Communicator, CommunicatorBrokenError, selection
from mpievo.comm import allreduce as allreduce_driver
from mpievo.comm import core as core_module
from mpievo.comm.nodes import FAKE_NODES_ENV

P = MPI.COMM_WORLD.Get_size()


def one_node(comm) -> bool:
    return len(comm.nodes) == 1


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A tuning table of our own (selection caches the table: cleared around the test)."""
    rules = {"allreduce": {"default": [[1024, "native"], [None, "ring"]]},
             "allreduce:maxmin": {"default": [[64, "native"], [None, "shm"]]}}
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"collectives": rules}))
    monkeypatch.setenv("MPIEVO_TUNING", str(path))
    monkeypatch.delenv("MPIEVO_ALLREDUCE_ALGORITHM", raising=False)
    monkeypatch.delenv(FAKE_NODES_ENV, raising=False)
    selection.load_table.cache_clear()
    yield path
    selection.load_table.cache_clear()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("window_exists", [True, False])
def test_a_missing_peer_times_out_naming_the_operation(world, window_exists):
    comm = Communicator()
    if not one_node(comm):
        pytest.skip("shm runs on one node")
    if window_exists:
        comm.allreduce(np.ones(1000), algorithm="shm")  # every rank: the window is made
    if comm.rank == 0:
        start = time.monotonic()
        with pytest.raises(CollectiveTimeoutError, match=r"allreduce on rank 0 timed out after 0.5 s") as info:
            comm.allreduce(np.ones(1 << 16), algorithm="shm", timeout=0.5)
        assert time.monotonic() - start < 10
        # the flags name every peer; before the window exists, the node barrier names none
        assert info.value.peers == ([("from", q) for q in range(1, P)] if window_exists else [("from", -1)])
        with pytest.raises(CommunicatorBrokenError, match="communicator unusable"):
            comm.allreduce(np.ones(4))
    world.Barrier()  # nobody frees: freeing the window waits for the whole node


@pytest.mark.mpi(min_size=1)
def test_shared_window_algorithms_are_blocking_only(world, monkeypatch, table):
    x = np.full(1 << 12, world.rank + 1.0)
    comm = Communicator()
    with pytest.raises(ValueError, match=r"expected a non-blocking allreduce algorithm other than "
                                         r"\['hierarchical', 'shm'\] \(they are blocking only\), got 'shm'"):
        comm.iallreduce(x, algorithm="shm")
    # the table's or the environment's choice falls back to the ring for non-blocking calls
    assert comm.algorithm_for("allreduce", 1 << 20, "float32", "max") == ("shm" if one_node(comm) else "hierarchical")
    assert comm.algorithm_for("allreduce", 1 << 20, "float32", "max", blocking=False) == "ring"
    comm.free()
    monkeypatch.setenv("MPIEVO_ALLREDUCE_ALGORITHM", "hierarchical")
    forced = Communicator()
    out = forced.iallreduce(x).wait()
    ok = (forced.algorithm_for("allreduce", x.nbytes, blocking=False) == "ring"
          and forced.algorithm_for("allreduce", x.nbytes) == "hierarchical" and np.all(out == P * (P + 1) / 2))
    forced.free()
    all_ranks_agree(world, ok)


@pytest.mark.mpi(min_size=2)
def test_shm_is_refused_on_several_nodes(world, monkeypatch):
    monkeypatch.setenv(FAKE_NODES_ENV, "2")
    comm = Communicator()
    assert len(comm.nodes) == 2
    for call in (lambda: comm.allreduce(np.ones(8), algorithm="shm"),
                 lambda: comm.broadcast(np.ones(8), algorithm="shm")):
        with pytest.raises(ValueError, match=r"expected (allreduce|broadcast) algorithm 'shm' only with every "
                                             r"rank on one node, got 2 nodes \(use 'hierarchical'\)"):
            call()
    comm.free()


@pytest.mark.mpi(min_size=1)
def test_one_window_per_communicator_serves_every_call(world, monkeypatch):
    made = []
    original = core_module.Arena

    def counting(*args, **kwargs):
        made.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(core_module, "Arena", counting)
    comm = Communicator(shm_piece_bytes=16 << 10)
    shared = "shm" if one_node(comm) else "hierarchical"
    a = comm.allreduce(np.arange(100_000, dtype=np.int64) * (comm.rank + 1), algorithm=shared)
    b = comm.allreduce(np.full(7, comm.rank + 1.0, np.float32), op="max", algorithm=shared)
    c = comm.broadcast(np.arange(50_000.0) if comm.rank == 0 else np.zeros(50_000), 0, algorithm=shared)
    d = comm.allgather(np.full(3, comm.rank, np.int16), counts=[3] * P, algorithm=shared)
    ok = (np.array_equal(a, np.arange(100_000) * P * (P + 1) // 2) and np.all(b == P)
          and np.array_equal(c, np.arange(50_000.0)) and np.array_equal(d, np.repeat(np.arange(P), 3))
          and len(made) == (1 if P > 1 and len(next(n for n in comm.nodes if comm.rank in n)) > 1 else 0))
    comm.free()
    all_ranks_agree(world, ok, f"windows made: {len(made)}")


@pytest.mark.mpi(min_size=1)
def test_floating_max_min_take_their_own_table(world, table):
    comm = Communicator()
    shared = "shm" if one_node(comm) else "hierarchical"
    assert comm.algorithm_for("allreduce", 512, "float32", "max") == shared
    assert comm.algorithm_for("allreduce", 512, "float64", "min") == shared
    assert comm.algorithm_for("allreduce", 512, "float32", "sum") == "native"
    assert comm.algorithm_for("allreduce", 512, "int32", "max") == "native"
    assert comm.algorithm_for("allreduce", 64, "float32", "max") == "native"
    comm.free()


def tricky_floats(rank: int, dtype) -> np.ndarray:
    """Signed zeros, infinities, subnormals, and NaN on a different element per rank."""
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([0.0, -0.0, np.inf, -np.inf, tiny, -tiny, 1.5, -2.5, 0.0, 3.0] * 3, dtype) * (rank % 2 * 2 - 1)
    x[rank % x.size] = np.nan
    x[-1] = -np.nan if rank % 2 else np.nan  # NaN of either sign
    return x


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["max", "min"])
def test_native_max_min_keep_nan_semantics_on_both_native_paths(world, monkeypatch, table, dtype, op):
    monkeypatch.delenv("MPIEVO_COMM_TIMEOUT", raising=False)
    calls = []
    original = allreduce_driver.run
    monkeypatch.setattr(allreduce_driver, "run", lambda *a, **k: calls.append(1) or original(*a, **k))
    comm = Communicator()
    x = tricky_floats(comm.rank, dtype)  # 240 bytes: over the table's 64 B native limit
    small = x[:8].copy()                  # 32 or 64 bytes: the direct call
    ufunc = np.maximum if op == "max" else np.minimum
    expected = ufunc.reduce(np.stack([tricky_floats(q, dtype) for q in range(P)]), axis=0)
    out, direct = np.empty_like(x), np.empty_like(small)
    comm.allreduce(small, direct, op)
    calls_direct = len(calls)
    general = comm.allreduce(x, None, op, algorithm="native")
    in_place = x.copy()
    comm.allreduce(in_place, in_place, op, algorithm="native")
    ok = all(np.array_equal(got, want, equal_nan=True)
             for got, want in ((direct, expected[:8]), (general, expected), (in_place, expected)))
    ok &= calls_direct == (0 if P > 1 else 1) and np.array_equal(x, tricky_floats(comm.rank, dtype), equal_nan=True)
    blobs = world.allgather(general.tobytes())
    comm.free()
    all_ranks_agree(world, ok and all(b == blobs[0] for b in blobs), f"{general} vs {expected}")
