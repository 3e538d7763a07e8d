"""A node's shared scratch: an MPI-3 shared-memory window every rank of the node can read.

Each rank owns a part of the window (``MPI_Win_allocate_shared`` on the node
communicator): a header of progress counters and two slots (double buffering) of
``pieces`` pieces each. Peers read a rank's slots directly, so a byte staged there
is read by every peer without passing through the MPI library's own buffers.

Synchronisation is by counters, one line per rank, written only by their owner:
``STAGED`` (its input for a step is in its slot), ``REDUCED`` (its result for a step
is ready; it read its peers' staged data) and ``CONSUMED`` (it read its peers'
results or copies). Counters only grow: each call starts from ``base``, the value
every rank reached at the end of the previous call, and step k publishes
``base + k + 1``. ``MPI_Win_sync`` (a memory barrier) orders the data before the
counter on the writer's side and after it on the reader's. Waits are
:class:`mpievo.comm.progress.Poll` objects, so they honour the collective's timeout.

The window is made on first use and kept (cached) for the communicator's life.
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from ..progress import Pending, Poll

STAGED, REDUCED, CONSUMED = 0, 1, 2
HEADER_BYTES = 256           # the counters, alone on their cache lines
PIECE_ALIGN = 4096
MIN_PIECE_BYTES = 16 << 10
ARENA_BUDGET_BYTES = 64 << 20  # per rank: pieces shrink when a node has many ranks


def piece_bytes(requested: int, local_size: int) -> int:
    """Bytes of one piece: ``requested`` rounded to pages, shrunk to the per-rank budget
    (two slots of ``local_size`` pieces)."""
    budget = ARENA_BUDGET_BYTES // (2 * max(1, local_size))
    size = max(MIN_PIECE_BYTES, min(int(requested), budget))
    return -(-size // PIECE_ALIGN) * PIECE_ALIGN


class _Counter(Poll):
    """Poll: peer ``q``'s counter ``which`` reached ``value``."""

    __slots__ = ("flags", "which", "value", "win", "spin")

    def __init__(self, arena: "Arena", q: int, which: int, value: int):
        self.flags, self.which, self.value = arena.flags[q], which, value
        self.win, self.spin = arena.win, arena.spin

    def Test(self) -> bool:  # noqa: N802 - the request interface
        if self.flags[self.which] >= self.value:
            self.win.Sync()  # reads of the peer's data come after the counter
            return True
        return False


class Arena:
    """The node's shared scratch window (collective over ``node`` to create and free).

    Args:
        node: the node communicator.
        comm_ranks: communicator rank of each local rank (for timeout messages).
        piece: bytes per piece (see :func:`piece_bytes`).

    Attributes:
        rank, size: local rank and node size.
        piece: bytes per piece; a slot holds ``size`` pieces.
        base: the counter value all ranks reached at the end of the previous call.
    """

    def __init__(self, node: MPI.Intracomm, comm_ranks, piece: int):
        self.rank, self.size = node.Get_rank(), node.Get_size()
        self.piece = piece
        self.comm_ranks = list(comm_ranks)
        slot = self.size * piece
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")  # each part on its owner's NUMA node
        try:
            self.win = MPI.Win.Allocate_shared(HEADER_BYTES + 2 * slot, 1, info, node)
        finally:
            info.Free()
        self.win.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch for good: Win_sync needs one
        parts = [np.frombuffer(self.win.Shared_query(q)[0], np.uint8) for q in range(self.size)]
        self.flags = [part[:24].view(np.int64) for part in parts]
        self._slots = [(part[HEADER_BYTES:HEADER_BYTES + slot], part[HEADER_BYTES + slot:])
                       for part in parts]
        self.flags[self.rank][:] = 0
        self.win.Sync()
        node.Barrier()  # nobody reads a counter before its owner zeroed it
        self.base = 0
        cores = os.cpu_count() or 1
        self.spin = 0 if self.size > cores else Poll.spin

    def slots(self, dtype) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every rank's two slots as 1-D arrays of ``dtype``."""
        return [(a.view(dtype), b.view(dtype)) for a, b in self._slots]

    def piece_elems(self, dtype) -> int:
        return self.piece // np.dtype(dtype).itemsize

    def publish(self, which: int, value: int) -> None:
        """Set this rank's counter ``which`` to ``value`` after its data writes."""
        self.win.Sync()
        self.flags[self.rank][which] = value

    def wait(self, which: int, value: int, peers=None) -> list[Pending]:
        """Polls for the peers (default: all but this rank) whose counter ``which`` is
        below ``value``; empty when all are there."""
        peers = range(self.size) if peers is None else peers
        late = [Pending(_Counter(self, q, which, value), self.comm_ranks[q], "from")
                for q in peers if q != self.rank and self.flags[q][which] < value]
        if not late:
            self.win.Sync()
        return late

    def finish(self, steps: int) -> None:
        """End a call of ``steps`` steps: this rank is done with every peer's data."""
        self.base += steps
        self.publish(CONSUMED, self.base)

    def free(self) -> None:
        """Release the window (collective over the node)."""
        self.flags, self._slots = [], []
        self.win.Unlock_all()
        self.win.Free()
