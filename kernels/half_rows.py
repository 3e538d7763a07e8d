"""Host (Numba) kernels over half-precision rows read and written as bits, fused so that a
model-sized child costs one pass over what it reads and one over what it writes.

Rows of bfloat16 or float16 genes are ``uint16`` bit views here (Numba has no
bfloat16). Each kernel widens what it reads a tile at a time (exactly: every half
value is a float32 value) and rounds what it writes once, to nearest, ties to even,
with the bit-pattern functions of :mod:`.bitcast`; so the results are bit for bit
those of widening whole rows, computing in float32 and rounding whole rows, without
any genome-sized float32 temporary:

* :func:`vary_half`: the GA's counter-based interpolation and mutation
  (:func:`.counter_operators.vary`, same draws) from half-precision parents, each
  child rounded into its half-precision row in the same pass;
* :func:`materialize_half`: ``clip(half(float32(base) + float32(delta)))``, a delta
  genome written into a model's buffer (the base float32 or half bits);
* :func:`centroid_distances_half`: the archive's diversity over half rows.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .bitcast import _bf16_to_f32, _f16_to_f32, _f32_to_bf16, _f32_to_f16
from .counter_operators import TILE, _child_and_tile, _mutate_dense, _mutate_sparse, _tiles

_JIT = dict(nogil=True, cache=True)
_F32 = np.float32


@numba.njit(**_JIT)
def widen_tile(bits, out, bf16):
    """float32 values of half bits ``bits`` into ``out`` (same length).

    Example:
        >>> import numpy as np
        >>> out = np.empty(1, np.float32)
        >>> widen_tile(np.array([0x3F80], np.uint16), out, True); out.tolist()   # bfloat16 1.0
        [1.0]
    """
    u = out.view(np.uint32)
    if bf16:
        for i in range(bits.shape[0]):
            u[i] = _bf16_to_f32(bits[i])
    else:
        for i in range(bits.shape[0]):
            u[i] = _f16_to_f32(bits[i])


@numba.njit(**_JIT)
def round_tile(values, out, bf16):
    """Half bits of float32 ``values`` into ``out`` (nearest, ties to even).

    Example:
        >>> import numpy as np
        >>> out = np.empty(1, np.uint16)
        >>> round_tile(np.array([1.0], np.float32), out, True); hex(out[0])
        '0x3f80'
    """
    u = values.view(np.uint32)
    if bf16:
        for i in range(u.shape[0]):
            out[i] = np.uint16(_f32_to_bf16(u[i]))
    else:
        for i in range(u.shape[0]):
            out[i] = np.uint16(_f32_to_f16(u[i]))


@numba.njit(parallel=True, **_JIT)
def vary_half(genomes, idx_a, idx_b, omega, steps, scale, lower, upper, mode, threshold, inv_log_q,
              dense, key, base, counts, out, bf16):
    """:func:`.counter_operators.vary` with interpolation, from half bits to half bits.

    Each task breeds one tile of one child in a float32 tile of its own (the parents'
    tiles widened, the child's rounded into ``out``): no float32 row of genome size.
    The tile's draws are the genome's: the mutation kernels take the tile's genes from
    0 with the counter base moved by ``g0 // 2`` (tiles start at even genes), which is
    the block ``base + c*pairs + g//2`` of every gene ``g`` as in ``vary``.

    Args:
        genomes: (m, dim) uint16 bits of the half-precision archive.
        idx_a, idx_b, omega, steps, scale, lower, upper, mode, threshold, inv_log_q, dense,
            key, base, counts: as :func:`.counter_operators.vary` (float32 arrays).
        out: (n, dim) uint16: the children, rounded to the half type.
        bf16: bfloat16 (True) or float16 bits.

    Example:
        >>> # HalfBreeding.breed(...) calls it: the GA's children of a half archive
    """
    n, dim = out.shape
    tiles = _tiles(dim)
    pairs = (dim + 1) // 2
    per_tile = np.zeros((n, tiles), np.int64)
    for task in numba.prange(n * tiles):
        c, t = _child_and_tile(task, n)
        g0 = t * TILE
        g1 = min(g0 + TILE, dim)
        size = g1 - g0
        x = np.empty((n, size), _F32)       # row c is this task's; n: the resample words' range
        w = omega[c]
        st, lt, ut = scale[g0:g1], lower[g0:g1], upper[g0:g1]
        start = base + np.uint64(g0 >> 1)
        if dense and threshold != 0:
            ga = np.empty(size, _F32)
            gb = np.empty(size, _F32)
            widen_tile(genomes[idx_a[c], g0:g1], ga, bf16)
            widen_tile(genomes[idx_b[c], g0:g1], gb, bf16)
            flags = np.empty(TILE // 2, np.uint32)
            per_tile[c, t] = _mutate_dense(x, c, 0, size, steps[c], st, lt, ut, mode, threshold,
                                           key, start, pairs, flags, ga, gb, w, True)
        else:     # _interpolate_tile on the parents' bits, widened in the same pass
            _interpolate_bits(genomes[idx_a[c], g0:g1], genomes[idx_b[c], g0:g1], w, x[c], lt, ut, bf16)
            if threshold != 0:
                per_tile[c, t] = _mutate_sparse(x, c, 0, size, steps[c], st, lt, ut,
                                                mode, inv_log_q, key, start, pairs)
        round_tile(x[c], out[c, g0:g1], bf16)
    for c in range(n):
        counts[c] = per_tile[c].sum()


@numba.njit(**_JIT)
def _interpolate_bits(ta, tb, w, xt, lt, ut, bf16):
    """:func:`.counter_operators._interpolate_tile` of the half bits ``ta``, ``tb``."""
    if bf16:
        for g in range(xt.shape[0]):
            a, b = _bf16(ta[g]), _bf16(tb[g])
            xt[g] = min(max(b + w * (a - b), lt[g]), ut[g])
    else:
        for g in range(xt.shape[0]):
            a, b = _f16(ta[g]), _f16(tb[g])
            xt[g] = min(max(b + w * (a - b), lt[g]), ut[g])


@intrinsic
def _as_float(typingctx, bits):
    """The float32 whose bits are the uint32 ``bits`` (a register bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _as_bits(typingctx, value):
    """The uint32 bits of the float32 ``value``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@numba.njit(inline="always")
def _bf16(h):
    return _as_float(np.uint32(_bf16_to_f32(h)))


@numba.njit(inline="always")
def _f16(h):
    return _as_float(np.uint32(_f16_to_f32(h)))


@numba.njit(inline="always")
def _clipped(h, v, lo, hi, lo_bits, hi_bits):
    """Half bits of ``clip(v)`` (``v`` the value of bits ``h``; the box as half values and
    their bits): numpy's ``clip`` (a NaN stays; else ``max`` then ``min`` with strict
    tests), a bound's own bits where it wins. Branch-free, so the loops vectorise."""
    above = v > lo
    y = v if above else lo
    yb = h if above else lo_bits
    r = yb if y < hi else hi_bits
    return h if v != v else r


@numba.njit(inline="always")
def _sum_bf16(b, d, lo, hi, lo_bits, hi_bits):
    h = np.uint32(_f32_to_bf16(_as_bits(np.float32(b + d))))
    return _clipped(h, _bf16(h), lo, hi, lo_bits, hi_bits)


@numba.njit(inline="always")
def _sum_f16(b, d, lo, hi, lo_bits, hi_bits):
    h = np.uint32(_f32_to_f16(_as_bits(np.float32(b + d))))
    return _clipped(h, _f16(h), lo, hi, lo_bits, hi_bits)


@numba.njit(**_JIT)
def _materialize_tile(base, base_bits, row, lower, upper, dst, g0, bf16):
    """One tile of :func:`materialize_half` (``row``, ``dst``: the tile's views; ``g0``: its
    first gene). One loop per case, each straight-line, so that each vectorises."""
    size = dst.shape[0]
    if lower.shape[0] == 1:
        lo_bits, hi_bits = np.uint32(lower[0]), np.uint32(upper[0])
        lo = _bf16(lower[0]) if bf16 else _f16(lower[0])
        hi = _bf16(upper[0]) if bf16 else _f16(upper[0])
        if base_bits.shape[0]:
            bt = base_bits[g0:g0 + size]
            if bf16:
                for i in range(size):
                    dst[i] = _sum_bf16(_bf16(bt[i]), _bf16(row[i]), lo, hi, lo_bits, hi_bits)
            else:
                for i in range(size):
                    dst[i] = _sum_f16(_f16(bt[i]), _f16(row[i]), lo, hi, lo_bits, hi_bits)
        else:
            bf = base[g0:g0 + size]
            if bf16:
                for i in range(size):
                    dst[i] = _sum_bf16(bf[i], _bf16(row[i]), lo, hi, lo_bits, hi_bits)
            else:
                for i in range(size):
                    dst[i] = _sum_f16(bf[i], _f16(row[i]), lo, hi, lo_bits, hi_bits)
        return
    lt, ut = lower[g0:g0 + size], upper[g0:g0 + size]
    for i in range(size):
        if base_bits.shape[0]:
            b = _bf16(base_bits[g0 + i]) if bf16 else _f16(base_bits[g0 + i])
        else:
            b = base[g0 + i]
        if bf16:
            dst[i] = _sum_bf16(b, _bf16(row[i]), _bf16(lt[i]), _bf16(ut[i]), np.uint32(lt[i]), np.uint32(ut[i]))
        else:
            dst[i] = _sum_f16(b, _f16(row[i]), _f16(lt[i]), _f16(ut[i]), np.uint32(lt[i]), np.uint32(ut[i]))


@numba.njit(parallel=True, **_JIT)
def materialize_half(base, base_bits, rows, lower, upper, out, bf16):
    """``out[i] = clip(half(float32(base) + float32(rows[i])), lower, upper)`` as bits, in
    one pass (one read of the base and the row, one write of ``out``).

    Args:
        base, base_bits: (dim,) float32 values and an empty uint16 array, or an empty
            float32 array and the (dim,) half bits (of ``out``'s type).
        rows: (n, dim) uint16 half bits of the deltas.
        lower, upper: (dim,) uint16 half bits of the genome box, or (1,): a uniform box.
        out: (n, dim) uint16: the genomes (e.g. a model's flat buffer), written once.

    Example:
        >>> import numpy as np
        >>> one = np.array([0x3F80], np.uint16)                     # bfloat16 1.0
        >>> out = np.empty((1, 1), np.uint16)
        >>> materialize_half(np.empty(0, np.float32), one, one[None, :], np.array([0], np.uint16),
        ...                  np.array([0x3FC0], np.uint16), out, True); hex(out[0, 0])   # 2.0 clipped to 1.5
        '0x3fc0'
    """
    n, dim = rows.shape
    for task in numba.prange(n * _tiles(dim)):
        c, t = _child_and_tile(task, n)
        g0 = t * TILE
        g1 = min(g0 + TILE, dim)
        _materialize_tile(base, base_bits, rows[c, g0:g1], lower, upper, out[c, g0:g1], g0, bf16)


@numba.njit(**_JIT)
def centroid_distances_half(genomes, bf16, width, out):
    """:func:`.operators.centroid_distances` over (m, dim) half bits ``genomes`` (widened a
    tile at a time; the same sums in the same order).

    Example:
        >>> # mpievo.evo.half.centroid_distances(rows, width, out) calls it
    """
    m, dim = genomes.shape
    out[:] = 0.0
    rows = np.empty((m, TILE), _F32)
    for g0 in range(0, dim, TILE):
        g1 = min(g0 + TILE, dim)
        for i in range(m):
            widen_tile(genomes[i, g0:g1], rows[i, :g1 - g0], bf16)
        for j in range(g1 - g0):
            c = 0.0
            for i in range(m):
                c += rows[i, j]
            c /= m
            for i in range(m):
                d = (rows[i, j] - c) / width[g0 + j]
                out[i] += d * d
    for i in range(m):
        out[i] = math.sqrt(out[i])
