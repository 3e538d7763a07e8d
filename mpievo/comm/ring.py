"""Segmented, pipelined ring algorithms (bandwidth-optimal for large messages).

Every rank talks only to its ring neighbours. A chunk is cut into segments; a
received segment is combined (or stored) as soon as it arrives and forwarded at
once, while the next segment's receive is already posted (double buffering), so
the reduction of one segment overlaps the transfer of the next and the scratch
stays in cache. Sends are posted as soon as their data is ready and reaped at the
end, so no rank ever blocks on a send (no rendezvous deadlock).

Chunk ownership: after reduce-scatter rank r holds the reduced chunk r. In the
reduce-scatter, at step s rank r receives chunk (r-2-s) mod P from its left
neighbour and sends chunk (r-1-s) mod P to its right one; in the all-gather, at
step s it receives chunk (r-1-s) mod P and sends chunk (r-s) mod P. Each chunk is
reduced along one chain and then copied, so all ranks get identical bits.

The functions are generators for mpievo.comm.progress: they yield lists of
Pending requests to wait for.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from mpi4py import MPI

from .progress import Pending


class RingContext(NamedTuple):
    """What a ring step needs to know about the communicator and the call."""

    comm: MPI.Intracomm  # the private duplicate
    rank: int
    size: int
    tag: int
    seg_elems: int  # elements per pipeline segment (>= 1)
    on_send: Callable[[int], None]  # told the byte count of every message sent


def even_counts(n: int, parts: int) -> list[int]:
    """Split ``n`` elements over ``parts`` ranks like numpy.array_split (first ones larger)."""
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def displacements(counts) -> list[int]:
    displs, total = [], 0
    for c in counts:
        displs.append(total)
        total += c
    return displs


def segments(count: int, seg: int) -> list[tuple[int, int]]:
    """Half-open ``(start, stop)`` pieces of ``range(count)``, each at most ``seg`` long."""
    return [(a, min(a + seg, count)) for a in range(0, count, seg)]


def mpi_buf(buf):
    """mpi4py buffer spec sending ``buf``'s bytes (works for any dtype, host or device)."""
    return [buf, MPI.BYTE]


class _Sends:
    """Posted sends, kept with their wire buffers until completion."""

    def __init__(self, ctx: RingContext, wire):
        self.ctx = ctx
        self.wire = wire
        self.posted: list[tuple[MPI.Request, object, int]] = []

    def post(self, region, dest: int) -> None:
        buf = self.wire.encode(region)
        req = self.ctx.comm.Isend(mpi_buf(buf), dest, self.ctx.tag)
        self.ctx.on_send(buf.nbytes)
        self.posted.append((req, buf, dest))

    def pending(self) -> list[Pending]:
        return [Pending(req, dest, "to") for req, _, dest in self.posted]

    def release_all(self) -> None:
        for _, buf, _ in self.posted:
            self.wire.release(buf)
        self.posted.clear()


class _Receives:
    """Receives posted in schedule order, at most two outstanding (double buffering).

    ``schedule`` is a list of items; ``target(item) -> buf`` allocates the receive
    buffer for an item when it is posted.
    """

    def __init__(self, ctx: RingContext, source: int, schedule: list, target: Callable):
        self.ctx, self.source, self.schedule, self.target = ctx, source, schedule, target
        self.posted: dict[int, tuple[MPI.Request, object]] = {}
        self.next_to_post = 0

    def fill(self) -> None:
        while self.next_to_post < len(self.schedule) and len(self.posted) < 2:
            j = self.next_to_post
            buf = self.target(self.schedule[j])
            req = self.ctx.comm.Irecv(mpi_buf(buf), self.source, self.ctx.tag)
            self.posted[j] = (req, buf)
            self.next_to_post += 1

    def wait_item(self, j: int):
        """Yield until receive ``j`` completed; return its buffer."""
        self.fill()
        req, buf = self.posted[j]
        yield [Pending(req, self.source, "from")]
        del self.posted[j]
        return buf


