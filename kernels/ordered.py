"""Floats as integers that sort like them, NaN first or last (host, Numba).

MPI_MAX/MPI_MIN on floats give an order-dependent answer when a rank holds NaN.
Mapped to these keys, the MPI library's integer MAX/MIN give mpievo's semantics
(NaN wherever any rank holds NaN) in one call on the data alone: a float's bits as a
signed integer, with the magnitude bits of negatives flipped, order like the floats
(-0.0 just below +0.0), and every NaN becomes the largest key (for max) or the
smallest (for min). The map is its own inverse on non-NaN keys, and the extreme keys
map back to NaN (0x7FF..F and 0xFF..F are NaN bit patterns), so decoding is the
same loop. One pass each way, in place, no temporaries.
"""

from __future__ import annotations

import numba
import numpy as np

_SIGNATURES = ["void(float32[::1], int32[::1], int32, int32)", "void(float64[::1], int64[::1], int64, int64)"]


@numba.njit(_SIGNATURES, cache=True, nogil=True)
def _encode(src, keys, nan_key, magnitude):
    bits = src.view(keys.dtype)
    for i in range(src.shape[0]):
        x = src[i]  # read before the write: keys may be src's memory
        b = bits[i]
        k = b ^ magnitude if b < 0 else b
        keys[i] = nan_key if x != x else k


@numba.njit(["void(int32[::1], int32)", "void(int64[::1], int64)"], cache=True, nogil=True)
def _decode(keys, magnitude):
    for i in range(keys.shape[0]):
        k = keys[i]
        if k < 0:
            keys[i] = k ^ magnitude


#: float dtype -> the integer dtype of its keys
KEY_DTYPES = {np.dtype(np.float32): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.int64)}
#: key dtype -> (smallest, largest) key, as the kernels' scalar type (np.iinfo costs ~1 us
#: a call, a third of a small all-reduce)
_LIMITS = {d: (d.type(np.iinfo(d).min), d.type(np.iinfo(d).max)) for d in KEY_DTYPES.values()}


def encode(src: np.ndarray, keys: np.ndarray, nan_high: bool) -> None:
    """``keys`` = order-preserving keys of ``src`` (1-D float32/float64; ``keys`` the
    matching int32/int64, may be ``src``'s memory); NaN -> largest key if ``nan_high``
    (for max), else smallest (for min)."""
    low, high = _LIMITS[keys.dtype]
    _encode(src, keys, high if nan_high else low, high)


def decode(keys: np.ndarray) -> np.ndarray:
    """Turn keys back into the floats' bits, in place; returns them viewed as floats."""
    _decode(keys, _LIMITS[keys.dtype][1])
    return keys.view(np.float32 if keys.dtype == np.int32 else np.float64)
