"""Point-to-point exchange of arrays with chosen peers, without pickling.

Every send and receive is posted non-blocking before any wait, so ranks that all
send large messages at the same time cannot deadlock. Messages between the same
pair of ranks match in the order given. Arrays over 1 GiB travel in 1 GiB pieces
(MPI counts are C ints).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .buffers import check_root, flat_host
from .progress import Pending

EXCHANGE_TAG = 31000           # above every collective tag (mpievo.comm.core)
MAX_MESSAGE_BYTES = 1 << 30


def pieces(flat: np.ndarray) -> list[np.ndarray]:
    """``flat`` (bytes) cut into messages of at most MAX_MESSAGE_BYTES."""
    if flat.nbytes <= MAX_MESSAGE_BYTES:
        return [flat]
    return [flat[a:a + MAX_MESSAGE_BYTES] for a in range(0, flat.nbytes, MAX_MESSAGE_BYTES)]


def run(core, sends, recvs, timeout: float | None) -> None:
    """Post every send and receive, then wait for all (see ``Communicator.exchange``)."""
    core.check_usable()
    comm, size = core.comm, core.size
    pending = []
    for dest, arr in sends:
        flat = flat_host(arr, "send array").view(np.uint8)
        for piece in pieces(flat):
            pending.append(Pending(comm.Isend([piece, MPI.BYTE], check_root(dest, size), EXCHANGE_TAG),
                                   dest, "to"))
        core.count(flat.nbytes)
    for source, arr in recvs:
        flat = flat_host(arr, "receive array", writable=True).view(np.uint8)
        for piece in pieces(flat):
            pending.append(Pending(comm.Irecv([piece, MPI.BYTE], check_root(source, size), EXCHANGE_TAG),
                                   source, "from"))
    core.wait("exchange", pending, timeout)
