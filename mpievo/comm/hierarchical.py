"""Collectives over several nodes: shared memory inside each node, rings across nodes.

* all-reduce: the data is cut into ``lanes`` (the size of the smallest node); a
  reduce-scatter inside each node leaves lane t on local rank t, one ring per lane
  all-reduces it across nodes (the ranks of local rank t, one per node, in node
  order), and an all-gather inside each node hands every lane to every rank. Every
  node link carries a lane at a time, not the whole message through one leader.
* all-gather: an all-gather inside each node, a ring among the node leaders (local
  rank 0) over whole nodes' data, and a broadcast inside each node.
* broadcast: a broadcast inside the root's node, a chain among the leaders (the
  root's node's leader first), and a broadcast inside each other node.

Inside a node the shared-window algorithms run (mpievo.comm.shm.collectives); across
nodes the ring algorithms of mpievo.comm.ring on the node-crossing communicators of
mpievo.comm.nodes. Each lane is reduced along one chain and copied, so every rank
gets the same bits. Collective generators, like the rest.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host

from .shm import collectives as shm
from .buffers import copy_host
from .ring import allgather_steps as ring_allgather
from .ring import allreduce_steps as ring_allreduce
from .ring import chain_broadcast_steps, displacements, even_counts


def _cross(ctx, core):
    """The call's ring context (its tag taken on every rank) moved onto this rank's
    node-crossing communicator."""
    cross = core.layout.cross
    return ctx._replace(comm=cross, rank=cross.Get_rank(), size=cross.Get_size())


def allreduce_steps(core, ctx, src: np.ndarray, dst: np.ndarray, op: str, wire):
    """All-reduce of ``src`` into ``dst`` (may be ``src``) over every node; ``ctx`` is the
    call's ring context."""
    layout = core.layout
    me, local = layout.local_rank, layout.local_size
    counts = even_counts(src.size, layout.lanes) + [0] * (local - layout.lanes)
    displs = displacements(counts)
    lane = dst[displs[me]:displs[me] + counts[me]]
    combine = "sum" if op == "mean" else op
    if local > 1:
        core.count(src.nbytes - lane.nbytes)
        arena = yield from core.arena_steps()
        sources = yield from core.shared_sources_steps(src)
        yield from shm.reduce_steps(arena, src, counts, displs, combine, out=lane, sources=sources)
    else:
        copy_host(lane, src)
    if layout.cross is not None and layout.cross.Get_size() > 1:
        ctx = _cross(ctx, core)
        lane_counts = even_counts(lane.size, ctx.size)
        yield from ring_allreduce(ctx, lane, lane, lane_counts, displacements(lane_counts), combine,
                                  wire, mean=False)
    if op == "mean":
        host.divide_into(lane, core.size)
    if local > 1:
        core.count(lane.nbytes)
        arena = yield from core.arena_steps()
        yield from shm.allgather_steps(arena, lane, dst, counts, displs)
    return dst


def _node_span(ranks, counts, displs) -> tuple[int, int] | None:
    """``[start, stop)`` of a node's data in the result, or None when its ranks'
    blocks are not next to each other."""
    ranks = sorted(ranks)
    if ranks != list(range(ranks[0], ranks[-1] + 1)):
        return None
    return displs[ranks[0]], displs[ranks[-1]] + counts[ranks[-1]]


def allgather_steps(core, ctx, src: np.ndarray, dst: np.ndarray, counts, displs, wire):
    """All-gather: rank r's ``src`` (``counts[r]`` elements) to ``dst[displs[r]:]`` everywhere."""
    layout = core.layout
    mine = layout.nodes[layout.node_index]
    if layout.local_size > 1:
        core.count(src.nbytes)
        arena = yield from core.arena_steps()
        yield from shm.allgather_steps(arena, src, dst, [counts[r] for r in mine],
                                       [displs[r] for r in mine])
    else:
        copy_host(dst[displs[core.rank]:displs[core.rank] + counts[core.rank]], src)
    if len(layout.nodes) == 1:
        return dst
    if layout.local_rank == 0:
        yield from _leaders_allgather(core, _cross(ctx, core), dst, counts, displs, wire)
    if layout.local_size > 1:
        arena = yield from core.arena_steps()
        yield from shm.broadcast_steps(arena, dst, 0)
    return dst


def _leaders_allgather(core, ctx, dst, counts, displs, wire):
    """Ring all-gather of whole nodes' data among the leaders (packed where a node's
    blocks are not next to each other in the result)."""
    nodes = core.layout.nodes
    node_counts = [sum(counts[r] for r in ranks) for ranks in nodes]
    spans = [_node_span(ranks, counts, displs) for ranks in nodes]
    packed = None
    if any(span is None for span in spans):
        packed = wire.workspace(sum(node_counts))
        packed_displs = displacements(node_counts)
        _pack(packed, packed_displs[core.layout.node_index], nodes[core.layout.node_index], dst, counts, displs)

        def chunk(j):
            return packed[packed_displs[j]:packed_displs[j] + node_counts[j]]
    else:
        def chunk(j):
            return dst[spans[j][0]:spans[j][1]]
    yield from ring_allgather(ctx, chunk, node_counts, displacements(node_counts), wire)
    if packed is not None:
        for j, ranks in enumerate(nodes):
            if j != core.layout.node_index:
                _unpack(chunk(j), ranks, dst, counts, displs)


def _pack(packed, start, ranks, dst, counts, displs) -> None:
    for r in ranks:
        packed[start:start + counts[r]] = dst[displs[r]:displs[r] + counts[r]]
        start += counts[r]


def _unpack(part, ranks, dst, counts, displs) -> None:
    start = 0
    for r in ranks:
        dst[displs[r]:displs[r] + counts[r]] = part[start:start + counts[r]]
        start += counts[r]


def broadcast_steps(core, ctx, buf: np.ndarray, root: int, wire):
    """Broadcast ``buf`` from ``root`` to every node, in place."""
    layout = core.layout
    root_node = next(j for j, ranks in enumerate(layout.nodes) if root in ranks)
    home = layout.node_index == root_node
    if home and layout.local_size > 1:
        if core.rank == root:
            core.count(buf.nbytes)
        arena = yield from core.arena_steps()
        yield from shm.broadcast_steps(arena, buf, layout.nodes[root_node].index(root))
    if len(layout.nodes) == 1:
        return buf
    if layout.local_rank == 0:
        yield from chain_broadcast_steps(_cross(ctx, core), buf, root_node, wire)
    if not home and layout.local_size > 1:
        if layout.local_rank == 0:
            core.count(buf.nbytes)
        arena = yield from core.arena_steps()
        yield from shm.broadcast_steps(arena, buf, 0)
    return buf
