"""Latency algorithms for small messages, and the MPI library's own collectives.

Recursive doubling all-reduce takes log2(P) rounds of whole-buffer exchanges (plus a
fold for non-powers of two). Both partners of a round combine the same two values
in the same order (lower rank's value on the left), so every rank ends with the
same bits.

The ``native`` path calls the MPI library's collective where it is faster for tiny
messages. It keeps mpievo's NaN semantics: MPI_MAX/MPI_MIN are order-dependent with
NaN in some libraries, so for floating max/min the NaN positions travel beside the
data in the same call and are restored afterwards.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from mpievo.kernels import host

from .progress import Pending
from .ring import RingContext, mpi_buf

#: dtypes with an MPI datatype of their own (float16/bfloat16 have none in MPI-4.0)
NATIVE_TYPES = {
    np.dtype(np.int8): MPI.INT8_T, np.dtype(np.int16): MPI.INT16_T,
    np.dtype(np.int32): MPI.INT32_T, np.dtype(np.int64): MPI.INT64_T,
    np.dtype(np.uint8): MPI.UINT8_T, np.dtype(np.uint16): MPI.UINT16_T,
    np.dtype(np.uint32): MPI.UINT32_T, np.dtype(np.uint64): MPI.UINT64_T,
    np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE,
}
NATIVE_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "mean": MPI.SUM}


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


def _combine_ordered(mine: np.ndarray, theirs: np.ndarray, op: str, mine_is_low: bool) -> None:
    if mine_is_low:
        host.reduce_into(mine, theirs, op)
    else:
        host.reduce_into_swapped(mine, theirs, op)


def recursive_doubling_steps(ctx: RingContext, src: np.ndarray, dst: np.ndarray, op: str,
                             scratch: np.ndarray, *, mean: bool):
    """All-reduce by recursive doubling; ``dst`` receives the result (may alias ``src``)."""
    comm, p, r, tag = ctx.comm, ctx.size, ctx.rank, ctx.tag
    if dst is not src:
        np.copyto(dst, src)
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    # Fold: among the first 2*rem ranks, each even rank hands its data to the odd one
    # above it and waits for the final result.
    if r < 2 * rem:
        if r % 2 == 0:
            req = comm.Isend(mpi_buf(dst), r + 1, tag)
            yield [Pending(req, r + 1, "to")]
            req = comm.Irecv(mpi_buf(dst), r + 1, tag)
            yield [Pending(req, r + 1, "from")]
            return dst
        req = comm.Irecv(mpi_buf(scratch), r - 1, tag)
        yield [Pending(req, r - 1, "from")]
        _combine_ordered(dst, scratch, op, mine_is_low=False)
        newrank = r // 2
    else:
        newrank = r - rem
    mask = 1
    while mask < pof2:
        partner_new = newrank ^ mask
        partner = partner_new * 2 + 1 if partner_new < rem else partner_new + rem
        rreq = comm.Irecv(mpi_buf(scratch), partner, tag)
        sreq = comm.Isend(mpi_buf(dst), partner, tag)
        yield [Pending(rreq, partner, "from"), Pending(sreq, partner, "to")]
        _combine_ordered(dst, scratch, op, mine_is_low=newrank < partner_new)
        mask <<= 1
    if mean:
        host.divide_into(dst, p)
    if r < 2 * rem:  # odd rank of a folded pair: return the result
        req = comm.Isend(mpi_buf(dst), r - 1, tag)
        yield [Pending(req, r - 1, "to")]
    return dst


def _nan_guarded(dtype, op: str) -> bool:
    return op in ("max", "min") and np.dtype(dtype).kind == "f"


def native_allreduce_steps(comm: MPI.Intracomm, src: np.ndarray, dst: np.ndarray, op: str,
                           *, mean: bool, blocking: bool):
    """All-reduce with the MPI library's own Allreduce, keeping mpievo's NaN semantics."""
    mpitype, mpiop = NATIVE_TYPES[src.dtype], NATIVE_OPS[op]
    if _nan_guarded(src.dtype, op):
        yield from _native_nan_guarded(comm, src, dst, op, mpitype, mpiop, blocking)
    else:
        send = MPI.IN_PLACE if dst is src else [src, mpitype]
        if blocking:
            comm.Allreduce(send, [dst, mpitype], mpiop)
        else:
            req = comm.Iallreduce(send, [dst, mpitype], mpiop)
            yield [Pending(req, -1, "from")]
    if mean:
        host.divide_into(dst, comm.Get_size())
    return dst


def _native_nan_guarded(comm, src, dst, op, mpitype, mpiop, blocking):
    # Data with NaN replaced by the op's identity, plus a NaN flag per element that the
    # same op combines into "NaN somewhere" (max: flag 1 -> any; min: flag -1 -> any).
    n = src.shape[0]
    packed = np.empty(2 * n, dtype=src.dtype)
    nan = np.isnan(src)
    identity = -np.inf if op == "max" else np.inf
    np.copyto(packed[:n], src)
    packed[:n][nan] = identity
    packed[n:] = nan
    if op == "min":
        np.negative(packed[n:], out=packed[n:])
    if blocking:
        comm.Allreduce(MPI.IN_PLACE, [packed, mpitype], mpiop)
    else:
        req = comm.Iallreduce(MPI.IN_PLACE, [packed, mpitype], mpiop)
        yield [Pending(req, -1, "from")]
    np.copyto(dst, packed[:n])
    dst[packed[n:] != 0] = np.nan


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
