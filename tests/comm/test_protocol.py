"""The engine's view of communication: Communicator and SelfComm both satisfy EngineComm
and give the same results on one rank; mpievo.io resolves None to a SelfComm."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from mpi4py import MPI

from mpievo.comm import Communicator, EngineComm, SelfComm
from mpievo.comm.protocol import ENGINE_COMM_MEMBERS, EngineRequest, missing_members
from mpievo.io.serial import resolve_comm


@pytest.fixture
def one_rank():
    comm = Communicator(MPI.COMM_SELF)
    yield comm
    comm.free()


def _exchange(comm):
    out = np.arange(6, dtype=np.int16)
    into = np.zeros(6, np.int16)
    with comm.purpose("migration"):
        assert comm.exchange(sends=[(0, out)], recvs=[(0, into)]) is None
    return into


def _iallreduce(comm):
    x = np.arange(5.0)
    request = comm.iallreduce(x, None, "sum")
    assert isinstance(request, EngineRequest)
    fresh = request.wait()
    in_place = np.arange(4, dtype=np.int32)
    done = comm.iallreduce(in_place, in_place, "max")
    while not done.test():
        pass
    return fresh, done.wait() is in_place, done.done, in_place


def _objects(comm):
    comm.send_object({"block": np.arange(3)}, 0)
    sending = comm.isend_object("second", 0)
    first = comm.recv_object()
    second = comm.recv_object(0)
    return first[0], first[1]["block"], second, sending.wait(), sending.done


#: every EngineComm member, exercised the way the engine uses it
CALLS = {
    "rank": lambda c: c.rank,
    "size": lambda c: c.size,
    "purpose": lambda c: _exchange(c),
    "exchange": lambda c: _exchange(c),
    "barrier": lambda c: c.barrier(timeout=10),
    "bcast_object": lambda c: c.bcast_object({"seed": 5}),
    "gather_object": lambda c: c.gather_object(("best", 1.5), root=0),
    "allgather_object": lambda c: c.allgather_object([1, 2]),
    "iallreduce": _iallreduce,
    "send_object": _objects,
    "isend_object": _objects,
    "recv_object": _objects,
    "traffic": lambda c: dict(c.traffic),  # last: what the calls above counted
}


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_both_implementations_satisfy_the_protocol(one_rank):
    assert isinstance(one_rank, EngineComm) and isinstance(SelfComm(), EngineComm)
    assert missing_members(one_rank) == [] and missing_members(SelfComm()) == []
    assert missing_members(object()) == list(ENGINE_COMM_MEMBERS)


def test_every_member_gives_the_same_result_on_one_rank(one_rank):
    assert set(CALLS) == set(ENGINE_COMM_MEMBERS)
    alone = SelfComm()
    for name, call in CALLS.items():
        got, want = call(alone), call(one_rank)
        assert _same(got, want), f"{name}: SelfComm gave {got!r}, Communicator {want!r}"
    def sent(obj):      # a header of 8 bytes per part, the pickle, its arrays' data out of band
        buffers = []
        body = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        return 8 * (1 + len(buffers)) + len(body) + sum(b.raw().nbytes for b in buffers)

    pickles = sent({"block": np.arange(3)}) + sent("second")
    assert alone.traffic == {"migration": 24, "collective": 3 * pickles}   # _objects runs 3 times


def test_self_comm_refuses_what_a_one_rank_communicator_refuses(one_rank):
    for comm in (SelfComm(), one_rank):
        with pytest.raises(ValueError, match=r"expected root in \[0, 0\], got 1"):
            comm.exchange(sends=[(1, np.zeros(2))])
        with pytest.raises(ValueError, match=r"expected op in .* got 'avg'"):
            comm.iallreduce(np.zeros(2), op="avg")
    alone = SelfComm()
    with pytest.raises(ValueError, match="expected as many receives from rank 0 as sends to it, got 1 sends"):
        alone.exchange(sends=[(0, np.zeros(2))])
    with pytest.raises(ValueError, match="expected a receive array of at least 16 bytes, got 8"):
        alone.exchange(sends=[(0, np.zeros(2))], recvs=[(0, np.zeros(1))])
    with pytest.raises(ValueError, match="expected an object sent to rank 0 before recv_object, got none"):
        alone.recv_object()
    for comm in (SelfComm(), one_rank):
        with pytest.raises(ValueError, match=r"expected root in \[0, 0\], got 1"):
            comm.send_object("x", 1)


def test_io_resolves_none_to_a_self_comm_and_checks_the_protocol(one_rank):
    assert isinstance(resolve_comm(None), SelfComm)
    assert resolve_comm(one_rank) is one_rank

    class ControlPlaneOnly:
        rank, size = 0, 1

        def bcast_object(self, obj, root=0):
            return obj

    with pytest.raises(TypeError, match=r"got ControlPlaneOnly lacking \['traffic', 'purpose', 'exchange'"):
        resolve_comm(ControlPlaneOnly())
