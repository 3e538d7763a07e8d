"""Top-k sparsified all-reduce with error feedback.

:func:`topk_allreduce` sends only the k largest-magnitude entries of each rank and
keeps the rest in an :class:`ErrorFeedback` residual that is added back before the
next selection, so nothing is lost, only delayed. Sparse contributions do not add up
segment by segment inside a ring (each rank's k indices differ, and the union grows
at every hop), so the exchange is an all-gather of (index, value) pairs followed by a
local scatter-add in rank order (identical bits on every rank). Cost per rank: it
receives (P - 1) * k pairs of (4- or 8-byte index + value), against about
2 * n * itemsize for a ring all-reduce of the dense array: with int32 indices and
float32 values top-k moves fewer bytes when k < n / P, i.e. ratio below 1/P; the
local selection is an O(n) argpartition.
"""

from __future__ import annotations

import math
from typing import Hashable

import numpy as np

from mpievo.kernels import host

from .buffers import flat_host


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
    flat = flat_host(out, "out", writable=True)
    if flat.size != array.size or flat.dtype != array.dtype:
        raise ValueError(f"expected out with {array.size} elements of {array.dtype}, "
                         f"got {flat.size} elements of {flat.dtype}")
    return flat
