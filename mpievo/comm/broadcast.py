"""Broadcast driver: checks a call, picks its wire and algorithm, runs the steps.

Host buffers take the pipelined chain, the MPI library's own, the node's shared
window or the hierarchical algorithm (by the table); device buffers take the chain
through a device wire.
"""

from __future__ import annotations

from .device import buffers as devicebuf
from . import hierarchical
from .buffers import check_dtype, check_root, flat_host
from .native import native_bcast_steps
from .ring import chain_broadcast_steps
from .shm.collectives import broadcast_steps as shm_broadcast_steps


def run(core, buf, root: int, algorithm, timeout, blocking: bool):
    """Broadcast in place (see ``Communicator.broadcast``); non-blocking returns a request."""
    core.check_usable()
    root = check_root(root, core.size)
    if devicebuf.is_device_array(buf):
        target = devicebuf.adapt(buf, "buf")
        devicebuf.check_algorithm("broadcast", algorithm, ("chain",))
        dtype, flat, wire, algorithm = target.dtype, target.flat, core.device_wire(target.dtype), "chain"
    else:
        flat = flat_host(buf, "buf", writable=core.rank != root)
        check_dtype(flat.dtype, None)
        dtype, wire = flat.dtype, core.host_wire(flat.dtype)
        algorithm = core.select("broadcast", algorithm, flat.nbytes, blocking=blocking)
    steps = _steps(core, flat, dtype, root, algorithm, wire, blocking)
    return core.execute("broadcast", steps, timeout, blocking, buf)


def _steps(core, flat, dtype, root, algorithm, wire, blocking):
    try:
        yield from core.signature_steps("broadcast", flat.size, dtype, None, root, None)
        if core.size == 1:
            return flat
        ctx = core.context(wire.wire_dtype.itemsize, copy_only=True)
        if algorithm == "native":
            if core.rank == root:
                core.count(flat.nbytes)
            yield from native_bcast_steps(core.comm, flat, root, blocking=blocking)
        elif algorithm == "shm":
            if core.rank == root:
                core.count(flat.nbytes)
            arena = yield from core.arena_steps()
            yield from shm_broadcast_steps(arena, flat, root)
        elif algorithm == "hierarchical":
            yield from hierarchical.broadcast_steps(core, ctx, flat, root, wire)
        else:
            yield from chain_broadcast_steps(ctx, flat, root, wire)
        return flat
    finally:
        wire.finish()
