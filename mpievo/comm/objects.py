"""Control-plane collectives: barrier and pickled-object broadcast/gather.

For small control messages (configs, votes, summaries); arrays belong in the
collectives proper or in point-to-point exchange.
"""

from __future__ import annotations

import pickle

import numpy as np
from mpi4py import MPI

from .buffers import check_root
from .progress import Pending


def barrier(core, timeout: float | None) -> None:
    """Wait until every rank reached the barrier (or time out)."""
    core.check_usable()
    core.wait("barrier", [Pending(core.comm.Ibarrier(), -1, "from")], timeout)


def bcast_object(core, obj, root: int):
    """Broadcast a picklable object from ``root``."""
    root = check_root(root, core.size)
    comm, is_root = core.comm, core.rank == root
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if is_root else b""
    length = np.array([len(data)], dtype=np.int64)
    comm.Bcast([length, MPI.INT64_T], root)
    buf = np.frombuffer(data, dtype=np.uint8).copy() if is_root else np.empty(int(length[0]), np.uint8)
    comm.Bcast([buf, MPI.BYTE], root)
    if is_root:
        core.count(len(data) * (core.size - 1))
        return obj
    return pickle.loads(buf.tobytes())


def allgather_object(core, obj) -> list:
    """Every rank's picklable object on every rank, in rank order."""
    parts = _gather_bytes(core, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), root=None)
    return [pickle.loads(p) for p in parts]


def gather_object(core, obj, root: int):
    """Every rank's picklable object on ``root`` (None elsewhere)."""
    root = check_root(root, core.size)
    parts = _gather_bytes(core, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), root=root)
    return None if parts is None else [pickle.loads(p) for p in parts]


def _gather_bytes(core, data: bytes, root):
    comm, size, rank = core.comm, core.size, core.rank
    lengths = np.empty(size, dtype=np.int64)
    comm.Allgather([np.array([len(data)], dtype=np.int64), MPI.INT64_T], [lengths, MPI.INT64_T])
    displs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    mine = np.frombuffer(data, dtype=np.uint8)
    if root is None or rank == root:
        out = np.empty(int(lengths.sum()), dtype=np.uint8)
        spec = [out, (lengths.tolist(), displs), MPI.BYTE]
    else:
        out, spec = None, None
    if root is None:
        comm.Allgatherv([mine, MPI.BYTE], spec)
        core.count(len(data) * (size - 1))
    else:
        comm.Gatherv([mine, MPI.BYTE], spec, root)
        core.count(len(data) if rank != root else 0)
    if out is None:
        return None
    return [out[d:d + n].tobytes() for d, n in zip(displs, lengths.tolist())]
