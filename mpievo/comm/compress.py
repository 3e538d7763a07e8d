"""Compressed all-reduce: fp16/bf16 wire formats and top-k sparsification.

Cast wires (:class:`Fp16Wire`, :class:`Bf16Wire`) plug into the ring algorithms
(mpievo.comm.ring) for float32 data: every segment travels as float16 or bfloat16
(half the bytes) and is combined in float32 on arrival. Each partial result is
rounded to the wire format once, where the ring would have to round it anyway to
send it on; the owner of a chunk therefore keeps exactly the bits it sends, and
every rank ends with identical results (all of wire precision). float16 overflows to
inf beyond 65504 in magnitude; bfloat16 keeps float32's range with 8 bits of
mantissa. Conversions run in small Numba loops on the bit patterns (same bits as
numpy's and ml_dtypes' casts, several times faster than numpy's float16 cast). Use
:func:`allreduce` (or ``Communicator.allreduce(..., compression=)`` once the
communicator delegates to it).

Top-k sparsification (:func:`topk_allreduce`) sends only the k largest-magnitude
entries of each rank and keeps the rest in an :class:`ErrorFeedback` residual that
is added back before the next selection, so nothing is lost, only delayed. Sparse
contributions do not add up segment by segment inside a ring (each rank's k indices
differ, and the union grows at every hop), so the exchange is an all-gather of
(index, value) pairs followed by a local scatter-add in rank order (identical bits
on every rank). Cost per rank: it receives (P - 1) * k pairs of (4- or 8-byte index
+ value), against about 2 * n * itemsize for a ring all-reduce of the dense array:
with int32 indices and float32 values top-k moves fewer bytes when k < n / P, i.e.
ratio below 1/P; the local selection is an O(n) argpartition.
"""

from __future__ import annotations

import math
from typing import Callable, Hashable

import numba
import numpy as np

from mpievo.kernels import host

WIRE_FORMATS = ("fp16", "bf16")
#: staging slots are allocated in multiples of this many bytes, so segments of
#: slightly different sizes reuse the same slots
SLOT_GRANULE = 64 << 10


# ------------------------------------------------------------------ staging
class Slot:
    """One reusable staging buffer: raw bytes, and the event of the last device copy
    that reads or writes it (None when no copy is pending)."""

    __slots__ = ("raw", "event")

    def __init__(self, raw):
        self.raw = raw
        self.event = None

    @property
    def capacity(self) -> int:
        return int(self.raw.nbytes)

    def view(self, dtype, count: int):
        """The first ``count`` elements of the slot as ``dtype``."""
        dtype = np.dtype(dtype)
        return self.raw[:count * dtype.itemsize].view(dtype)


