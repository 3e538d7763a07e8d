"""Compressed all-reduce: fp16/bf16 wire formats and top-k sparsification.

Cast wires (:class:`Fp16Wire`, :class:`Bf16Wire`) plug into the ring algorithms
(mpievo.comm.ring) for float32 data: every segment travels as float16 or bfloat16
(half the bytes) and is combined in float32 on arrival. Each partial result is
rounded to the wire format once, where the ring would have to round it anyway to
send it on; the owner of a chunk therefore keeps exactly the bits it sends, and
every rank ends with identical results (all of wire precision). float16 overflows to
inf beyond 65504 in magnitude; bfloat16 keeps float32's range with 8 bits of
mantissa. Use :func:`allreduce` (or ``Communicator.allreduce(..., compression=)``
once the communicator delegates to it).

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
        """Return ``slot``; ``event`` marks a device copy still using it."""
        slot.event = event
        self._free.append(slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def clear(self) -> None:
        self._free.clear()


# --------------------------------------------------------------- cast wires
def _bfloat16() -> np.dtype:
    if host.BFLOAT16 is None:  # pragma: no cover - ml_dtypes is a dependency
        raise ImportError("bfloat16 compression needs ml_dtypes (a dependency of mpievo)")
    return host.BFLOAT16


class CastWire:
    """Wire sending float32 data as a narrower float type, combining in float32.

    Args:
        dtype: dtype of the user's data (float32).
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
        self._pool = pool if pool is not None else StagingPool()
        self._lent: dict[int, tuple[Slot, np.ndarray]] = {}

    # buffers handed to MPI are slot views; remember which slot each one is
    def _lend(self, count: int) -> np.ndarray:
        slot = self._pool.take(count * self.wire_dtype.itemsize)
        view = slot.view(self.wire_dtype, count)
        self._lent[id(view)] = (slot, view)
        return view

    def _give_back(self, buf) -> None:
        entry = self._lent.pop(id(buf), None)
        if entry is not None:
            self._pool.give(entry[0])

    def _round(self, dst: np.ndarray, spare: np.ndarray) -> None:
        """Round float32 ``dst`` to wire precision in place (``spare``: wire-dtype room)."""
        np.copyto(spare, dst, casting="unsafe")
        np.copyto(dst, spare, casting="unsafe")

    def encode(self, region: np.ndarray) -> np.ndarray:
        buf = self._lend(region.size)
        np.copyto(buf, region, casting="unsafe")
        return buf

    def release(self, buf) -> None:
        self._give_back(buf)

    def scratch(self, count: int) -> np.ndarray:
        return self._lend(count)

    def reduce(self, dst: np.ndarray, buf: np.ndarray, op: str, left=None) -> None:
        # numpy upcasts the wire operand to float32 block by block (no full temporary)
        host.REDUCE_OPS[op](dst if left is None else left, buf, out=dst)
        self._round(dst, buf)
        self._give_back(buf)

    def recv_into(self, dst: np.ndarray) -> np.ndarray:
        return self._lend(dst.size)

    def store(self, dst: np.ndarray, buf) -> None:
        if buf is not dst:
            np.copyto(dst, buf, casting="unsafe")
            self._give_back(buf)

    def divide(self, dst: np.ndarray, n: int) -> None:
        host.divide_into(dst, n)
        spare = self._lend(dst.size)
        self._round(dst, spare)
        self._give_back(spare)

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
    out = comm._execute("allreduce", steps, timeout, blocking)
    return result if blocking else _ResultRequest(out, result)


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


class _ResultRequest:
    """Request whose ``wait()`` returns the user-facing result array."""

    def __init__(self, request, result):
        self._request, self._result = request, result

    def test(self) -> bool:
        return self._request.test()

    def wait(self, timeout: float | None = None):
        self._request.wait(timeout)
        return self._result

    @property
    def done(self) -> bool:
        return self._request.done


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