def reduce_scatter_steps(ctx: RingContext, src, acc: Callable, counts, displs, op: str,
                         wire, *, mean: bool = False, continue_allgather: bool = False):
    """Ring reduce-scatter: afterwards ``acc(rank)`` holds the reduced chunk ``rank``.

    Args:
        src: the full 1-D input (left operand of every reduction; may alias acc).
        acc: ``acc(c)`` -> 1-D view where the reduced chunk ``c`` is written.
        counts, displs: chunk sizes and offsets (elements).
        op: reduction op name.
        wire: the Wire moving data.
        mean: divide the final chunk by the number of ranks.
        continue_allgather: also send each finished segment to the right as the
            first all-gather step (pipelines the two phases of all-reduce).

    Returns (via StopIteration) the sends still outstanding that belong to the
    all-gather (to be awaited by the caller), after awaiting its own.
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    rs_sends, ag_sends = _Sends(ctx, wire), _Sends(ctx, wire)
    first = (r - 1) % p
    lo = displs[first]
    wire.synchronize()
    for a, b in segments(counts[first], ctx.seg_elems):
        rs_sends.post(src[lo + a:lo + b], right)
    schedule = [(s, (r - 2 - s) % p, a, b)
                for s in range(p - 1)
                for a, b in segments(counts[(r - 2 - s) % p], ctx.seg_elems)]
    recvs = _Receives(ctx, left, schedule, lambda item: wire.scratch(item[3] - item[2]))
    for j, (s, c, a, b) in enumerate(schedule):
        buf = yield from recvs.wait_item(j)
        dst = acc(c)[a:b]
        wire.reduce(dst, buf, op, left=src[displs[c] + a:displs[c] + b])
        if s < p - 2:
            wire.synchronize()
            rs_sends.post(dst, right)
        else:
            if mean:
                wire.divide(dst, p)
            if continue_allgather:
                wire.synchronize()
                ag_sends.post(dst, right)
        recvs.fill()
    yield rs_sends.pending()
    rs_sends.release_all()
    return ag_sends


def allgather_steps(ctx: RingContext, out: Callable, counts, displs, wire, *,
                    first_src=None, sends=None):
    """Ring all-gather: afterwards ``out(c)`` holds chunk ``c`` for every c.

    Args:
        out: ``out(c)`` -> 1-D view of chunk ``c`` in the result.
        first_src: where this rank's own chunk is read for the first send
            (default ``out(rank)``); lets out-of-place calls send before copying.
        sends: a _Sends whose first step was already posted (from
            reduce_scatter_steps with continue_allgather), or None.
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    if sends is None:
        sends = _Sends(ctx, wire)
        own = out(r) if first_src is None else first_src
        wire.synchronize()
        for a, b in segments(counts[r], ctx.seg_elems):
            sends.post(own[a:b], right)
    schedule = [(s, (r - 1 - s) % p, a, b)
                for s in range(p - 1)
                for a, b in segments(counts[(r - 1 - s) % p], ctx.seg_elems)]
    recvs = _Receives(ctx, left, schedule, lambda item: wire.recv_into(out(item[1])[item[2]:item[3]]))
    recvs.fill()
    for j, (s, c, a, b) in enumerate(schedule):
        buf = yield from recvs.wait_item(j)
        dst = out(c)[a:b]
        wire.store(dst, buf)
        if s < p - 2:
            wire.synchronize()
            sends.post(dst, right)
        recvs.fill()
    yield sends.pending()
    sends.release_all()


def allreduce_steps(ctx: RingContext, src, dst, counts, displs, op: str, wire, *, mean: bool):
    """Ring all-reduce = reduce-scatter + all-gather, pipelined across the two phases.

    ``src`` and ``dst`` are full 1-D arrays (the same array when in place).
    """
    chunk = lambda c: dst[displs[c]:displs[c] + counts[c]]  # noqa: E731
    ag_sends = yield from reduce_scatter_steps(
        ctx, src, chunk, counts, displs, op, wire, mean=mean, continue_allgather=True)
    yield from allgather_steps(ctx, chunk, counts, displs, wire, sends=ag_sends)


def chain_broadcast_steps(ctx: RingContext, buf, root: int, wire):
    """Pipelined chain broadcast root -> root+1 -> ... (bandwidth-optimal for large data)."""
    p, r = ctx.size, ctx.rank
    pos = (r - root) % p
    nxt = (r + 1) % p if pos < p - 1 else None
    sends = _Sends(ctx, wire)
    pieces = segments(buf.shape[0], ctx.seg_elems)
    if pos == 0:
        wire.synchronize()
        for a, b in pieces:
            sends.post(buf[a:b], nxt)
    else:
        recvs = _Receives(ctx, (r - 1) % p, pieces, lambda ab: wire.recv_into(buf[ab[0]:ab[1]]))
        recvs.fill()
        for j, (a, b) in enumerate(pieces):
            got = yield from recvs.wait_item(j)
            wire.store(buf[a:b], got)
            if nxt is not None:
                wire.synchronize()
                sends.post(buf[a:b], nxt)
            recvs.fill()
    yield sends.pending()
    sends.release_all()
