"""Collectives among the ranks of one node, through their shared window (mpievo.comm.shm.window).

The data is cut into blocks, one per local rank (``counts``/``displs`` in elements;
a block may be empty), and every block into pieces of one window piece. Step k moves
piece k of every block, through slot ``k % 2`` of each rank's window part:

* reduce-scatter / all-reduce: rank q stages piece k of every block but its own;
  the owner of a block reduces its own input with the peers' staged pieces, read in
  place (each byte is read once and the result written once), straight into the
  output (reduce-scatter) or into its own slot for everyone to copy (all-reduce).
  Where every rank's input is in a shared array, nothing is staged: owners read
  their peers' arrays. Where every rank's all-reduce output is in a shared array too
  (fused), the owner writes its reduced piece straight into every rank's output, so
  a rank reads each input byte once and writes each output byte once, like a memcpy;
  block b of any rank's arrays is only ever touched by b's owner, so in place is safe.
* all-gather: each rank stages its own piece; everyone copies every piece out.
* broadcast: the root stages; everyone else copies out.

User buffers are copied into the window piece by piece, so the staging of step k+1
overlaps the peers' reduction of step k, and pieces stay in cache between the copy
and the read. A block is reduced by one rank, in one order (its own input first,
then local rank order), and copied to the others, so every rank gets the same bits.

The functions are collective generators for mpievo.comm.progress (they yield lists
of :class:`Pending` polls, empty when nothing is left to wait for). Before its first write a call waits until every peer is
done with the previous call's data; slots are reused two steps later, after the
counters say the peers are done with them.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host

from ..buffers import same_memory
from .window import CONSUMED, REDUCED, STAGED, Arena


def _steps(counts, piece: int) -> int:
    return max((-(-c // piece) for c in counts), default=0)


def _span(k: int, piece: int, count: int) -> tuple[int, int]:
    """Elements ``[a, z)`` of a block of ``count`` elements moved at step ``k`` (may be empty)."""
    a = min(k * piece, count)
    return a, min(a + piece, count)


def reduce_steps(arena: Arena, src: np.ndarray, counts, displs, op: str, *, out=None,
                 dst=None, offsets=None, divisor: int = 0, sources=None, targets=None):
    """Reduce-scatter (``out`` given) or all-reduce (``dst`` given) over the node.

    Args:
        src: this rank's full 1-D input (may alias ``dst``, or contain ``out``).
        sources: every local rank's ``src`` as this rank sees it, where they are all
            in shared windows (:meth:`mpievo.comm.core.CommCore.shared_sources_steps`):
            peers reduce straight from them, nothing is staged, and a rank returns
            only once its peers have read its input.
        counts, displs: elements and offsets in ``src`` of each local rank's block.
        targets: every local rank's ``dst`` as this rank sees it (writable), where they
            are all in shared windows: owners write their blocks into every rank's
            output, nothing is gathered, and a rank returns once its peers wrote it.
        out: where this rank's reduced block goes (``counts[rank]`` elements).
        dst: where every reduced block goes, block q at ``offsets[q]`` (default
            ``displs``).
        divisor: divide the reduced blocks by it (the end of ``mean``); 0: don't.
    """
    me, size = arena.rank, arena.size
    piece = arena.piece_elems(src.dtype)
    steps = _steps(counts, piece)
    if steps == 0:
        return
    offsets = displs if offsets is None else offsets
    base = arena.base
    slots = arena.slots(src.dtype)
    mine = slots[me]
    yield arena.wait(CONSUMED, base)

    def stage(k):
        if sources is not None:    # the peers read our input where it is
            return
        if k >= 2:  # slot k % 2 held step k-2's pieces: every peer must have reduced them
            yield arena.wait(REDUCED, base + k - 1)
        slot = mine[k & 1]
        for b in range(size):
            a, z = _span(k, piece, counts[b])
            if b != me and z > a:
                np.copyto(slot[b * piece:b * piece + z - a], src[displs[b] + a:displs[b] + z])
        arena.publish(STAGED, base + k + 1)

    def reduce(k):
        yield arena.wait(STAGED, base + k + 1)
        a, z = _span(k, piece, counts[me])
        if dst is None:
            result = out[a:z]
        elif targets is not None:
            result = targets[me][offsets[me] + a:offsets[me] + z]
        else:
            if k >= 2:  # our result of step k-2 is in this slot: every peer must have copied it
                yield arena.wait(CONSUMED, base + k - 1)
            result = mine[k & 1][me * piece:me * piece + z - a]
        if z > a:
            operands = [src[displs[me] + a:displs[me] + z]]
            if sources is None:
                operands += [slots[q][k & 1][me * piece:me * piece + z - a] for q in range(size) if q != me]
            else:
                operands += [sources[q][displs[me] + a:displs[me] + z] for q in range(size) if q != me]
            host.reduce_all(result, operands, op)
            if divisor:
                host.divide_into(result, divisor)
            if targets is not None:   # the piece is in cache: copy it to every peer's output
                for q in range(size):
                    if q != me:
                        np.copyto(targets[q][offsets[me] + a:offsets[me] + z], result)
        arena.publish(REDUCED, base + k + 1)

    def gather(k):
        yield arena.wait(REDUCED, base + k + 1)
        for q in range(size):
            a, z = _span(k, piece, counts[q])
            if z > a:
                np.copyto(dst[offsets[q] + a:offsets[q] + z], slots[q][k & 1][q * piece:q * piece + z - a])
        arena.publish(CONSUMED, base + k + 1)

    if sources is not None:   # our whole input is there already
        arena.publish(STAGED, base + steps)
    yield from stage(0)
    for k in range(steps):
        yield from reduce(k)
        if k + 1 < steps:
            yield from stage(k + 1)
        if dst is not None and targets is None:
            yield from gather(k)
    if sources is not None or targets is not None:
        # the caller may write its input again once every peer read it, and read its
        # output once every peer wrote its blocks there
        yield arena.wait(REDUCED, base + steps)
    arena.finish(steps)


def allgather_steps(arena: Arena, src: np.ndarray, dst: np.ndarray, counts, offsets):
    """All-gather over the node: local rank q's block goes to ``dst[offsets[q]:+counts[q]]``.

    ``src`` is this rank's block; it may be its place in ``dst`` (in place).
    """
    me, size = arena.rank, arena.size
    piece = size * arena.piece_elems(dst.dtype)  # one block per step: the whole slot
    steps = _steps(counts, piece)
    if steps == 0:
        return
    base = arena.base
    slots = arena.slots(dst.dtype)
    own = dst[offsets[me]:offsets[me] + counts[me]]
    in_place = same_memory(own, src)
    yield arena.wait(CONSUMED, base)

    def stage(k):
        if k >= 2:  # every peer must have copied step k-2 out of this slot
            yield arena.wait(CONSUMED, base + k - 1)
        a, z = _span(k, piece, counts[me])
        np.copyto(slots[me][k & 1][:z - a], src[a:z])
        arena.publish(STAGED, base + k + 1)

    def copy_out(k):
        yield arena.wait(STAGED, base + k + 1)
        for q in range(size):
            a, z = _span(k, piece, counts[q])
            if z > a and (q != me or not in_place):
                np.copyto(dst[offsets[q] + a:offsets[q] + z], slots[q][k & 1][:z - a])
        arena.publish(CONSUMED, base + k + 1)

    yield from stage(0)
    for k in range(steps):
        if k + 1 < steps:
            yield from stage(k + 1)
        yield from copy_out(k)
    arena.finish(steps)


def broadcast_steps(arena: Arena, buf: np.ndarray, root: int):
    """Broadcast ``buf`` from local rank ``root`` to the node, in place."""
    me, size = arena.rank, arena.size
    piece = size * arena.piece_elems(buf.dtype)
    steps = _steps([buf.shape[0]], piece)
    if steps == 0:
        return
    base = arena.base
    slot = arena.slots(buf.dtype)[root]
    yield arena.wait(CONSUMED, base)
    for k in range(steps):
        a, z = _span(k, piece, buf.shape[0])
        if me == root:
            if k >= 2:
                yield arena.wait(CONSUMED, base + k - 1)
            np.copyto(slot[k & 1][:z - a], buf[a:z])
            arena.publish(STAGED, base + k + 1)
        else:
            yield arena.wait(STAGED, base + k + 1, peers=(root,))
            np.copyto(buf[a:z], slot[k & 1][:z - a])
            arena.publish(CONSUMED, base + k + 1)
    arena.finish(steps)
