"""Arrays in the node's shared memory (Communicator.shared_empty): the ``shm``
all-reduce and reduce-scatter read them where they are, and give the reference's
result; a call where some rank's array is not shared copies inputs as before."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

from comm_reference import matches, rank_input, reference
from mpievo.comm import Communicator
from mpievo.comm import hierarchical
from mpievo.comm.shm import collectives as shm_collectives
from mpievo.comm.nodes import FAKE_NODES_ENV
from mpievo.comm.ring import even_counts
from mpi_support import all_ranks_agree

pytestmark = pytest.mark.mpi(min_size=1)

P = MPI.COMM_WORLD.Get_size()
PIECE = 16 << 10       # many pipeline steps per call
#: what one shm call records: read in place; one rank runs no shm steps at all
IN_PLACE = [True] if P > 1 else []


@pytest.fixture(scope="module")
def comm():
    c = Communicator(shm_piece_bytes=PIECE)
    if len(c.nodes) > 1:
        c.free()
        pytest.skip("shm runs on one node; fake nodes take the hierarchical algorithm")
    yield c
    c.free()


def _record(monkeypatch, keyword: str, drivers) -> list:
    """Whether each shm call of the ``drivers`` got peers' arrays as ``keyword``."""
    seen = []
    real = shm_collectives.reduce_steps

    def spy(*args, **kwargs):
        seen.append(kwargs.get(keyword) is not None)
        return real(*args, **kwargs)

    for driver in drivers:
        monkeypatch.setattr(driver, "reduce_steps", spy)
    return seen


@pytest.fixture
def paths(monkeypatch):
    """Whether each shm call read its peers' inputs in place (True) or staged them."""
    from mpievo.comm import allreduce, reduce_scatter
    return _record(monkeypatch, "sources", (allreduce, reduce_scatter))


def _shared_input(comm, seed, n, dtype, op, nan):
    x = comm.shared_empty(n, dtype)
    x[:] = rank_input(seed, comm.rank, n, dtype, op, nan)
    return x


@pytest.mark.parametrize("dtype, op, nan", [(np.float32, "sum", False), (np.float32, "max", True),
                                            (np.int64, "sum", False), (np.float64, "mean", False)])
@pytest.mark.parametrize("in_place", [False, True])
def test_allreduce_of_shared_arrays_reads_them_in_place(comm, world, paths, dtype, op, nan, in_place):
    n, seed = 100_003, 7
    dtype = np.dtype(dtype)
    x = _shared_input(comm, seed, n, dtype, op, nan)
    original = x.copy()
    out = comm.allreduce(x, x if in_place else None, op, algorithm="shm")
    ok, why = matches(out, reference(seed, n, dtype, op, nan, P), dtype, op, P)
    if not in_place:
        ok, why = ok and np.array_equal(x.view(np.uint8), original.view(np.uint8)), why or "input modified"
    all_ranks_agree(world, ok and paths == IN_PLACE, f"{why}; in place per call: {paths}")


def test_reduce_scatter_of_shared_arrays(comm, world, paths):
    n, seed, dtype = 50_021, 3, np.dtype(np.float32)
    x = _shared_input(comm, seed, n, dtype, "sum", False)
    block = comm.reduce_scatter(x, None, "sum", algorithm="shm")
    counts = even_counts(n, P)
    start = sum(counts[:comm.rank])
    ref = reference(seed, n, dtype, "sum", False, P)[start:start + counts[comm.rank]]
    ok, why = matches(block, ref, dtype, "sum", P)
    all_ranks_agree(world, ok and paths == IN_PLACE, f"{why}; in place per call: {paths}")


def test_calls_in_a_row_wait_for_peers_before_the_input_changes(comm, world, paths):
    """The input is rewritten right after each call: a rank that returned before its
    peers read its array would corrupt their results."""
    n, dtype = 1 << 20, np.dtype(np.float64)
    x = comm.shared_empty(n, dtype)
    good = True
    for step in range(6):
        x[:] = comm.rank + 10.0 * step
        out = comm.allreduce(x, None, "sum", algorithm="shm")
        good &= bool(np.all(out == P * 10.0 * step + P * (P - 1) / 2))
        if comm.rank == 0:       # one rank late to every reduce-scatter: the others wait for it
            time.sleep(0.02)
        x[:] = comm.rank - 10.0 * step
        block = comm.reduce_scatter(x, None, "sum", algorithm="shm")
        x[:] = np.nan            # what a peer still reading would see
        good &= bool(np.all(block == -P * 10.0 * step + P * (P - 1) / 2))
    all_ranks_agree(world, good and paths == IN_PLACE * 12, f"in place per call: {paths}")


def test_a_rank_without_a_shared_array_makes_every_rank_stage(comm, world, paths):
    n, seed, dtype = 30_001, 5, np.dtype(np.float32)
    x = _shared_input(comm, seed, n, dtype, "sum", False)
    mine = x.copy() if comm.rank == P - 1 else x        # the last rank passes a private copy
    out = comm.allreduce(mine, None, "sum", algorithm="shm")
    ok, why = matches(out, reference(seed, n, dtype, "sum", False, P), dtype, "sum", P)
    all_ranks_agree(world, ok and paths == [False] * len(IN_PLACE), f"{why}; in place per call: {paths}")


