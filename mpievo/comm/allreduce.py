"""All-reduce driver: checks a call, picks its wire and algorithm, runs the steps.

Wires: host buffers go as they are (ring, recursive doubling, the MPI library's own,
the node's shared window or hierarchical, by the table), float32 host data with
``compression`` goes fp16/bf16 (ring), device buffers go through a device wire (ring).
"""

from __future__ import annotations

from mpievo.kernels import host

from .device import buffers as devicebuf
from . import hierarchical
from .buffers import check_dtype, flat_host, host_output
from .latency import recursive_doubling_steps
from .native import native_allreduce_steps, native_supports
from .ring import allreduce_steps, displacements, even_counts
from .selection import variant_of
from .shm.collectives import reduce_steps
from .wire.host import applies_to, check_format


def resolve(core, nbytes: int, dtype, op: str, algorithm, blocking: bool) -> str:
    """The host algorithm a call runs: forced or the table's (by size, op and layout),
    then recursive doubling where the MPI library cannot give mpievo's result."""
    variant = variant_of("allreduce", host.is_floating(dtype), op)
    algorithm = core.select("allreduce", algorithm, nbytes, variant=variant, blocking=blocking)
    if algorithm == "native" and not native_supports(dtype, op):
        algorithm = "recursive_doubling"
    return algorithm


def run(core, sendbuf, recvbuf, op: str, algorithm, timeout, compression, blocking: bool):
    """All-reduce (see ``Communicator.allreduce``); non-blocking returns a request."""
    on_device = devicebuf.is_device_array(sendbuf)
    if compression is not None:
        if on_device:
            raise ValueError(f"expected compression=None for device buffers, got {compression!r} "
                             "(compressed wires are host-only)")
        check_format(compression)
    core.check_usable()
    if on_device:
        src = devicebuf.adapt(sendbuf, "sendbuf")
        check_dtype(src.dtype, op)
        devicebuf.check_algorithm("allreduce", algorithm, ("ring",))
        shape = tuple(getattr(sendbuf, "shape", (src.size,)))
        result, dst = devicebuf.output(recvbuf, sendbuf, src, src.size, shape)
        dtype, src, wire, algorithm = src.dtype, src.flat, core.device_wire(src.dtype), "ring"
    else:
        src = flat_host(sendbuf, "sendbuf")
        check_dtype(src.dtype, op)
        result, dst = host_output(sendbuf, recvbuf, src)
        dtype = src.dtype
        if applies_to(compression, dtype):
            wire, algorithm = core.cast_wire(compression, dtype), "ring"
        else:
            wire = core.host_wire(dtype)
            algorithm = resolve(core, src.nbytes, dtype, op, algorithm, blocking)
    steps = _steps(core, src, dst, dtype, op, algorithm, wire, blocking)
    return core.execute("allreduce", steps, timeout, blocking, result)


def _steps(core, src, dst, dtype, op, algorithm, wire, blocking):
    try:
        yield from core.signature_steps("allreduce", src.size, dtype, op, 0, None)
        if core.size == 1:
            wire.copy(dst, src)
            return dst
        mean = op == "mean"
        ctx = core.context(wire.wire_dtype.itemsize)
        if algorithm == "native":
            core.count(2 * src.nbytes * (core.size - 1) // core.size)
            yield from native_allreduce_steps(core.comm, src, dst, op, mean=mean, blocking=blocking)
        elif algorithm == "shm":
            counts = even_counts(src.size, core.size)
            core.count(2 * src.nbytes * (core.size - 1) // core.size)
            arena = yield from core.arena_steps()
            sources, targets = yield from core.shared_views_steps([(src, False), (dst, True)])
            yield from reduce_steps(arena, src, counts, displacements(counts), op, dst=dst,
                                    divisor=core.size if mean else 0, sources=sources,
                                    targets=targets)
        elif algorithm == "hierarchical":
            yield from hierarchical.allreduce_steps(core, ctx, src, dst, op, wire)
        elif algorithm == "recursive_doubling":
            scratch = core.pool.get(src.dtype, src.size, 2)
            core.count(src.nbytes * max(1, (core.size - 1).bit_length()))
            yield from recursive_doubling_steps(ctx, src, dst, op, scratch, mean=mean)
        else:
            counts = even_counts(src.size, core.size)
            yield from allreduce_steps(ctx, src, dst, counts, displacements(counts), op, wire, mean=mean)
        return dst
    finally:
        wire.finish()
