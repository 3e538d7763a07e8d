"""Control-plane collectives: barrier and pickled-object broadcast/gather; pickled
point-to-point messages (:func:`send_object`, :func:`recv_object`, from any source).

For small control messages (configs, votes, summaries); arrays belong in the
collectives proper or in point-to-point exchange (a point-to-point message sends its
arrays' data out of band, uncopied). Pickles of any size work: a
broadcast goes in pieces under MPI's count limit (:mod:`mpievo.comm.chunking`), and
a gather whose pickles together exceed one piece goes point to point, piece by
piece, instead of through one Gatherv/Allgatherv (whose counts and displacements
are C ints). Small calls take one Bcast or one Gatherv/Allgatherv after the lengths,
as before. Pickles are sent from and unpickled out of the message buffers, uncopied.
"""

from __future__ import annotations

import pickle

import numpy as np
from mpi4py import MPI

from . import chunking
from .buffers import check_root
from .pickles import dumps_out_of_band
from .progress import Pending, Poll

OBJECT_TAG = 31001   # pickles too large for one Gatherv (exchange uses 31000)
MESSAGE_TAG = 31002       # a point-to-point message's header (what recv_object probes for)
MESSAGE_BODY_TAG = 31003  # its pickle and buffers, in pieces (an any-source probe sees headers only)


def barrier(core, timeout: float | None) -> None:
    """Wait until every rank reached the barrier (or time out)."""
    core.check_usable()
    core.wait("barrier", [Pending(core.comm.Ibarrier(), -1, "from")], timeout)


def bcast_object(core, obj, root: int):
    """Broadcast a picklable object from ``root``."""
    root = check_root(root, core.size)
    comm, is_root = core.comm, core.rank == root
    data = _dumps(obj) if is_root else b""
    length = np.array([len(data)], dtype=np.int64)
    comm.Bcast([length, MPI.INT64_T], root)
    # the root sends from the pickle itself (read-only is fine for MPI's send side)
    buf = np.frombuffer(data, np.uint8) if is_root else np.empty(int(length[0]), np.uint8)
    for piece in chunking.pieces(buf):
        comm.Bcast([piece, MPI.BYTE], root)
    if is_root:
        core.count(len(data) * (core.size - 1))
        return obj
    return pickle.loads(buf)


def allgather_object(core, obj) -> list:
    """Every rank's picklable object on every rank, in rank order."""
    parts = _gather_bytes(core, _dumps(obj), root=None)
    return [pickle.loads(p) for p in parts]


def gather_object(core, obj, root: int):
    """Every rank's picklable object on ``root`` (None elsewhere)."""
    root = check_root(root, core.size)
    parts = _gather_bytes(core, _dumps(obj), root=root)
    return None if parts is None else [pickle.loads(p) for p in parts]


def _dumps(obj) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _gather_bytes(core, data: bytes, root):
    """Every rank's ``data`` (as uint8 views, rank order) on ``root``, or on every rank
    when ``root`` is None; None on ranks that get nothing."""
    comm, size, rank = core.comm, core.size, core.rank
    lengths = np.empty(size, dtype=np.int64)
    comm.Allgather([np.array([len(data)], dtype=np.int64), MPI.INT64_T], [lengths, MPI.INT64_T])
    displs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    mine = np.frombuffer(data, dtype=np.uint8)
    out = np.empty(int(lengths.sum()), np.uint8) if root is None or rank == root else None
    if int(lengths.sum()) <= chunking.MAX_MESSAGE_BYTES:   # the same decision on every rank
        _gatherv(core, mine, out, lengths.tolist(), displs, root)
    else:
        _gather_pieces(core, mine, out, lengths.tolist(), displs, root)
    if out is None:
        return None
    return [out[d:d + n] for d, n in zip(displs, lengths.tolist())]


def _gatherv(core, mine: np.ndarray, out, lengths: list, displs: list, root) -> None:
    """One Gatherv (or Allgatherv): every count and displacement fits a C int."""
    comm, size, rank = core.comm, core.size, core.rank
    spec = None if out is None else [out, (lengths, displs), MPI.BYTE]
    if root is None:
        comm.Allgatherv([mine, MPI.BYTE], spec)
        core.count(mine.nbytes * (size - 1))
    else:
        comm.Gatherv([mine, MPI.BYTE], spec, root)
        core.count(mine.nbytes if rank != root else 0)


