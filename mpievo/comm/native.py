"""The MPI library's own collectives: the ``native`` algorithm and the direct fast path.

The ``native`` path calls the MPI library's collective where the calibration table
finds it faster (small messages). It keeps mpievo's NaN semantics: MPI_MAX/MPI_MIN
are order-dependent with NaN in some libraries, so floating max/min travel as
integers that sort like the floats with NaN at the winning end
(mpievo.kernels.ordered), written into the output, reduced with the integer
MAX/MIN and turned back in place: one call on the data alone, no extra buffer.

:class:`FastPath` makes the direct calls for the smallest messages, before any of
the general path's bookkeeping.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from mpievo.kernels import host

from .progress import Pending
from .ring import mpi_buf
from .selection import MAXMIN, native_limit

#: dtypes with an MPI datatype of their own (float16/bfloat16 have none in MPI-4.0)
NATIVE_TYPES = {
    np.dtype(np.int8): MPI.INT8_T, np.dtype(np.int16): MPI.INT16_T,
    np.dtype(np.int32): MPI.INT32_T, np.dtype(np.int64): MPI.INT64_T,
    np.dtype(np.uint8): MPI.UINT8_T, np.dtype(np.uint16): MPI.UINT16_T,
    np.dtype(np.uint32): MPI.UINT32_T, np.dtype(np.uint64): MPI.UINT64_T,
    np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE,
}
NATIVE_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "mean": MPI.SUM}
#: float dtype -> MPI type of its order-preserving integer keys
_KEY_TYPES = {np.dtype(np.float32): MPI.INT32_T, np.dtype(np.float64): MPI.INT64_T}


def native_supports(dtype, op: str) -> bool:
    """Whether the MPI library's reduction gives mpievo's exact result for (dtype, op).

    Open MPI 5.0's vectorised (AVX) MPI_SUM on 8- and 16-bit integers saturates
    (int8: -85 + -75 gave -128) instead of wrapping like numpy and the ring; those
    sums never go native.
    """
    dtype = np.dtype(dtype)
    if dtype not in NATIVE_TYPES:
        return False
    return not (dtype.kind in "iu" and dtype.itemsize <= 2 and op in ("sum", "mean"))


def _nan_guarded(dtype, op: str) -> bool:
    return op in ("max", "min") and np.dtype(dtype).kind == "f"


def native_allreduce_steps(comm: MPI.Intracomm, src: np.ndarray, dst: np.ndarray, op: str,
                           *, mean: bool, blocking: bool):
    """All-reduce with the MPI library's own Allreduce, keeping mpievo's NaN semantics."""
    if _nan_guarded(src.dtype, op):
        from mpievo.kernels import ordered  # lazy: Numba

        keys = dst.view(ordered.KEY_DTYPES[src.dtype])
        ordered.encode(src, keys, nan_high=op == "max")
        send, mpitype = MPI.IN_PLACE, _KEY_TYPES[src.dtype]
    else:
        keys, mpitype = dst, NATIVE_TYPES[src.dtype]
        send = MPI.IN_PLACE if dst is src else [src, mpitype]
    if blocking:
        comm.Allreduce(send, [keys, mpitype], NATIVE_OPS[op])
    else:
        req = comm.Iallreduce(send, [keys, mpitype], NATIVE_OPS[op])
        yield [Pending(req, -1, "from")]
    if keys is not dst:
        ordered.decode(keys)
    if mean:
        host.divide_into(dst, comm.Get_size())
    return dst


def native_allgatherv_steps(comm, src, dst, counts, displs, *, blocking: bool):
    """All-gather with MPI_Allgather (equal counts) or MPI_Allgatherv (bytes), any dtype."""
    send = MPI.IN_PLACE if src is None else [src, MPI.BYTE]
    if min(counts) == max(counts):  # equal blocks: MPI_Allgather's algorithms beat Allgatherv's
        recv = [dst, MPI.BYTE]
        call, icall = comm.Allgather, comm.Iallgather
    else:
        itemsize = dst.dtype.itemsize
        recv = [dst, ([c * itemsize for c in counts], [d * itemsize for d in displs]), MPI.BYTE]
        call, icall = comm.Allgatherv, comm.Iallgatherv
    if blocking:
        call(send, recv)
    else:
        req = icall(send, recv)
        yield [Pending(req, -1, "from")]
    return dst


def native_bcast_steps(comm, buf, root: int, *, blocking: bool):
    """Broadcast with MPI_Bcast (bytes), any dtype."""
    if blocking:
        comm.Bcast(mpi_buf(buf), root)
    else:
        req = comm.Ibcast(mpi_buf(buf), root)
        yield [Pending(req, root, "from")]
    return buf


def native_reduce_scatter_steps(comm, src, dst, counts, op: str, *, mean: bool, blocking: bool):
    """Reduce-scatter with MPI_Reduce_scatter (not for floating max/min: NaN order)."""
    mpitype, mpiop = NATIVE_TYPES[src.dtype], NATIVE_OPS[op]
    if blocking:
        comm.Reduce_scatter([src, mpitype], [dst, mpitype], list(counts), mpiop)
    else:
        req = comm.Ireduce_scatter([src, mpitype], [dst, mpitype], list(counts), mpiop)
        yield [Pending(req, -1, "from")]
    if mean:
        host.divide_into(dst, comm.Get_size())
    return dst


def native_reduce_scatter_supports(dtype, op: str) -> bool:
    return native_supports(dtype, op) and not _nan_guarded(dtype, op)


#: (dtype, op) -> (MPI type, MPI op, guard) of the native all-reduces without a final
#: division; guard: None, or NaN's end of the keys (True for max) for floating max/min
_FAST_PLANS = {(dtype, op): (_KEY_TYPES[dtype], NATIVE_OPS[op], op == "max") if _nan_guarded(dtype, op)
               else (mpitype, NATIVE_OPS[op], None)
               for dtype, mpitype in NATIVE_TYPES.items()
               for op in ("sum", "prod", "max", "min")
               if native_supports(dtype, op)}
#: dtypes broadcast as raw bytes on the fast path (the general path checks the rest)
_BROADCAST_DTYPES = frozenset(host.SUPPORTED_DTYPES)


class FastPath:
    """Direct MPI calls for small host messages that the table sends to ``native``.

    Small calls cost a few microseconds in the MPI library; the general path's
    Python bookkeeping would double or triple that, so calls that need neither
    timeout nor validation go straight to MPI. Each method returns False when the
    call does not qualify, or MPI refused the buffers: the general path then runs
    it, or explains what is wrong.

    Args:
        core: the communicator's :class:`mpievo.comm.core.CommCore` (its private
            MPI communicator, tag sequence and traffic are updated here).
    """

    def __init__(self, core):
        self._core = core
        self._comm = core.comm
        self._size = core.size
        self._ring_factor = 2 * (core.size - 1)  # bytes sent per byte reduced, times size
        self.refresh()

    def refresh(self) -> None:
        """Recompute the size limits from the core's state (all -1 once it is broken)."""
        core = self._core
        usable = core.size > 1 and not core.validate and core.timeout is None and core.broken is None

        def limit(collective: str) -> int:
            return native_limit(collective, core.layout.key, core.forced[collective]) if usable else -1

        self._allreduce_max = limit("allreduce")
        self._guarded_max = (native_limit("allreduce", core.layout.key, core.forced["allreduce"], variant=MAXMIN)
                             if usable else -1)
        self._allgather_max = limit("allgather")
        self._broadcast_max = limit("broadcast")
        self._reduce_scatter_max = limit("reduce_scatter")

    def allreduce(self, sendbuf, recvbuf, op) -> bool:
        """MPI_Allreduce of numpy ``sendbuf`` into ``recvbuf`` (may be ``sendbuf``)."""
        if type(sendbuf) is not np.ndarray or type(recvbuf) is not np.ndarray:
            return False
        plan = _FAST_PLANS.get((sendbuf.dtype, op))
        nbytes = sendbuf.nbytes
        if (plan is None or nbytes > (self._allreduce_max if plan[2] is None else self._guarded_max)
                or recvbuf.dtype is not sendbuf.dtype):
            return False
        if plan[2] is not None:
            return self._guarded_allreduce(sendbuf, recvbuf, plan)
        try:
            self._comm.Allreduce(MPI.IN_PLACE if recvbuf is sendbuf else [sendbuf, plan[0]],
                                 [recvbuf, plan[0]], plan[1])
        except (BufferError, ValueError):
            return False
        # counted inline (a helper call would add ~0.1 us): the next tag, as the general
        # path takes one, so tags stay in step on every rank; then the bytes sent
        core = self._core
        core.seq += 1
        traffic, purpose = core.traffic, core.purpose
        traffic[purpose] = traffic.get(purpose, 0) + nbytes * self._ring_factor // self._size
        return True

    def _guarded_allreduce(self, sendbuf, recvbuf, plan) -> bool:
        """Floating max/min as order-preserving integer keys (see the module docstring)."""
        from mpievo.kernels import ordered  # lazy: Numba

        if (sendbuf.size != recvbuf.size or not sendbuf.flags.c_contiguous
                or not recvbuf.flags.c_contiguous or not recvbuf.flags.writeable):
            return False  # the general path explains what is wrong
        keys = recvbuf.reshape(-1).view(ordered.KEY_DTYPES[sendbuf.dtype])
        ordered.encode(sendbuf.reshape(-1), keys, plan[2])
        self._comm.Allreduce(MPI.IN_PLACE, [keys, plan[0]], plan[1])
        ordered.decode(keys)
        core = self._core
        core.seq += 1
        traffic, purpose = core.traffic, core.purpose
        traffic[purpose] = traffic.get(purpose, 0) + sendbuf.nbytes * self._ring_factor // self._size
        return True

    def reduce_scatter(self, sendbuf, recvbuf, op) -> bool:
        """MPI_Reduce_scatter_block of numpy ``sendbuf`` into ``recvbuf`` (equal blocks;
        not floating max/min, whose NaN order only the general path keeps)."""
        if type(sendbuf) is not np.ndarray or type(recvbuf) is not np.ndarray:
            return False
        plan = _FAST_PLANS.get((sendbuf.dtype, op))
        nbytes = sendbuf.nbytes
        if (plan is None or plan[2] is not None or nbytes > self._reduce_scatter_max
                or recvbuf.dtype is not sendbuf.dtype or sendbuf.ndim != 1 or recvbuf.ndim != 1
                or recvbuf.size * self._size != sendbuf.size or np.may_share_memory(sendbuf, recvbuf)):
            return False
        try:
            self._comm.Reduce_scatter_block([sendbuf, plan[0]], [recvbuf, plan[0]], plan[1])
        except (BufferError, ValueError):
            return False
        core = self._core
        core.seq += 1
        traffic, purpose = core.traffic, core.purpose
        traffic[purpose] = traffic.get(purpose, 0) + nbytes - recvbuf.nbytes
        return True

    def allgather(self, sendbuf, recvbuf, counts) -> bool:
        """MPI_Allgather of equal blocks (``counts`` all ``sendbuf.size``), as bytes."""
        size = self._size
        if (type(sendbuf) is not np.ndarray or type(recvbuf) is not np.ndarray
                or recvbuf.nbytes > self._allgather_max or recvbuf.dtype is not sendbuf.dtype
                or type(counts) not in (list, tuple) or len(counts) != size
                or counts.count(sendbuf.size) != size or recvbuf.size != sendbuf.size * size
                or np.may_share_memory(sendbuf, recvbuf)):  # in place: the general path says so to MPI
            return False
        try:
            self._comm.Allgather([sendbuf, MPI.BYTE], [recvbuf, MPI.BYTE])
        except (BufferError, ValueError):
            return False
        core = self._core
        core.seq += 1
        traffic, purpose = core.traffic, core.purpose
        traffic[purpose] = traffic.get(purpose, 0) + sendbuf.nbytes * (size - 1)
        return True

    def broadcast(self, buf, root) -> bool:
        """MPI_Bcast of ``buf`` as bytes from ``root``."""
        if (type(buf) is not np.ndarray or buf.nbytes > self._broadcast_max or type(root) is not int
                or not 0 <= root < self._size or buf.dtype not in _BROADCAST_DTYPES):
            return False
        try:
            self._comm.Bcast([buf, MPI.BYTE], root)
        except (BufferError, ValueError):
            return False
        core = self._core
        core.seq += 1
        if core.rank == root:
            traffic, purpose = core.traffic, core.purpose
            traffic[purpose] = traffic.get(purpose, 0) + buf.nbytes * (self._size - 1)
        return True
