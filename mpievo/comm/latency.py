"""Recursive doubling all-reduce: the latency algorithm for small messages.

It takes log2(P) rounds of whole-buffer exchanges (plus a fold for non-powers of
two). Both partners of a round combine the same two values in the same order (lower
rank's value on the left), so every rank ends with the same bits.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host

from .progress import Pending
from .ring import RingContext, mpi_buf


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
