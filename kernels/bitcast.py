"""float32 <-> float16 / bfloat16 conversions on bit patterns (host, Numba).

numpy converts float32 <-> float16 one element at a time (about 4x slower than a
copy); these integer-only loops on the bit patterns vectorise and give the same
bits as numpy's float16 and ml_dtypes' bfloat16 casts (round to nearest even; NaN
stays NaN, its payload may differ). The compressed wires of mpievo.comm send
float32 data in 16 bits with them.
"""

from __future__ import annotations

import numba
import numpy as np

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
