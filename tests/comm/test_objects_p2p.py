"""Point-to-point objects (send_object / recv_object): any-source receives, order per
sender, pickles in pieces, traffic, and a timeout instead of a hang."""

from __future__ import annotations

import numpy as np
import pytest

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator, chunking
from mpievo.comm.errors import CollectiveTimeoutError


@pytest.mark.mpi(min_size=2)
def test_rank_zero_receives_from_any_source_in_each_senders_order(world):
    comm = Communicator(world)
    rounds = 3
    if comm.rank == 0:
        got = [comm.recv_object() for _ in range(rounds * (comm.size - 1))]
        senders = [s for s, _ in got]
        ok = sorted(senders) == sorted(list(range(1, comm.size)) * rounds) and all(
            [obj["seq"] for s, obj in got if s == r] == list(range(rounds)) for r in range(1, comm.size))
        ok = ok and all(np.array_equal(obj["rows"], np.full((2, 3), s, np.float32)) for s, obj in got)
    else:
        for seq in range(rounds):
            comm.send_object({"seq": seq, "rows": np.full((2, 3), comm.rank, np.float32)}, 0)
        ok = comm.traffic["collective"] > 0
    all_ranks_agree(world, ok, "any-source receives lost, mixed or reordered messages")


@pytest.mark.mpi(min_size=2)
def test_a_receive_from_one_source_skips_the_others(world, monkeypatch):
    monkeypatch.setattr(chunking, "MAX_MESSAGE_BYTES", 64)    # pickles travel in many pieces
    comm = Communicator(world)
    last = comm.size - 1
    ok = True
    if comm.rank == 0:
        sender, obj = comm.recv_object(last)
        ok = sender == last and np.array_equal(obj, np.arange(100) * last)
        rest = sorted(comm.recv_object()[0] for _ in range(1, last))
        ok = ok and rest == list(range(1, last))
    elif comm.rank:
        comm.send_object(np.arange(100) * comm.rank, 0)
    all_ranks_agree(world, ok, "a receive from one source took another's message")


@pytest.mark.mpi(min_size=2)
def test_a_receive_nobody_answers_times_out(world):
    comm = Communicator(world, timeout=0.5)
    ok = True
    if comm.rank == 0:
        with pytest.raises(CollectiveTimeoutError, match=r"recv_object on rank 0 timed out after 0.5 s"):
            comm.recv_object()
        ok = comm.broken is not None
    all_ranks_agree(world, ok, "a receive without a sender did not time out")


@pytest.mark.mpi(min_size=2)
def test_arrays_travel_out_of_band_and_arrive_equal(world, monkeypatch):
    """Contiguous arrays (C and Fortran order, empty ones) go as raw buffers beside the
    pickle, non-contiguous ones inside it; in pieces too; the traffic is what
    message_bytes says, and the pickle is far smaller than the data."""
    from mpievo.comm.pickles import dumps_out_of_band, message_bytes

    monkeypatch.setattr(chunking, "MAX_MESSAGE_BYTES", 256)
    comm = Communicator(world)
    rng = np.random.default_rng(3)
    payload = {"c": rng.normal(size=(50, 7)).astype(np.float32), "f": np.asfortranarray(rng.normal(size=(9, 4))),
               "strided": np.arange(40.0)[::3], "empty": np.empty((0, 5)), "ints": np.arange(1000, dtype=np.int64),
               "label": "evaluate"}
    body, buffers = dumps_out_of_band(payload)
    ok = len(buffers) == 4 and body.nbytes < 600       # c, f, empty, ints; the strided one in band
    if comm.rank == 1:
        before = comm.traffic.get("collective", 0)
        comm.send_object(payload, 0)
        ok = ok and comm.traffic["collective"] - before == message_bytes(payload)
    elif comm.rank == 0:
        sender, got = comm.recv_object(1)
        ok = ok and sender == 1 and got["label"] == "evaluate" and got["f"].flags.f_contiguous
        ok = ok and all(np.array_equal(got[k], payload[k]) and got[k].dtype == payload[k].dtype
                        and got[k].shape == payload[k].shape for k in ("c", "f", "strided", "empty", "ints"))
        got["c"][0, 0] = 1.0     # the arrays are the receiver's own, writable
    all_ranks_agree(world, ok, "arrays sent out of band arrived different, or the traffic was not message_bytes")


@pytest.mark.mpi(min_size=2)
def test_isend_object_returns_before_the_receiver_takes_the_message(world):
    """Two ranks each post a large message to the other before either receives: with
    blocking sends both would wait for the other's receive (a large message waits for
    its receiver) and time out; each then receives the other's array intact."""
    comm = Communicator(world, timeout=20)
    ok = True
    if comm.rank < 2:
        peer = 1 - comm.rank
        rows = np.full((4, 1 << 18), comm.rank + 1.0, np.float32)     # 4 MiB
        sending = comm.isend_object(("evaluate", rows), peer)
        sender, (label, got) = comm.recv_object(peer)
        ok = sending.wait() is None and sending.done and sender == peer and label == "evaluate"
        ok = ok and np.array_equal(got, np.full((4, 1 << 18), peer + 1.0, np.float32))
    all_ranks_agree(world, ok, "isend_object blocked, or the crossed messages arrived different")