class StagingPool:
    """Reusable staging slots, handed out whole (``take``) and given back (``give``).

    Kept between collective calls (by the communicator) so that large buffers are
    allocated once: a fresh allocation costs page faults on the host, and pinned
    (page-locked) allocations are slow on a GPU host.

    Args:
        allocate: ``allocate(nbytes) -> uint8 array`` (default numpy.empty; the
            device module passes numba.cuda.pinned_array).
    """

    def __init__(self, allocate: Callable[[int], np.ndarray] | None = None):
        self._allocate = allocate or (lambda nbytes: np.empty(nbytes, dtype=np.uint8))
        self._free: list[Slot] = []
        self.allocated = 0  # number of slots ever allocated (for tests and reports)

    def take(self, nbytes: int) -> Slot:
        """A slot of at least ``nbytes`` (best fit among free ones, else a new one).

        A slot whose last device copy may still run is waited for first.
        """
        fitting = [s for s in self._free if s.capacity >= nbytes]
        if fitting:
            slot = min(fitting, key=lambda s: s.capacity)
            self._free.remove(slot)
        else:
            capacity = max(SLOT_GRANULE, -(-nbytes // SLOT_GRANULE) * SLOT_GRANULE)
            slot = Slot(self._allocate(capacity))
            self.allocated += 1
        if slot.event is not None:
            slot.event.synchronize()
            slot.event = None
        return slot

    def give(self, slot: Slot, event=None) -> None:
        """Return ``slot``; ``event`` (or the slot's own) marks a device copy still using it."""
        if event is not None:
            slot.event = event
        self._free.append(slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def clear(self) -> None:
        self._free.clear()


# ------------------------------------------------- conversion kernels (host)
# numpy converts float32 <-> float16 one element at a time (about 4x slower than a
# copy); these integer-only loops on the bit patterns vectorise and give the same
# bits as numpy's float16 and ml_dtypes' bfloat16 casts (round to nearest even;
# NaN stays NaN, its payload may differ).
_U = np.uint32


@numba.njit(inline="always")
def _f32_to_f16(u):
    sign = (u >> _U(16)) & _U(0x8000)
    a = u & _U(0x7FFFFFFF)
    normal = (a - _U(0x38000000) + _U(0xFFF) + ((a >> _U(13)) & _U(1))) >> _U(13)
    # subnormal half: shift the full significand down, then round the dropped bits
    e = a >> _U(23)
    m = (a & _U(0x7FFFFF)) | _U(0x800000)
    shift = min(max(_U(126) - e, _U(1)) if e <= _U(125) else _U(1), _U(31))
    sub = m >> shift
    rem = m & ((_U(1) << shift) - _U(1))
    halfway = _U(1) << (shift - _U(1))
    sub = sub + _U((rem > halfway) | ((rem == halfway) & ((sub & _U(1)) == _U(1))))
    h = normal
    h = sub if a < _U(0x38800000) else h
    h = _U(0) if a < _U(0x33000000) else h
    h = _U(0x7C00) if a >= _U(0x477FF000) else h  # rounds past 65504: infinity
    h = (_U(0x7E00) | ((a >> _U(13)) & _U(0x3FF))) if a > _U(0x7F800000) else h
    return h | sign


@numba.njit(inline="always")
def _f16_to_f32(h):
    h = _U(h)
    sign = (h & _U(0x8000)) << _U(16)
    e = (h >> _U(10)) & _U(0x1F)
    m = h & _U(0x3FF)
    normal = ((e + _U(112)) << _U(23)) | (m << _U(13))
    special = _U(0x7F800000) | (m << _U(13))
    # subnormal half: normalise by the position of the significand's top bit
    top = (_U(m >= _U(2)) + _U(m >= _U(4)) + _U(m >= _U(8)) + _U(m >= _U(16)) + _U(m >= _U(32))
           + _U(m >= _U(64)) + _U(m >= _U(128)) + _U(m >= _U(256)) + _U(m >= _U(512)))
    sub = ((top + _U(103)) << _U(23)) | ((m << (_U(23) - top)) & _U(0x7FFFFF))
    sub = _U(0) if m == _U(0) else sub
    bits = normal
    bits = sub if e == _U(0) else bits
    bits = special if e == _U(31) else bits
    return bits | sign


@numba.njit(inline="always")
def _f32_to_bf16(u):
    nan = (u & _U(0x7FFFFFFF)) > _U(0x7F800000)
    rounded = (u + _U(0x7FFF) + ((u >> _U(16)) & _U(1))) >> _U(16)
    return ((u >> _U(16)) | _U(0x40)) if nan else rounded


@numba.njit(inline="always")
def _bf16_to_f32(h):
    return _U(h) << _U(16)


@numba.njit(cache=True, nogil=True)
def encode_bits(src, out, bf16):
    """float32 bits ``src`` (uint32) -> wire bits ``out`` (uint16): bfloat16 or float16."""
    if bf16:
        for i in range(src.size):
            out[i] = np.uint16(_f32_to_bf16(src[i]))
    else:
        for i in range(src.size):
            out[i] = np.uint16(_f32_to_f16(src[i]))


@numba.njit(cache=True, nogil=True)
def decode_bits(src, out, bf16):
    """Wire bits ``src`` (uint16) -> float32 bits ``out`` (uint32), exactly."""
    if bf16:
        for i in range(src.size):
            out[i] = _bf16_to_f32(src[i])
    else:
        for i in range(src.size):
            out[i] = _f16_to_f32(src[i])


@numba.njit(cache=True, nogil=True)
def round_bits(bits, bf16):
    """Round float32 bits (uint32, in place) to the nearest value of the wire format."""
    if bf16:
        for i in range(bits.size):
            bits[i] = _bf16_to_f32(_f32_to_bf16(bits[i]))
    else:
        for i in range(bits.size):
            bits[i] = _f16_to_f32(_f32_to_f16(bits[i]))


# --------------------------------------------------------------- cast wires
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


def applies_to(compression: str | None, dtype) -> bool:
    """True when ``compression`` changes how ``dtype`` data travels (fp16/bf16: float32 only).

    Lets a caller with mixed buckets compress the float32 ones and send the rest as is.

    Raises:
        ValueError: unknown format.
    """
    if compression is None:
        return False
    if compression not in WIRE_FORMATS:
        raise ValueError(f"expected compression among {WIRE_FORMATS} or None, got {compression!r}")
    return np.dtype(dtype) == np.float32


def compression_wire(compression: str, dtype, pool: StagingPool | None = None) -> CastWire:
    """The wire for ``compression`` ("fp16" or "bf16") of ``dtype`` data.

    Raises:
        ValueError: unknown format. TypeError: data not float32.
    """
    if compression == "fp16":
        return Fp16Wire(dtype, pool)
    if compression == "bf16":
        return Bf16Wire(dtype, pool)
    raise ValueError(f"expected compression among {WIRE_FORMATS}, got {compression!r}")


# ------------------------------------------- compressed ring all-reduce
def allreduce(comm, sendbuf, recvbuf=None, op: str = "sum", *, compression: str = "fp16",
              timeout: float | None = None, blocking: bool = True, pool: StagingPool | None = None):
    """Ring all-reduce of float32 host data with a compressed wire format.

    Args:
        comm: an mpievo.comm.Communicator.
        sendbuf: C-contiguous float32 numpy array.
        recvbuf: result (same size), ``sendbuf`` for in place, or None to allocate.
        op: "sum", "prod", "max", "min" or "mean".
        compression: "fp16" or "bf16".
        timeout: seconds (default: the communicator's).
        blocking: False returns a request whose ``wait()`` returns the result.
        pool: staging pool to reuse between calls.

    Returns:
        The result array (values of wire precision, identical on every rank).

    Raises:
        TypeError: not a float32 numpy array. ValueError: bad op, format or sizes.
    """
    from .buffers import check_same, flat_host, is_device_array

    if is_device_array(sendbuf):
        raise TypeError(f"expected a host (numpy) array for compression={compression!r}, "
                        "got a device array")
    comm._check_usable()
    src = flat_host(sendbuf, "sendbuf")
    host.check_reducible(src.dtype, op)
    wire = compression_wire(compression, src.dtype, pool)
    if recvbuf is None:
        result = np.empty_like(sendbuf)
        dst = result.reshape(-1)
    elif recvbuf is sendbuf:
        result, dst = sendbuf, src
    else:
        result, dst = recvbuf, flat_host(recvbuf, "recvbuf", writable=True)
        check_same("recvbuf", dst, src.size, src.dtype)
    steps = _allreduce_steps(comm, src, dst, op, wire)
    return comm._execute("allreduce", steps, timeout, blocking, result)


def _allreduce_steps(comm, src, dst, op, wire):
    from .ring import allreduce_steps, displacements, even_counts

    yield from comm._signature_steps("allreduce", src.size, src.dtype, op, 0, None)
    try:
        if comm.size == 1:
            if dst is not src:
                np.copyto(dst, src)
            return dst
        ctx = comm._context(wire.wire_dtype.itemsize)
        counts = even_counts(src.size, comm.size)
        yield from allreduce_steps(ctx, src, dst, counts, displacements(counts), op, wire,
                                   mean=op == "mean")
        return dst
    finally:
        wire.finish()


# ---------------------------------------------------------------- top-k
class ErrorFeedback:
    """Residuals of top-k compression, one per user buffer (keyed by name or id).

    The residual holds what was not sent: before the next selection it is added to
    the new input, so ``sent + residual == input + previous residual`` exactly.
    """

    def __init__(self):
        self._residuals: dict[Hashable, np.ndarray] = {}

    def residual(self, key: Hashable, like: np.ndarray) -> np.ndarray:
        """The residual of ``key`` (zeros on first use), shaped like flat ``like``.

        Raises:
            ValueError: the key was used with a different size or dtype.
        """
        res = self._residuals.get(key)
        if res is None:
            res = np.zeros(like.size, dtype=like.dtype)
            self._residuals[key] = res
        elif res.size != like.size or res.dtype != like.dtype:
            raise ValueError(f"expected {res.size} elements of {res.dtype} for residual {key!r}, "
                             f"got {like.size} elements of {like.dtype}")
        return res

    def get(self, key: Hashable) -> np.ndarray | None:
        """The residual of ``key``, or None before its first use."""
        return self._residuals.get(key)

    def reset(self, key: Hashable | None = None) -> None:
        """Forget one residual (or all when ``key`` is None)."""
        if key is None:
            self._residuals.clear()
        else:
            self._residuals.pop(key, None)

    def __contains__(self, key) -> bool:
        return key in self._residuals

    def __len__(self) -> int:
        return len(self._residuals)


def topk_count(n: int, k: int | None = None, ratio: float | None = None) -> int:
    """Entries to send out of ``n``: ``k``, or ``ceil(ratio * n)`` (at least 1).

    Raises:
        ValueError: both or neither given, or out of range.
    """
    if (k is None) == (ratio is None):
        raise ValueError(f"expected exactly one of k and ratio, got k={k!r}, ratio={ratio!r}")
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= max(n, 1):
            raise ValueError(f"expected k in [1, {max(n, 1)}], got {k!r}")
        return min(int(k), n)
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"expected ratio in (0, 1], got {ratio!r}")
    return min(n, max(1, math.ceil(ratio * n)))


def topk_select(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ascending) and values of the ``k`` largest-magnitude entries of 1-D ``values``.

    NaN counts as the largest magnitude, so it is always sent, never hidden in a residual.
    """
    if k >= values.size:
        idx = np.arange(values.size)
    else:
        magnitude = np.abs(values)
        magnitude[np.isnan(magnitude)] = np.inf
        idx = np.sort(np.argpartition(magnitude, values.size - k)[values.size - k:])
    return idx, values[idx]


def topk_compress(array: np.ndarray, k: int, feedback: ErrorFeedback | None = None,
                  key: Hashable = None) -> tuple[np.ndarray, np.ndarray]:
    """Select this rank's top-k of ``array`` (+ its residual) and update the residual.

    Returns:
        ``(indices, values)``; with ``feedback``, its residual for ``key`` becomes
        ``array + old residual`` with the selected entries zeroed.
    """
    flat = array.reshape(-1)
    if feedback is None:
        corrected = flat.copy()
    else:
        residual = feedback.residual(key, flat)
        corrected = flat + residual
    idx, values = topk_select(corrected, k)
    if feedback is not None:
        np.copyto(residual, corrected)
        residual[idx] = 0
    return idx, values.copy()


def topk_allreduce(comm, array: np.ndarray, k: int | None = None, *, ratio: float | None = None,
                   feedback: ErrorFeedback | None = None, key: Hashable = None, op: str = "sum",
                   out: np.ndarray | None = None) -> np.ndarray:
    """All-reduce of top-k sparsified contributions (see the module docstring).

    Args:
        comm: an mpievo.comm.Communicator.
        array: this rank's floating-point contribution (C-contiguous, same size on
            every rank); not modified.
        k / ratio: entries each rank sends (exactly one of them).
        feedback: residual store (error feedback); None drops what is not sent.
        key: which residual of ``feedback`` belongs to this buffer (e.g. a
            parameter name); required with ``feedback``.
        op: "sum" or "mean".
        out: where to write the result (same shape and dtype), or None.

    Returns:
        The reduced array (dense; identical on every rank).

    Raises:
        TypeError: not a floating numpy array. ValueError: bad k/ratio/op, no key
            with feedback, or ranks passing different sizes.
    """
    from .buffers import flat_host

    flat = flat_host(array, "array")
    if not host.is_floating(flat.dtype):
        raise TypeError(f"expected a floating-point array for top-k, got {flat.dtype}")
    if op not in ("sum", "mean"):
        raise ValueError(f"expected op 'sum' or 'mean' for top-k, got {op!r}")
    if feedback is not None and key is None:
        raise ValueError("expected a key naming the buffer when feedback is given, got None")
    n = flat.size
    count = topk_count(n, k, ratio)
    idx, values = topk_compress(flat, count, feedback, key)
    table = comm.allgather(np.array([count, n], dtype=np.int64), counts=[2] * comm.size)
    counts, sizes = table[0::2].tolist(), table[1::2].tolist()
    if any(s != n for s in sizes):
        raise ValueError(f"expected the same array size on every rank, got sizes {sizes}")
    index_dtype = np.int32 if n < 2**31 else np.int64
    all_idx = comm.allgather(idx.astype(index_dtype), counts=counts)
    all_values = comm.allgather(np.ascontiguousarray(values), counts=counts)
    result = np.zeros(n, dtype=flat.dtype) if out is None else _flat_out(out, array)
    if out is not None:
        result[...] = 0
    start = 0
    for c in counts:  # rank order: the same additions in the same order on every rank
        result[all_idx[start:start + c]] += all_values[start:start + c]
        start += c
    if op == "mean":
        host.divide_into(result, comm.size)
    return result.reshape(array.shape) if out is None else out


def _flat_out(out: np.ndarray, array: np.ndarray) -> np.ndarray:
    from .buffers import flat_host

    flat = flat_host(out, "out", writable=True)
    if flat.size != array.size or flat.dtype != array.dtype:
        raise ValueError(f"expected out with {array.size} elements of {array.dtype}, "
                         f"got {flat.size} elements of {flat.dtype}")
    return flat
