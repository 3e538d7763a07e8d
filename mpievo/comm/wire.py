"""Wires: how a region of the user's buffer travels through MPI and is combined.

The ring algorithms are written once against this small interface; host buffers
use :class:`HostWire`, device buffers and compressed formats supply their own
(mpievo.comm.device, mpievo.comm.compress). A wire instance serves one collective
call.

Interface (duck-typed):
    wire_dtype                         dtype of the elements on the wire
    encode(region) -> buf              MPI buffer holding region; valid until release(buf)
    release(buf)                       the send of buf completed
    scratch(count) -> buf              receive buffer for data that will be reduced
    reduce(dst, buf, op, left=None)    dst = (left if given else dst) op decode(buf)
    recv_into(dst) -> buf              receive buffer for data stored into dst
    store(dst, buf)                    dst = decode(buf) (no-op when buf is dst)
    divide(dst, n)                     dst /= n (the end of ``mean``)
    synchronize()                      make pending device work visible to MPI

The ring keeps at most two scratch buffers live at once (double buffering); sends are
posted as soon as their data is ready, so an encoding wire's pool must grow on demand.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host


class ScratchPool:
    """Two reusable receive buffers per dtype, grown on demand and kept between calls.

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
    """Identity wire for host (numpy) buffers: sends regions as they are."""

    def __init__(self, dtype, pool: ScratchPool):
        self.wire_dtype = np.dtype(dtype)
        self._pool = pool
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

    def synchronize(self) -> None:
        pass
