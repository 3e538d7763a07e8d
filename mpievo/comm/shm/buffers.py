"""Arrays in the node's shared memory (``Communicator.shared_empty``) that the
shared-memory collectives read where they are.

Each allocation is one MPI-3 shared window over the node (``MPI_Win_allocate_shared``
on the node communicator), one part per rank, and every rank maps every part. When
every rank of the node passes such an array to an ``shm`` all-reduce or
reduce-scatter, a rank reduces its block straight from its peers' arrays: the call
copies no input into the scratch window (:mod:`mpievo.comm.shm.collectives`). Any
other array is copied in piece by piece, as before.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

#: window parts start on a cache line (the collectives read them in parallel)
ALIGN = 64


class SharedBuffers:
    """The shared windows one communicator allocated (collective over its node to make
    and to free)."""

    def __init__(self):
        self._windows: list[tuple[MPI.Win, list[np.ndarray]]] = []

    @property
    def count(self) -> int:
        """Windows made so far: the same on every rank of a node (each is collective)."""
        return len(self._windows)

    def allocate(self, node: MPI.Intracomm, nbytes: int) -> np.ndarray:
        """This rank's part of a new window of ``nbytes`` bytes (uint8; collective over
        ``node``, each rank its own size)."""
        if nbytes < 0:
            raise ValueError(f"expected nbytes >= 0, got {nbytes}")
        win = MPI.Win.Allocate_shared(max(int(nbytes), ALIGN), 1, comm=node)
        parts = []
        for q in range(node.Get_size()):
            memory, _ = win.Shared_query(q)
            parts.append(np.frombuffer(memory, np.uint8))
        self._windows.append((win, parts))
        return parts[node.Get_rank()][:nbytes]

    def locate(self, arr: np.ndarray, me: int) -> tuple[int, int]:
        """(window index, byte offset in this rank's part) of the contiguous ``arr``,
        or (-1, -1) when it is not wholly inside one of this rank's parts."""
        if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
            return -1, -1
        start = arr.__array_interface__["data"][0]
        for index, (_, parts) in enumerate(self._windows):
            part = parts[me]
            base = part.__array_interface__["data"][0]
            if base <= start and start + arr.nbytes <= base + part.nbytes:
                return index, start - base
        return -1, -1

    def view(self, index: int, q: int, offset: int, dtype, count: int,
             writable: bool = False) -> np.ndarray:
        """``count`` elements of ``dtype`` at byte ``offset`` of rank ``q``'s part of
        window ``index``; read-only (a peer's input) unless ``writable`` (a peer's output)."""
        part = self._windows[index][1][q]
        itemsize = np.dtype(dtype).itemsize
        view = part[offset:offset + count * itemsize].view(dtype)
        view.flags.writeable = writable
        return view

    def free(self) -> None:
        """Release every window (collective over the node); arrays over them die with it."""
        for win, _ in self._windows:
            win.Free()
        self._windows = []
