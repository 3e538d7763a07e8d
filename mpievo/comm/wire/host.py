"""Wires: how a region of the user's buffer travels through MPI and is combined.

The collective drivers and the ring algorithms are written once against this small
interface; the wire is the strategy each call is given:

* :class:`HostWire` (here) -- numpy buffers sent as they are;
* ``mpievo.comm.wire.cast`` -- float32 data sent as float16/bfloat16 (compression);
* ``mpievo.comm.wire.device`` -- device buffers, handed to a CUDA-aware MPI
  directly (DeviceWire) or staged through pinned host memory (StagedWire).

A wire instance serves one collective call. Interface (duck-typed):

    wire_dtype                         dtype of the elements on the wire
    encode(region) -> buf              MPI buffer holding region; valid until release(buf)
    release(buf)                       the send of buf completed
    scratch(count) -> buf              receive buffer for data that will be reduced
    reduce(dst, buf, op, left=None)    dst = (left if given else dst) op decode(buf)
    recv_into(dst) -> buf              receive buffer for data stored into dst
    store(dst, buf)                    dst = decode(buf) (no-op when buf is dst)
    divide(dst, n)                     dst /= n (the end of ``mean``)
    copy(dst, src)                     dst = src at full precision (no-op on the same memory)
    workspace(count) -> buf            a buffer of the user's kind for the whole call
    synchronize()                      make pending device work visible to MPI
    finish()                           the call ended (or failed): return what was lent

The ring keeps at most two scratch buffers live at once (double buffering); sends are
posted as soon as their data is ready, so an encoding wire's pool must grow on demand.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host

from ..buffers import copy_host

#: compressed formats (mpievo.comm.wire.cast): float32 data sent in 16 bits
WIRE_FORMATS = ("fp16", "bf16")


def check_format(compression: str) -> str:
    """Raise ValueError unless ``compression`` is "fp16" or "bf16"."""
    if compression not in WIRE_FORMATS:
        raise ValueError(f"expected compression among {WIRE_FORMATS} or None, got {compression!r}")
    return compression


def applies_to(compression: str | None, dtype) -> bool:
    """True when ``compression`` changes how ``dtype`` data travels (fp16/bf16: float32 only).

    Lets a caller with mixed buckets compress the float32 ones and send the rest as is.

    Raises:
        ValueError: unknown format.
    """
    if compression is None:
        return False
    check_format(compression)
    return np.dtype(dtype) == np.float32


class ScratchPool:
    """Reusable host buffers per (dtype, slot), grown on demand and kept between calls.

    Reusing them matters for speed: a fresh large allocation is a fresh mmap whose
    page faults cost more than the reduction itself (why native MPI loses at 64+ MiB).
    """

    def __init__(self):
        self._buffers: dict[tuple[str, int], np.ndarray] = {}

    def get(self, dtype, count: int, slot: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        key = (dtype.str, slot)
        buf = self._buffers.get(key)
        if buf is None or buf.size < count:
            buf = np.empty(max(count, 1), dtype=dtype)
            self._buffers[key] = buf
        return buf[:count]

    def clear(self) -> None:
        self._buffers.clear()


class HostWire:
    """Identity wire for host (numpy) buffers: sends regions as they are.

    Args:
        dtype: the data's dtype.
        pool: receive scratch (slots 0 and 1, used in turn).
        workspace: the pool :meth:`workspace` draws from (slot 0).
    """

    def __init__(self, dtype, pool: ScratchPool, workspace: ScratchPool):
        self.wire_dtype = np.dtype(dtype)
        self._pool = pool
        self._workspace = workspace
        self._slot = 0

    def encode(self, region: np.ndarray) -> np.ndarray:
        return region

    def release(self, buf) -> None:
        pass

    def scratch(self, count: int) -> np.ndarray:
        self._slot ^= 1
        return self._pool.get(self.wire_dtype, count, self._slot)

    def reduce(self, dst: np.ndarray, buf: np.ndarray, op: str, left=None) -> None:
        host.REDUCE_OPS[op](dst if left is None else left, buf, out=dst)

    def recv_into(self, dst: np.ndarray) -> np.ndarray:
        return dst

    def store(self, dst: np.ndarray, buf: np.ndarray) -> None:
        if buf is not dst:
            np.copyto(dst, buf)

    def divide(self, dst: np.ndarray, n: int) -> None:
        host.divide_into(dst, n)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        copy_host(dst, src)

    def workspace(self, count: int) -> np.ndarray:
        return self._workspace.get(self.wire_dtype, count, 0)

    def synchronize(self) -> None:
        pass

    def finish(self) -> None:
        pass
