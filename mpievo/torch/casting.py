"""Tensors read from a file into their genome rows, cast on the way: bit for bit as
``astype`` casts them (``ml_dtypes`` for bfloat16), through a small buffer, so loading a
source never holds a tensor-sized temporary. numpy only (no torch).
"""

from __future__ import annotations

import numpy as np

from ..kernels.host import BFLOAT16

#: bytes read at a time where a tensor is cast on its way into its row
_CAST_CHUNK = 8 << 20


def read_cast(handle, offset: int, dtype: np.dtype, out: np.ndarray, label="file") -> None:
    """Read ``out.size`` values of ``dtype`` at byte ``offset`` of the open binary file
    ``handle`` into the contiguous ``out``, cast to ``out``'s dtype (:func:`cast_into`):
    straight into ``out`` when the dtypes agree, else through a buffer of
    :data:`_CAST_CHUNK` bytes (no tensor-sized temporary, nothing memory-mapped).

    Raises:
        ValueError: the file ends before the values do (``label`` named).

    Example:
        >>> import io
        >>> out = np.empty(2, np.float32)
        >>> read_cast(io.BytesIO(np.float64([1.5, 2.5]).tobytes()), 0, np.dtype(np.float64), out)
        >>> out.tolist()
        [1.5, 2.5]
    """
    handle.seek(offset)
    if np.dtype(dtype) == out.dtype:
        _read_exactly(handle, out.reshape(-1).view(np.uint8), label)
        return
    step = max(1, _CAST_CHUNK // np.dtype(dtype).itemsize)
    buffer = np.empty(min(step, out.size), dtype)
    for start in range(0, out.size, step):
        part = buffer[:min(step, out.size - start)]
        _read_exactly(handle, part.view(np.uint8), label)
        cast_into(part, out[start:start + part.size])


def _read_exactly(handle, target: np.ndarray, label) -> None:
    view, done = memoryview(target), 0
    while done < target.size:
        got = handle.readinto(view[done:])
        if not got:
            raise ValueError(f"expected {target.size} more bytes in {label}, got {done} (truncated? copy it again)")
        done += got


def cast_into(values: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = values.astype(out.dtype)``, bit for bit, without numpy's element-wise
    bfloat16 casts (``ml_dtypes``): to bfloat16 through float32 (``ml_dtypes`` rounds a
    float64 through float32 too) and :func:`mpievo.evo.half.round_into`'s bit kernel, from
    bfloat16 widened exactly by :func:`mpievo.evo.half.widen_into`; other pairs numpy's
    own casts. 1-D contiguous arrays of a gene dtype.

    Example:
        >>> from mpievo.evo.half import genome_dtype
        >>> out = np.empty(3, genome_dtype("bfloat16"))
        >>> cast_into(np.float32([1.0, 1.00390625, -2.0]), out)    # a tie rounds to even
        >>> out.astype(np.float32).tolist()
        [1.0, 1.0, -2.0]
    """
    from ..evo.half import round_into, widen_into

    if values.dtype == out.dtype:
        np.copyto(out, values)
    elif out.dtype == BFLOAT16:
        round_into(values if values.dtype == np.float32 else values.astype(np.float32), out)
        _quiet_nans(out.view(np.uint16), 0x7F80, 0x7FC0)
    elif values.dtype == BFLOAT16:
        if out.dtype == np.float32:
            widen_into(values, out)
        else:
            np.copyto(out, widen_into(values, np.empty(values.shape, np.float32)), casting="unsafe")
            if out.dtype == np.float16:
                _quiet_nans(out.view(np.uint16), 0x7C00, 0x7E00)
    else:
        np.copyto(out, values, casting="unsafe")


def _quiet_nans(bits: np.ndarray, infinity: int, nan: int) -> None:
    """The NaNs of half bits ``bits`` as ``ml_dtypes`` writes them: the sign kept, the
    canonical quiet ``nan`` bits (a NaN's payload is dropped)."""
    found = np.flatnonzero((bits & 0x7FFF) > infinity)
    if found.size:
        bits[found] = (bits[found] & 0x8000) | nan