def _gather_pieces(core, mine: np.ndarray, out, lengths: list, displs: list, root) -> None:
    """Point to point in pieces: each rank sends its pickle to the root (or to every
    other rank) and receives straight into its place in ``out``; waits under the
    communicator's timeout."""
    comm, size, rank = core.comm, core.size, core.rank
    targets = [r for r in range(size) if r != rank] if root is None else ([] if rank == root else [root])
    pending: list[Pending] = []
    for dest in targets:
        pending += chunking.post_send(comm, dest, mine, OBJECT_TAG)
        core.count(mine.nbytes)
    if out is not None:
        out[displs[rank]:displs[rank] + lengths[rank]] = mine
        for source in (r for r in range(size) if r != rank):
            pending += chunking.post_recv(comm, source, out[displs[source]:displs[source] + lengths[source]],
                                          OBJECT_TAG)
    if pending:
        core.wait("allgather_object" if root is None else "gather_object", pending, None)


def _post_object(core, obj, dest: int) -> list[Pending]:
    """Post a message of ``obj`` to ``dest``: a header (the pickle's length and each
    buffer's), the pickle, then the data of its contiguous arrays straight from their
    memory (pickle protocol 5, out of band: no copy into the pickle), each in pieces.
    The requests to wait for (each holds its buffer)."""
    core.check_usable()
    dest = check_root(dest, core.size)
    body, buffers = dumps_out_of_band(obj)
    header = np.array([body.nbytes] + [b.nbytes for b in buffers], np.int64)
    pending = [Pending(core.comm.Isend([header, MPI.INT64_T], dest, MESSAGE_TAG), dest, "to")]
    for part in (body, *buffers):
        pending += chunking.post_send(core.comm, dest, part, MESSAGE_BODY_TAG)
    core.count(header.nbytes + body.nbytes + sum(b.nbytes for b in buffers))
    return pending


def send_object(core, obj, dest: int, timeout: float | None) -> None:
    """Send a picklable object to ``dest`` (see :func:`_post_object`); returns when all
    left this rank (large ones once ``dest`` receives them)."""
    core.wait("send_object", _post_object(core, obj, dest), timeout)


def isend_object(core, obj, dest: int, timeout: float | None):
    """:func:`send_object` without the wait: a request whose ``wait()`` returns once the
    message left this rank. Until then ``obj``'s arrays are read in place: leave them
    unchanged."""
    pending = _post_object(core, obj, dest)

    def steps():
        yield pending

    return core.execute("isend_object", steps(), timeout, False, None)


class _Probe(Poll):
    """A matched probe for a message's length from ``source`` (or any source)."""

    def __init__(self, comm, source: int):
        self.comm, self.source = comm, source
        self.status = MPI.Status()
        self.message = None

    def Test(self) -> bool:  # noqa: N802 - polled like an MPI request
        if self.message is None:
            self.message = self.comm.Improbe(self.source, MESSAGE_TAG, self.status)
        return self.message is not None


def recv_object(core, source: int | None, timeout: float | None):
    """The next object :func:`send_object` sent to this rank from ``source`` (None: from
    any rank, whichever message is matched first), as ``(sender, object)``."""
    core.check_usable()
    source = MPI.ANY_SOURCE if source is None else check_root(source, core.size)
    probe = _Probe(core.comm, source)
    core.wait("recv_object", [Pending(probe, source, "from")], timeout)
    header = np.empty(probe.status.Get_count(MPI.INT64_T), np.int64)
    probe.message.Recv([header, MPI.INT64_T])
    sender = probe.status.Get_source()
    body, *buffers = (np.empty(int(n), np.uint8) for n in header)
    pending = []
    for part in (body, *buffers):     # matched in the order they were sent
        pending += chunking.post_recv(core.comm, sender, part, MESSAGE_BODY_TAG)
    core.wait("recv_object", pending, timeout)
    return sender, pickle.loads(body, buffers=buffers)   # arrays over the received buffers
