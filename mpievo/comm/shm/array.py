"""One array per node in an MPI-3 shared-memory window: every rank of a node maps the same bytes.

Large read-mostly data (e.g. the base models of delta and seeded genomes) needs one
copy per node, not one per rank. :func:`node_shared_array` puts it in a window made by
``MPI_Win_allocate_shared`` on the node communicator: the node's local rank 0 (its
*leader*) allocates the whole array, the other ranks 0 bytes, and every rank maps the
leader's part with ``MPI_Win_shared_query``. The nodes are the Communicator's
(``Communicator.nodes``, which ``MPIEVO_FAKE_NODES`` splits further for tests).

Sizes are bytes with displacement unit 1, passed as ``MPI_Aint``, so arrays over
2 GiB meet none of MPI's ``int`` count limits. The array starts :data:`ALIGN`-byte
aligned (the leader allocates up to ``ALIGN - 1`` bytes of padding). Its contents
are undefined until a rank fills it; :meth:`SharedArray.sync` makes one rank's
writes visible to the node. A single process without MPI (:class:`SelfComm`) gets
plain numpy memory and this module does not import mpi4py for it.
"""

from __future__ import annotations

import operator

import numpy as np

#: alignment of the array's first byte: a cache line, and the widest SIMD vector (AVX-512)
ALIGN = 64
#: the largest MPI_Aint (a signed 64-bit address-sized integer)
AINT_MAX = 2**63 - 1


def array_bytes(shape, dtype) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, nbytes)`` of an array to share, checked; ``nbytes`` is a Python int.

    Raises:
        TypeError: a shape that is not a sequence of ints, or a dtype holding objects.
        ValueError: a negative extent, an empty array, or more bytes than ``MPI_Aint``
            can count once padded.
    """
    try:
        shape = (operator.index(shape),) if np.ndim(shape) == 0 else tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"expected a shape of ints, got {shape!r}") from None
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(f"expected a dtype without Python objects, got {dtype}")
    if any(n < 0 for n in shape):
        raise ValueError(f"expected a shape of non-negative extents, got {shape}")
    nbytes = dtype.itemsize
    for n in shape:  # Python ints: no int32/int64 overflow whatever the size
        nbytes *= n
    if nbytes == 0:
        raise ValueError(f"expected an array of at least one byte, got shape {shape} of {dtype}")
    if nbytes + ALIGN - 1 > AINT_MAX:
        raise ValueError(f"expected at most {AINT_MAX - ALIGN + 1} bytes, got {nbytes}")
    return shape, dtype, nbytes


def leader_bytes(nbytes: int) -> int:
    """Bytes the node's leader allocates for an ``nbytes`` array: room to align its start."""
    return nbytes + ALIGN - 1


class SharedArray:
    """An array every rank of a node maps (see the module docstring).

    Release it on every rank of the node together with :meth:`free` or a ``with``
    block; views taken of :attr:`array` must not be used after that.

    Attributes:
        array: this rank's view of the node's array (writable), None once freed.
        leader: True on the node's local rank 0 (the rank that allocated it; by
            convention the one that fills it).
        node_ranks: communicator ranks of this rank's node, ascending.
        owned_bytes: bytes of the memory this rank allocated, as the window reports
            them (the array and its padding on the leader, 0 on the node's other ranks).
    """

    def __init__(self, array: np.ndarray, node_ranks: tuple[int, ...], leader: bool,
                 owned_bytes: int, window=None, node=None):
        self.array = array
        self.node_ranks = tuple(node_ranks)
        self.leader = leader
        self.owned_bytes = owned_bytes
        self._window = window
        self._node = node

    def sync(self) -> None:
        """Collective over the node: writes any of its ranks made before the call are
        visible to all of them after it."""
        if self._window is not None:
            self._window.Sync()   # this rank's writes reach memory before the barrier
            self._node.Barrier()
            self._window.Sync()   # and the peers' are read only after it

    def flush(self) -> None:
        """This rank's writes reach the memory and its later reads see what reached it
        (a memory barrier, no collective): pair it with a message, the writer flushing
        before it sends, the reader after it receives (point-to-point protocols such as
        :mod:`mpievo.parallel.breed_pool`)."""
        if self._window is not None:
            self._window.Sync()

    def free(self) -> None:
        """Release the memory (collective over the node; a second call does nothing)."""
        self.array = None
        if self._window is not None:
            window, node, self._window, self._node = self._window, self._node, None, None
            window.Unlock_all()
            window.Free()
            node.Free()

    def __enter__(self) -> "SharedArray":
        return self

    def __exit__(self, *exc) -> None:
        self.free()


def node_shared_array(comm, shape, dtype) -> SharedArray:
    """One ``shape``/``dtype`` array per node, mapped by every rank of the node.

    Collective over ``comm``: every rank passes the same shape and dtype.

    Args:
        comm: a :class:`mpievo.comm.Communicator`, or a one-rank
            :class:`mpievo.comm.SelfComm` (then plain numpy memory).

    Raises:
        TypeError / ValueError: see :func:`array_bytes`; a communicator of several
            ranks without MPI; ranks of a node asking for different arrays (on every
            rank of that node).
        CollectiveTimeoutError: a rank did not arrive within the communicator's timeout.
    """
    shape, dtype, nbytes = array_bytes(shape, dtype)
    if getattr(comm, "mpi_comm", None) is None:
        if comm.size != 1:
            raise TypeError(f"expected an mpievo Communicator or a one-rank SelfComm, "
                            f"got {type(comm).__name__} of {comm.size} ranks")
        return SharedArray(np.empty(shape, dtype), (0,), True, nbytes)
    return _window_array(comm, shape, dtype, nbytes)


def _node_comm(mpi_comm, index: int):
    """The communicator of this rank's node, node ``index`` of ``Communicator.nodes``."""
    from mpi4py import MPI

    rank = mpi_comm.Get_rank()
    shared = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    # Communicator.nodes lie inside the real shared-memory nodes (fake nodes only split
    # them further), so splitting the real node by the node's index gives exactly them
    node = shared.Split(index, rank)
    shared.Free()
    return node


def _window_array(comm, shape, dtype, nbytes: int) -> SharedArray:
    from mpi4py import MPI

    # a rank that never comes times out here (the communicator's timeout) instead of
    # leaving the others hanging in the communicator split or the allocation
    comm.barrier()
    index, node_ranks = next((i, r) for i, r in enumerate(comm.nodes) if comm.rank in r)
    node = _node_comm(comm.mpi_comm, index)
    leader = node.Get_rank() == 0
    window = MPI.Win.Allocate_shared(leader_bytes(nbytes) if leader else 0, 1, comm=node)
    window.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch for good: Win_sync needs one
    raw = np.frombuffer(window.Shared_query(0)[0], np.uint8)
    # mappings of shared memory start on page boundaries, so every rank finds the same offset
    offset = -raw.ctypes.data % ALIGN
    claims = node.allgather((shape, dtype.str, offset))
    if any(claim != claims[0] for claim in claims):
        window.Unlock_all()
        window.Free()
        node.Free()
        raise ValueError(f"expected the same (shape, dtype, offset) on every rank of a node, "
                         f"got {[(s, np.dtype(d).name, o) for s, d, o in claims]} on ranks {node_ranks}")
    array = raw[offset:offset + nbytes].view(dtype).reshape(shape)
    owned = len(window.Shared_query(node.Get_rank())[0])
    return SharedArray(array, node_ranks, leader, owned, window, node)
