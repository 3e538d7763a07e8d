"""Point-to-point exchange of arrays with chosen peers, without pickling.

Every send and receive is posted non-blocking before any wait, so ranks that all
send large messages at the same time cannot deadlock. Messages between the same
pair of ranks match in the order given. Arrays of any size travel in pieces under
MPI's count limit (:mod:`mpievo.comm.chunking`), straight from and into the
caller's arrays.
"""

from __future__ import annotations

import numpy as np

from .buffers import check_root, flat_host
from .chunking import post_recv, post_send

EXCHANGE_TAG = 31000           # above every collective tag (mpievo.comm.core)


def run(core, sends, recvs, timeout: float | None) -> None:
    """Post every send and receive, then wait for all (see ``Communicator.exchange``).

    Every peer and array is checked before the first message is posted, so bad input
    leaves nothing in flight.
    """
    core.check_usable()
    comm, size = core.comm, core.size
    sends = [(check_root(dest, size), flat_host(arr, "send array").view(np.uint8)) for dest, arr in sends]
    recvs = [(check_root(source, size), flat_host(arr, "receive array", writable=True).view(np.uint8))
             for source, arr in recvs]
    pending = []
    for dest, flat in sends:
        pending += post_send(comm, dest, flat, EXCHANGE_TAG)
        core.count(flat.nbytes)
    for source, flat in recvs:
        pending += post_recv(comm, source, flat, EXCHANGE_TAG)
    if pending:
        core.wait("exchange", pending, timeout)
