"""Compressed wires: float32 data sent as float16 or bfloat16, combined in float32.

Every segment travels in 16 bits (half the bytes) and is combined in float32 on
arrival. Each partial result is rounded to the wire format once, where the ring
would have to round it anyway to send it on; the owner of a chunk therefore keeps
exactly the bits it sends, and every rank ends with identical results (all of wire
precision). float16 overflows to inf beyond 65504 in magnitude; bfloat16 keeps
float32's range with 8 bits of mantissa. The conversions are the bit-pattern kernels
of :mod:`mpievo.kernels.bitcast`. Use ``Communicator.allreduce(..., compression=)``.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host
from mpievo.kernels.bitcast import decode_bits, encode_bits, round_bits

from ..buffers import copy_host
from ..staging import Slot, StagingPool
from .host import check_format


def _bfloat16() -> np.dtype:
    if host.BFLOAT16 is None:  # pragma: no cover - ml_dtypes is a dependency
        raise ImportError("bfloat16 compression needs ml_dtypes (a dependency of mpievo)")
    return host.BFLOAT16


class CastWire:
    """Wire sending float32 data as a 16-bit float type, combining in float32.

    Args:
        dtype: dtype of the user's data (float32).
        wire_dtype: float16 or bfloat16.
        pool: staging pool kept between calls (default: a fresh one).

    Raises:
        TypeError: data not float32.
    """

    format_name = "cast"

    def __init__(self, dtype, wire_dtype, pool: StagingPool | None = None):
        if np.dtype(dtype) != np.float32:
            raise TypeError(f"expected float32 data for {self.format_name} compression, "
                            f"got {np.dtype(dtype)}")
        self.data_dtype = np.dtype(np.float32)
        self.wire_dtype = np.dtype(wire_dtype)
        self._bf16 = self.wire_dtype != np.float16
        self._pool = pool if pool is not None else StagingPool()
        self._lent: dict[int, tuple[Slot, np.ndarray]] = {}

    # buffers handed to MPI are slot views; remember which slot each one is
    def _lend(self, count: int, dtype=None) -> np.ndarray:
        dtype = self.wire_dtype if dtype is None else np.dtype(dtype)
        slot = self._pool.take(count * dtype.itemsize)
        view = slot.view(dtype, count)
        self._lent[id(view)] = (slot, view)
        return view

    def _give_back(self, buf) -> None:
        entry = self._lent.pop(id(buf), None)
        if entry is not None:
            self._pool.give(entry[0])

    def encode(self, region: np.ndarray) -> np.ndarray:
        buf = self._lend(region.size)
        encode_bits(region.view(np.uint32), buf.view(np.uint16), self._bf16)
        return buf

    def release(self, buf) -> None:
        self._give_back(buf)

    def scratch(self, count: int) -> np.ndarray:
        return self._lend(count)

    def reduce(self, dst: np.ndarray, buf: np.ndarray, op: str, left=None) -> None:
        decoded = self._lend(buf.size, np.float32)
        decode_bits(buf.view(np.uint16), decoded.view(np.uint32), self._bf16)
        self._give_back(buf)
        host.REDUCE_OPS[op](dst if left is None else left, decoded, out=dst)
        self._give_back(decoded)
        # the partial result is rounded once, as sending it on would round it anyway
        round_bits(dst.view(np.uint32), self._bf16)

    def recv_into(self, dst: np.ndarray) -> np.ndarray:
        return self._lend(dst.size)

    def store(self, dst: np.ndarray, buf) -> None:
        if buf is not dst:
            decode_bits(buf.view(np.uint16), dst.view(np.uint32), self._bf16)
            self._give_back(buf)

    def divide(self, dst: np.ndarray, n: int) -> None:
        host.divide_into(dst, n)
        round_bits(dst.view(np.uint32), self._bf16)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        copy_host(dst, src)

    def workspace(self, count: int) -> np.ndarray:
        return self._lend(count, self.data_dtype)

    def synchronize(self) -> None:
        pass

    def finish(self) -> None:
        """Return every slot still lent (after the collective, or after an error)."""
        for slot, _ in self._lent.values():
            self._pool.give(slot)
        self._lent.clear()


class Fp16Wire(CastWire):
    """float32 data on the wire as IEEE float16 (range +-65504)."""

    format_name = "fp16"

    def __init__(self, dtype=np.float32, pool: StagingPool | None = None):
        super().__init__(dtype, np.float16, pool)


class Bf16Wire(CastWire):
    """float32 data on the wire as bfloat16 (float32 range, 8-bit mantissa)."""

    format_name = "bf16"

    def __init__(self, dtype=np.float32, pool: StagingPool | None = None):
        super().__init__(dtype, _bfloat16(), pool)


def compression_wire(compression: str, dtype, pool: StagingPool | None = None) -> CastWire:
    """The wire for ``compression`` ("fp16" or "bf16") of ``dtype`` data.

    Raises:
        ValueError: unknown format. TypeError: data not float32.
    """
    wire_type = {"fp16": Fp16Wire, "bf16": Bf16Wire}[check_format(compression)]
    return wire_type(dtype, pool)
