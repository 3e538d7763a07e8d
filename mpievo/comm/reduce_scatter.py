"""Reduce-scatter driver: checks a call, picks its wire and algorithm, runs the steps.

Host buffers take the ring, the MPI library's own or the node's shared window (by
the table); device buffers take the ring through a device wire.
"""

from __future__ import annotations

import numpy as np

from .device import buffers as devicebuf
from .buffers import check_counts, check_dtype, check_same, flat_host
from .native import native_reduce_scatter_steps, native_reduce_scatter_supports
from .ring import displacements, even_counts, reduce_scatter_steps
from .shm.collectives import reduce_steps


def scatter_counts(total: int, counts, size: int) -> list[int]:
    """Per-rank block sizes of a reduce-scatter of ``total`` elements (default: even).

    Raises:
        ValueError: not one non-negative count per rank, or not summing to ``total``.
    """
    counts = even_counts(total, size) if counts is None else check_counts(counts, size)
    if sum(counts) != total:
        raise ValueError(f"expected counts summing to sendbuf's {total} elements, "
                         f"got {counts} (sum {sum(counts)})")
    return counts


def resolve(core, nbytes: int, dtype, op: str, algorithm, blocking: bool) -> str:
    """The host algorithm a call runs: forced or the table's, then the ring where the
    MPI library cannot give mpievo's result."""
    algorithm = core.select("reduce_scatter", algorithm, nbytes, blocking=blocking)
    if algorithm == "native" and not native_reduce_scatter_supports(dtype, op):
        algorithm = "ring"
    return algorithm


def run(core, sendbuf, recvbuf, op: str, counts, algorithm, timeout, blocking: bool):
    """Reduce-scatter (see ``Communicator.reduce_scatter``); non-blocking returns a request."""
    core.check_usable()
    if devicebuf.is_device_array(sendbuf):
        src = devicebuf.adapt(sendbuf, "sendbuf")
        check_dtype(src.dtype, op)
        devicebuf.check_algorithm("reduce_scatter", algorithm, ("ring",))
        counts = scatter_counts(src.size, counts, core.size)
        mine = counts[core.rank]
        result, dst = devicebuf.output(recvbuf, None, src, mine, (mine,))
        dtype, src, wire, algorithm = src.dtype, src.flat, core.device_wire(src.dtype), "ring"
    else:
        src = flat_host(sendbuf, "sendbuf")
        check_dtype(src.dtype, op)
        counts = scatter_counts(src.size, counts, core.size)
        mine = counts[core.rank]
        result = np.empty(mine, dtype=src.dtype) if recvbuf is None else recvbuf
        dst = flat_host(result, "recvbuf", writable=True)
        check_same("recvbuf", dst, mine, src.dtype)
        dtype, wire = src.dtype, core.host_wire(src.dtype)
        algorithm = resolve(core, src.nbytes, dtype, op, algorithm, blocking)
    steps = _steps(core, src, dst, dtype, op, counts, algorithm, wire, blocking)
    return core.execute("reduce_scatter", steps, timeout, blocking, result)


def _steps(core, src, dst, dtype, op, counts, algorithm, wire, blocking):
    try:
        yield from core.signature_steps("reduce_scatter", src.size, dtype, op, 0, counts)
        if core.size == 1:
            wire.copy(dst, src)
            return dst
        mean = op == "mean"
        ctx = core.context(wire.wire_dtype.itemsize)
        if algorithm == "native":
            core.count(src.nbytes - dst.nbytes)
            yield from native_reduce_scatter_steps(core.comm, src, dst, counts, op,
                                                   mean=mean, blocking=blocking)
            return dst
        displs = displacements(counts)
        if algorithm == "shm":
            core.count(src.nbytes - dst.nbytes)
            arena = yield from core.arena_steps()
            sources = yield from core.shared_sources_steps(src)
            yield from reduce_steps(arena, src, counts, displs, op, out=dst,
                                    divisor=core.size if mean else 0, sources=sources)
            return dst
        work = wire.workspace(src.size)

        def chunk(c):
            return dst if c == core.rank else work[displs[c]:displs[c] + counts[c]]

        yield from reduce_scatter_steps(ctx, src, chunk, counts, displs, op, wire, mean=mean)
        return dst
    finally:
        wire.finish()
