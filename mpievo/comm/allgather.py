"""All-gather driver (uneven counts too): checks a call, picks its wire and algorithm,
runs the steps.

Host buffers take the ring, the MPI library's own, the node's shared window or the
hierarchical algorithm (by the table); device buffers take the ring through a
device wire. Without ``counts`` they are learned from every
rank with one small exchange.
"""

from __future__ import annotations

import numpy as np

from .device import buffers as devicebuf
from . import hierarchical
from .buffers import check_counts, check_dtype, check_same, flat_host, same_memory
from .native import native_allgatherv_steps
from .objects import allgather_object
from .ring import allgather_steps, displacements
from .shm.collectives import allgather_steps as shm_allgather_steps


def gather_counts(core, own: int, counts) -> list[int]:
    """Per-rank block sizes of an all-gather where this rank sends ``own`` elements.

    Raises:
        ValueError: not one non-negative count per rank, or ``counts[rank] != own``.
    """
    if counts is None:
        counts = allgather_object(core, own) if core.size > 1 else [own]
    counts = check_counts(counts, core.size)
    if counts[core.rank] != own:
        raise ValueError(f"expected sendbuf with counts[{core.rank}] = {counts[core.rank]} "
                         f"elements, got {own}")
    return counts


def run(core, sendbuf, recvbuf, counts, algorithm, timeout, blocking: bool):
    """All-gather (see ``Communicator.allgather``); non-blocking returns a request."""
    core.check_usable()
    if devicebuf.is_device_array(sendbuf):
        src = devicebuf.adapt(sendbuf, "sendbuf")
        devicebuf.check_algorithm("allgather", algorithm, ("ring",))
        counts = gather_counts(core, src.size, counts)
        total = sum(counts)
        result, dst = devicebuf.output(recvbuf, None, src, total, (total,))
        dtype, src, wire, algorithm = src.dtype, src.flat, core.device_wire(src.dtype), "ring"
    else:
        src = flat_host(sendbuf, "sendbuf")
        check_dtype(src.dtype, None)
        counts = gather_counts(core, src.size, counts)
        result = np.empty(sum(counts), dtype=src.dtype) if recvbuf is None else recvbuf
        dst = flat_host(result, "recvbuf", writable=True)
        check_same("recvbuf", dst, sum(counts), src.dtype)
        dtype, wire = src.dtype, core.host_wire(src.dtype)
        algorithm = core.select("allgather", algorithm, dst.nbytes, blocking=blocking)
    steps = _steps(core, src, dst, dtype, counts, algorithm, wire, blocking)
    return core.execute("allgather", steps, timeout, blocking, result)


def _steps(core, src, dst, dtype, counts, algorithm, wire, blocking):
    try:
        yield from core.signature_steps("allgather", src.size, dtype, None, 0, counts)
        displs = displacements(counts)
        own = dst[displs[core.rank]:displs[core.rank] + counts[core.rank]]
        if core.size == 1:
            wire.copy(own, src)
            return dst
        ctx = core.context(wire.wire_dtype.itemsize, copy_only=True)
        if algorithm == "native":
            core.count(src.nbytes * (core.size - 1))
            yield from native_allgatherv_steps(core.comm, None if same_memory(own, src) else src, dst,
                                               counts, displs, blocking=blocking)
            return dst
        if algorithm == "shm":
            core.count(src.nbytes * (core.size - 1))
            arena = yield from core.arena_steps()
            yield from shm_allgather_steps(arena, src, dst, counts, displs)
            return dst
        if algorithm == "hierarchical":
            yield from hierarchical.allgather_steps(core, ctx, src, dst, counts, displs, wire)
            return dst

        def chunk(c):
            return dst[displs[c]:displs[c] + counts[c]]

        steps = allgather_steps(ctx, chunk, counts, displs, wire, first_src=src)
        pending = next(steps)  # the first sends and receives are posted: copy our own block meanwhile
        wire.copy(own, src)
        while True:
            yield pending
            try:
                pending = steps.send(None)
            except StopIteration:
                return dst
    finally:
        wire.finish()