@pytest.fixture
def fused(monkeypatch):
    """Whether each shm all-reduce wrote its peers' outputs directly (True) or gathered."""
    from mpievo.comm import allreduce
    return _record(monkeypatch, "targets", (allreduce,))


@pytest.mark.parametrize("dtype, op, nan", [(np.float32, "sum", False), (np.float32, "max", True),
                                            (np.float64, "min", True), (np.int32, "prod", False),
                                            (np.uint8, "sum", False), (np.float16, "mean", False)])
@pytest.mark.parametrize("shared_input", [False, True])
def test_allreduce_into_shared_outputs_writes_every_rank_and_matches_the_staged_bits(
        comm, world, fused, dtype, op, nan, shared_input):
    """Outputs in shared arrays: owners write their blocks into every rank's output
    (fused); the bits are those of the gathered path (same order of reduction)."""
    n, seed = 70_001, 13
    dtype = np.dtype(dtype)
    data = rank_input(seed, comm.rank, n, dtype, op, nan)
    x = _shared_input(comm, seed, n, dtype, op, nan) if shared_input else data.copy()
    out = comm.shared_empty(n, dtype)
    out[:] = 0
    got = comm.allreduce(x, out, op, algorithm="shm")
    staged = comm.allreduce(data, None, op, algorithm="shm")
    ok, why = matches(got, reference(seed, n, dtype, op, nan, P), dtype, op, P)
    same = np.array_equal(got.view(np.uint8), staged.view(np.uint8))
    ok = ok and got is out and same and np.array_equal(x, data, equal_nan=nan)
    all_ranks_agree(world, ok and fused == IN_PLACE + [False] * len(IN_PLACE),
                    f"{why}; same bits as staged: {same}; fused per call: {fused}")


@pytest.mark.parametrize("in_place", [True, False])
def test_fused_calls_in_a_row_return_only_once_peers_wrote_the_output(comm, world, fused, in_place):
    """Shared outputs (in place, or beside a private input), read and rewritten right
    after each call, one rank late to every other call: a rank that returned before its
    peers wrote its output (or before they read its input) would see or leave stale
    values. Tiny pieces: many steps, and the last is the one a race would miss."""
    n, dtype = 1 << 19, np.dtype(np.float64)
    out = comm.shared_empty(n, dtype)
    x = out if in_place else np.empty(n, dtype)
    good = True
    for step in range(8):
        x[:] = comm.rank + 10.0 * step
        if comm.rank == 0 and step % 2:
            time.sleep(0.02)
        got = comm.allreduce(x, out, "sum", algorithm="shm")
        good &= bool(np.all(got == P * 10.0 * step + P * (P - 1) / 2))
        out[:] = np.nan            # what a peer still reading would see, and stale output
    all_ranks_agree(world, good and fused == IN_PLACE * 8, f"fused per call: {fused}")


def test_shared_arrays_are_writable_views_of_the_asked_shape():
    c = Communicator()
    try:
        a = c.shared_empty((3, 5), np.int32)
        a[...] = np.arange(15).reshape(3, 5)
        assert a.shape == (3, 5) and a.dtype == np.int32 and a.flags.writeable and a.flags.c_contiguous
        assert c._core.shared.locate(a.reshape(-1), c._core.layout.node.Get_rank())[0] == 0
        assert c._core.shared.locate(a.copy().reshape(-1), c._core.layout.node.Get_rank()) == (-1, -1)
    finally:
        c.free()


@pytest.mark.parametrize("nodes", ["1", "2"])
def test_hierarchical_allreduce_reads_each_nodes_shared_arrays(world, monkeypatch, nodes):
    """On fake nodes each node's window is its own; the node-local reduction reads the
    node's arrays in place wherever a node has more than one rank."""
    if int(nodes) > P:
        pytest.skip(f"{nodes} fake nodes need more ranks than {P}")
    monkeypatch.setenv(FAKE_NODES_ENV, nodes)
    c = Communicator(shm_piece_bytes=PIECE)
    monkeypatch.delenv(FAKE_NODES_ENV)
    seen = []
    real = hierarchical.shm.reduce_steps
    monkeypatch.setattr(hierarchical.shm, "reduce_steps",
                        lambda *a, **k: seen.append(k.get("sources") is not None) or real(*a, **k))
    try:
        n, seed, dtype = 70_001, 11, np.dtype(np.float32)
        x = _shared_input(c, seed, n, dtype, "sum", False)
        out = c.allreduce(x, None, "sum", algorithm="hierarchical")
        ok, why = matches(out, reference(seed, n, dtype, "sum", False, P), dtype, "sum", P)
        # a rank alone on its node copies its input into its lane: no node-local reduction
        expected = [True] if c._core.layout.local_size > 1 else []
        del x              # an array over a window must not outlive it
    finally:
        c.free()
    all_ranks_agree(world, ok and seen == expected, f"{why}; in place per call: {seen}, nodes {nodes}")
