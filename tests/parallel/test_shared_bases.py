"""share_bases (mpievo.parallel.shared_bases): the bases loaded once per node and attached on every
rank; the nodes' checksums compared; a loader that fails on a leader raises on every rank."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from mpi_support import all_ranks_agree
from mpievo.comm import SelfComm
from mpievo.comm.nodes import FAKE_NODES_ENV
from mpievo.evo.base_models import BaseModels, checksum
from mpievo.parallel.shared_bases import BasesError, share_bases

SHAPE = (3, 4099)


def expected(dtype, shift: float = 0.0) -> np.ndarray:
    return (np.arange(SHAPE[0] * SHAPE[1]).reshape(SHAPE) * 0.25 + shift).astype(dtype)


class Loader:
    """Fills the bases (``shift`` may differ by rank) and counts its calls in this process."""

    def __init__(self, dtype, shift: float = 0.0, fail: bool = False):
        self.dtype, self.shift, self.fail, self.calls = dtype, shift, fail, 0

    def __call__(self, out):
        self.calls += 1
        if self.fail:
            raise OSError("bases.npy: disk went away")
        out[...] = expected(self.dtype, self.shift)


# ------------------------------------------------------------------ serial
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_process_loads_into_its_own_memory(dtype):
    load = Loader(dtype)
    bases = BaseModels(load, shape=SHAPE, dtype=dtype)
    release = share_bases(SelfComm(), bases)
    assert load.calls == 1 and bases.attached
    assert np.array_equal(bases.array, expected(dtype)) and not bases.array.flags.writeable
    assert bases.checksum == checksum(expected(dtype))
    release()


def test_a_failing_loader_raises_with_its_error_as_the_cause():
    bases = BaseModels(Loader(np.float32, fail=True), shape=SHAPE, dtype=np.float32)
    failure = r"the node of ranks \[0\]: OSError: bases.npy: disk went away"
    with pytest.raises(BasesError, match="expected the bases to load on every node, got a failure on "
                                         + failure) as info:
        share_bases(SelfComm(), bases)
    assert isinstance(info.value.__cause__, OSError) and not bases.attached


# ------------------------------------------------------------------ MPI
@pytest.fixture(params=["real", "2"])
def comm(world, request):
    from mpievo.comm import Communicator

    if request.param == "2" and world.Get_size() < 2:
        pytest.skip("two fake nodes need two ranks")
    previous = os.environ.get(FAKE_NODES_ENV)
    os.environ[FAKE_NODES_ENV] = "" if request.param == "real" else request.param
    try:
        comm = Communicator(timeout=120)
    finally:
        if previous is None:
            del os.environ[FAKE_NODES_ENV]
        else:
            os.environ[FAKE_NODES_ENV] = previous
    yield comm
    comm.free()


def leader_of(comm) -> int:
    return next(r for r in comm.nodes if comm.rank in r)[0]


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_node_loads_once_and_every_rank_reads_the_same_bytes(world, comm, dtype):
    load = Loader(dtype)
    bases = BaseModels(load, shape=SHAPE, dtype=dtype)
    release = share_bases(comm, bases)
    calls = world.allgather(load.calls)
    digests = world.allgather(bases.checksum)
    ok = (sum(calls) == len(comm.nodes) and load.calls == (comm.rank == leader_of(comm))
          and np.array_equal(bases.array, expected(dtype)) and not bases.array.flags.writeable
          and set(digests) == {checksum(expected(dtype))})
    release()
    all_ranks_agree(world, ok, f"calls {calls}, digests {digests}")


@pytest.mark.mpi(min_size=1)
@pytest.mark.timeout(60)
def test_a_loader_failing_on_one_leader_raises_on_every_rank(world, comm):
    bases = BaseModels(Loader(np.float32, fail=comm.rank == 0), shape=SHAPE, dtype=np.float32)
    node = list(comm.nodes[0])
    failure = f"the node of ranks {re.escape(str(node))}: OSError: bases.npy: disk went away$"
    with pytest.raises(BasesError, match="expected the bases to load on every node, got a failure on "
                                         + failure):
        share_bases(comm, bases)
    assert not bases.attached
    again = BaseModels(Loader(np.float32), shape=SHAPE, dtype=np.float32)
    share_bases(comm, again)()  # every rank is still in step: the next share works


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_nodes_that_load_different_bases_raise_on_every_rank(world, comm):
    if len(comm.nodes) < 2:
        pytest.skip("needs two nodes")
    bases = BaseModels(Loader(np.float64, shift=leader_of(comm)), shape=SHAPE, dtype=np.float64)
    digests = {node[0]: checksum(expected(np.float64, node[0])) for node in comm.nodes}
    found = "; ".join(f"{digests[node[0]]} on the node of ranks {list(node)}" for node in comm.nodes)
    with pytest.raises(BasesError, match=rf"expected the same bases \(one checksum\) on every node, "
                                         f"got {re.escape(found)}$"):
        share_bases(comm, bases)
    assert not bases.attached
