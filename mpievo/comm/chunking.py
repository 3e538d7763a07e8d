"""Point-to-point messages of any size: pieces under MPI's count limit.

MPI counts are C ints (at most 2**31 - 1 elements). mpi4py 4 passes larger counts
to the MPI-4 large-count calls, which MPICH 4/5 has but Open MPI 5.0 (MPI 3.1)
refuses (``MPI_ERR_ARG``), so a message over :data:`MAX_MESSAGE_BYTES` travels as
consecutive pieces of at most that many bytes, all with the same tag: MPI's
non-overtaking rule keeps them in order, so sender and receiver, cutting the same
byte count the same way, match piece for piece. Every piece is posted non-blocking;
the caller waits for all of them together, so ranks that all send at once cannot
deadlock. No piece is copied: each is a view of the caller's array.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .progress import Pending

#: Largest piece, in bytes (a module constant so that tests can force tiny pieces).
MAX_MESSAGE_BYTES = 1 << 30


def pieces(flat: np.ndarray) -> list[np.ndarray]:
    """``flat`` (1-D uint8) cut into views of at most MAX_MESSAGE_BYTES (one piece,
    possibly empty, when it fits)."""
    step = MAX_MESSAGE_BYTES
    if flat.nbytes <= step:
        return [flat]
    return [flat[a:a + step] for a in range(0, flat.nbytes, step)]


def post_send(comm: MPI.Comm, dest: int, flat: np.ndarray, tag: int) -> list[Pending]:
    """Post the pieces of ``flat`` (1-D uint8) to ``dest``; the requests to wait for."""
    return [Pending(comm.Isend([piece, MPI.BYTE], dest, tag), dest, "to") for piece in pieces(flat)]


def post_recv(comm: MPI.Comm, source: int, flat: np.ndarray, tag: int) -> list[Pending]:
    """Post receives of the pieces of ``flat`` (1-D uint8, writable) from ``source``."""
    return [Pending(comm.Irecv([piece, MPI.BYTE], source, tag), source, "from") for piece in pieces(flat)]
