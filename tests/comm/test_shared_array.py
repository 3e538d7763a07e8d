"""Node-shared arrays (mpievo.comm.shm.array): one copy per node that every rank of the
node reads and writes, on the real node layout and on fake nodes; the size arithmetic
of arrays over 2 GiB (never allocated here); plain memory for a SelfComm."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from mpi_support import all_ranks_agree
from mpievo.comm import CollectiveTimeoutError, SelfComm
from mpievo.comm.nodes import FAKE_NODES_ENV
from mpievo.comm.shm.array import ALIGN, array_bytes, leader_bytes, node_shared_array

GiB = 1 << 30


# ------------------------------------------------------------------ serial
def test_sizes_over_2_gib_are_exact_python_ints():
    shape, dtype, nbytes = array_bytes((3, GiB), np.float32)
    assert (shape, dtype, nbytes) == ((3, GiB), np.dtype(np.float32), 12 * GiB)
    assert type(nbytes) is int
    # numpy extents (int32 ones would overflow in a numpy product) and a bare int
    assert array_bytes(np.array([2, GiB], np.int32), np.float64)[2] == 16 * GiB
    assert array_bytes(2**31 + 1, np.uint8) == ((2**31 + 1,), np.dtype(np.uint8), 2**31 + 1)
    assert leader_bytes(12 * GiB) == 12 * GiB + ALIGN - 1
    assert array_bytes((1, 2**60), np.uint8)[2] == 2**60   # MPI_Aint counts it


@pytest.mark.parametrize("shape, dtype, error, message", [
    ((0, 5), np.float32, ValueError,
     r"expected an array of at least one byte, got shape \(0, 5\) of float32"),
    (0, np.uint8, ValueError, r"expected an array of at least one byte, got shape \(0,\) of uint8"),
    ((4, -1), np.float64, ValueError, r"expected a shape of non-negative extents, got \(4, -1\)"),
    ((2, 2.5), np.float64, TypeError, r"expected a shape of ints, got \(2, 2.5\)"),
    ((3,), object, TypeError, r"expected a dtype without Python objects, got object"),
    ((2**62,), np.float32, ValueError,
     r"expected at most 9223372036854775744 bytes, got 18446744073709551616"),
])
def test_bad_requests_are_refused(shape, dtype, error, message):
    with pytest.raises(error, match=message):
        array_bytes(shape, dtype)
    with pytest.raises(error, match=message):
        node_shared_array(SelfComm(), shape, dtype)


def test_a_self_comm_gets_private_memory_without_mpi():
    code = ("import sys, numpy as np\n"
            "from mpievo.comm import SelfComm\n"
            "from mpievo.comm.shm.array import node_shared_array\n"
            "with node_shared_array(SelfComm(), (4, 3), np.float64) as s:\n"
            "    s.array[...] = 7; s.sync()\n"
            "    assert s.leader and s.node_ranks == (0,) and s.array.sum() == 84 and s.owned_bytes == 96\n"
            "    assert s.array.flags.writeable and s.array.flags.c_contiguous\n"
            "assert s.array is None\n"
            "print('mpi4py' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_comm_of_several_ranks_without_mpi_is_refused():
    class TwoRanks(SelfComm):
        size = 2

    with pytest.raises(TypeError, match="expected an mpievo Communicator or a one-rank SelfComm, "
                                        "got TwoRanks of 2 ranks"):
        node_shared_array(TwoRanks(), (4,), np.float32)


# ------------------------------------------------------------------ MPI
def _communicator(world, layout: str):
    from mpievo.comm import Communicator

    size = world.Get_size()
    if layout == "2" and size < 2 or layout == "interleaved" and size < 3:
        pytest.skip(f"fake nodes {layout!r} need more than {size} ranks")
    spec = {"real": "", "2": "2", "interleaved": ",".join(str(r % 2) for r in range(size))}[layout]
    previous = os.environ.get(FAKE_NODES_ENV)
    os.environ[FAKE_NODES_ENV] = spec
    try:
        return Communicator(timeout=120)
    finally:
        if previous is None:
            del os.environ[FAKE_NODES_ENV]
        else:
            os.environ[FAKE_NODES_ENV] = previous


@pytest.fixture(params=["real", "2", "interleaved"])
def comm(world, request):
    comm = _communicator(world, request.param)
    yield comm
    comm.free()


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_every_rank_of_a_node_maps_its_nodes_one_copy(world, comm, dtype):
    node_ranks = next(r for r in comm.nodes if comm.rank in r)
    local = node_ranks.index(comm.rank)
    with node_shared_array(comm, (len(node_ranks) + 1, 1001), dtype) as shared:
        if shared.leader:  # a pattern of this node's own: another node's copy is not this one
            shared.array[...] = node_ranks[0] + 1
        shared.sync()
        ok = bool(np.all(shared.array == node_ranks[0] + 1))
        shared.sync()  # everyone has read the leader's pattern before anyone overwrites it
        shared.array[local + 1] = comm.rank + 2  # every rank writes a row of its own
        shared.sync()
        owned = world.allgather(shared.owned_bytes)  # the leader alone allocated memory
        ok = ok and [owned[r] for r in node_ranks] == ([leader_bytes(shared.array.nbytes)]
                                                       + [0] * (len(node_ranks) - 1))
        rows = [shared.array[q + 1] for q in range(len(node_ranks))]
        ok = (ok and all(np.all(row == r + 2) for row, r in zip(rows, node_ranks))
              and np.all(shared.array[0] == node_ranks[0] + 1)
              and shared.leader == (local == 0) and shared.node_ranks == node_ranks
              and shared.array.ctypes.data % ALIGN == 0 and shared.array.dtype == dtype)
    all_ranks_agree(world, ok and shared.array is None, f"node {node_ranks}")


@pytest.mark.mpi(min_size=2)
def test_ranks_of_a_node_asking_for_different_arrays_all_raise(world):
    comm = _communicator(world, "real")
    node_ranks = next(r for r in comm.nodes if comm.rank in r)
    if len(node_ranks) < 2:
        pytest.skip("needs a node of two ranks")
    shape = (10,) if comm.rank == node_ranks[0] else (12,)
    with pytest.raises(ValueError, match=r"expected the same \(shape, dtype, offset\) on every rank "
                                         r"of a node, got \[\(\(10,\), 'float32', 0\), \(\(12,\)"):
        node_shared_array(comm, shape, np.float32)
    with node_shared_array(comm, (5,), np.float32) as again:  # nothing was left behind
        assert again.array.shape == (5,)
    comm.free()


@pytest.mark.mpi(min_size=2)
def test_a_rank_that_never_comes_times_out_instead_of_hanging(world):
    comm = _communicator(world, "real")
    if comm.rank == 0:
        comm.timeout = 0.5
        start = time.monotonic()
        with pytest.raises(CollectiveTimeoutError, match="barrier on rank 0 timed out after 0.5 s"):
            node_shared_array(comm, (8,), np.float64)
        assert time.monotonic() - start < 10
    world.Barrier()  # nobody frees: rank 0's barrier is still in flight
