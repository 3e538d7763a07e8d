"""Host (Numba) kernels for generation 0 of bfloat16 delta genomes over bfloat16 bases,
one pass each, with the bits of the numpy / ``ml_dtypes`` element-wise code they replace:

* :func:`shifted_box_bf16`: the delta encoding's row box, ``[lower - base, upper - base]``
  computed in float64, rounded to bfloat16 as ``astype(ml_dtypes.bfloat16)`` does (through
  float32), then one step inwards where the rounding went outwards (``np.nextafter``);
* :func:`deltas_bf16`: a starting genome's delta ``float64(genome) - float64(base)``
  rounded so (computed in float32: the same bfloat16, see the kernel), clipped to the row box as ``np.clip`` does (``min(max(x, lo), hi)``).

Rows are ``uint16`` bit views (Numba has no bfloat16). A NaN is written as ``ml_dtypes``
writes it: its sign and the quiet NaN ``0x7FC0``.
"""

from __future__ import annotations

import numba
import numpy as np

from .bitcast import _f32_to_bf16
from .half_rows import _as_bits, _bf16, _clipped

_JIT = dict(nogil=True, cache=True)


@numba.njit(inline="always")
def _rounded(u):
    """bfloat16 bits of float32 bits ``u`` (nearest, ties to even; NaN as ml_dtypes)."""
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16(((u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0))
    return np.uint16(_f32_to_bf16(u))


@numba.njit(inline="always")
def _step(h, up):
    """``np.nextafter`` of the bfloat16 bits ``h`` towards +inf (``up``) or -inf."""
    if (h & np.uint16(0x7FFF)) == 0:
        return np.uint16(0x0001) if up else np.uint16(0x8001)
    if ((h & np.uint16(0x8000)) == 0) == up:
        return np.uint16(h + np.uint16(1))
    return np.uint16(h - np.uint16(1))


@numba.njit(inline="always")
def _inward(x, up):
    """bfloat16 bits of the float64 ``x`` rounded as ml_dtypes does, then stepped
    towards +inf (``up``) or -inf where that rounding went past ``x``."""
    h = _rounded(_as_bits(np.float32(x)))
    r = np.float64(_bf16(h))
    if (r < x) if up else (r > x):
        return _step(h, up)
    return h


@numba.njit(**_JIT)
def shifted_box_bf16(lower, upper, uniform, base, lo_out, hi_out):
    """The row box of bfloat16 deltas over the bfloat16 ``base`` bits (module docstring):
    ``lower``, ``upper`` float64 (one value each when ``uniform``), outputs uint16 bits.

    Example:
        >>> import numpy as np
        >>> lo, hi = np.empty(1, np.uint16), np.empty(1, np.uint16)
        >>> shifted_box_bf16(np.array([-1.0]), np.array([1.0]), True, np.array([0x3F80], np.uint16), lo, hi)
        >>> lo.tolist(), hi.tolist()     # [-2, 0] in bfloat16
        ([49152], [0])
    """
    for i in range(base.shape[0]):
        k = 0 if uniform else i
        b = np.float64(_bf16(base[i]))
        lo_out[i] = _inward(lower[k] - b, True)
        hi_out[i] = _inward(upper[k] - b, False)


@numba.njit(**_JIT)
def deltas_bf16(genome, base, lo, hi, out):
    """``out`` = the bfloat16 delta of the bfloat16 ``genome`` from ``base``, clipped to
    ``[lo, hi]`` (all uint16 bits; module docstring); returns the number of non-finite
    deltas (written as they are, before clipping: the caller refuses them).

    Example:
        >>> import numpy as np
        >>> out = np.empty(1, np.uint16)
        >>> deltas_bf16(np.array([0x4000], np.uint16), np.array([0x3F80], np.uint16),   # 2 - 1
        ...             np.array([0xC000], np.uint16), np.array([0x4000], np.uint16), out), out.tolist()
        (0, [16256])
    """
    bad = 0
    for i in range(genome.shape[0]):
        # float32 arithmetic gives float32(float64 difference): two bfloat16 values whose
        # exponents differ by at most 15 differ exactly in float32 (8 + 15 + 1 bits), and
        # a farther one moves the nearer by less than a quarter of its bfloat16 spacing
        # either way, so both round to the same bfloat16
        h = _rounded(_as_bits(_bf16(genome[i]) - _bf16(base[i])))
        if (h & np.uint16(0x7FFF)) >= np.uint16(0x7F80):
            bad += 1
            out[i] = h
            continue
        out[i] = _clipped(h, _bf16(h), _bf16(lo[i]), _bf16(hi[i]), lo[i], hi[i])     # numpy's clip
    return bad
