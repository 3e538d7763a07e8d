"""Host (Numba) variation kernels for large genomes, drawing from the counter-based
generator of :mod:`mpievo.kernels.random` instead of pre-drawn arrays.

No random number is stored: the numbers of gene ``g`` of child ``c`` are computed
from the stream key and a block index, where they are used, so breeding needs no
buffer of genome size and runs in parallel over tiles of :data:`TILE` genes
(``prange`` over (tile, child)); the result does not depend on the thread count.

Random mapping (``base`` is the first block the caller took from its stream,
``pairs = ceil(dim / 2)``, ``quads = ceil(dim / 4)``):

* mutation -- gene ``g`` of child ``c`` uses block ``base + c*pairs + g//2``: its
  word 0 (even ``g``) or 3 (odd ``g``) is the gene's *mask word*, words 1 and 2 give
  the pair's two normals (:func:`~mpievo.kernels.random.normal_pair`; even ``g`` takes
  the first). Dense mode: the gene mutates when its mask word is below
  ``threshold = round(rate * 2**32)``. Sparse mode: within each tile, the gap to the
  next mutated gene is geometric, ``floor(ln u / ln(1 - rate))`` with ``u`` from the
  mask word of the gene where the gap starts (the tile's first gene, or the one after
  the last mutated gene). Both give each gene probability ``rate``; the sparse mode
  costs per mutated gene instead of per gene. ``bounds = "resample"`` takes the
  uniform of a mutated gene that leaves the box from the mask word of its block in a
  second range, ``base + n*pairs + c*pairs + g//2``; the caller takes
  :func:`mutation_blocks` blocks.
* crossover and resampling of the box -- gene ``g`` of child ``c`` uses word ``g % 4``
  of block ``base + c*quads + g//4`` (:func:`gene_blocks` blocks).

A device version (issue 9) can reuse the mapping and the generator's device
functions as they are; mutation, uniform and blend crossover use only ``+ - *`` and
``sqrt`` besides, SBX uses libm's ``pow`` (a device's may differ in the last bit).
"""

from __future__ import annotations

import numba
import numpy as np
from numba.extending import register_jitable

from .operators import BOUND_CLIP, BOUND_RESAMPLE, _bound_value
from .random import block, log_unit, normal_pair, uniform_word

#: genes per parallel task; sparse mutation restarts its gap sequence at every tile,
#: so this constant is part of the random mapping (keep it even)
TILE = 16384
CROSS_UNIFORM, CROSS_BLEND, CROSS_SBX = 0, 1, 2
#: crossover name -> kernel code
CROSSOVER_CODES = {"uniform": CROSS_UNIFORM, "blend": CROSS_BLEND, "sbx": CROSS_SBX}

_JIT = dict(nogil=True, cache=True)
_U = np.uint64
_TWO_M32 = 2.0 ** -32


@register_jitable   # also called by the compiled GA step (ga_step)
def mutation_blocks(n: int, dim: int, mode: int) -> int:
    """Blocks one mutation of ``n`` children of ``dim`` genes takes from its stream."""
    return n * ((dim + 1) // 2) * (2 if mode == BOUND_RESAMPLE else 1)


def gene_blocks(n: int, dim: int) -> int:
    """Blocks a one-word-per-gene kernel (crossover, resampling) takes."""
    return n * ((dim + 3) // 4)


def rate_threshold(rate: float) -> int:
    """``round(rate * 2**32)``: a mask word below it mutates its gene."""
    return int(round(rate * 2.0 ** 32))


@numba.njit(inline="always")
def _tiles(dim):
    return (dim + TILE - 1) // TILE


@numba.njit(inline="always")
def _child_and_tile(task, n):
    # Tile-major: consecutive tasks breed the same tile of every child, so that tile
    # of the box (and of the parents) stays in cache instead of being read per child.
    return task % n, task // n


@numba.njit(**_JIT)
def _resample_word(key, base, n, pairs, c, g):
    w0, _, _, w3 = block(base + _U(n * pairs + c * pairs + (g >> 1)), key[0], key[1], key[2], key[3])
    return w0 if g & 1 == 0 else w3


@numba.njit(**_JIT)
def _mutated(v, lo, hi, mode, key, base, n, pairs, c, g):
    """Mutated value ``v`` of gene ``g`` of child ``c`` put back into the box."""
    if mode == BOUND_CLIP:
        return min(max(v, lo), hi)  # = _bound_value for clip, NaN included, but vectorises
    u = 0.0
    if mode == BOUND_RESAMPLE and not (v >= lo and v <= hi):
        u = np.float64(_resample_word(key, base, n, pairs, c, g)) * _TWO_M32
    return _bound_value(v, lo, hi, mode, u)


@numba.njit(**_JIT)
def _interpolate_tile(ga, gb, w, xt, lt, ut):
    """``xt = clip(gb + w * (ga - gb))`` on tile views (indexed from 0: see _mutate_dense)."""
    for g in range(xt.shape[0]):
        xt[g] = min(max(gb[g] + w * (ga[g] - gb[g]), lt[g]), ut[g])


@numba.njit(**_JIT)
def _mutate_dense(x, c, g0, g1, step, scale, lower, upper, mode, threshold, key, base, pairs, flags,
                  ga, gb, w, interpolate):
    """Mask-word mutation of genes [g0, g1) of row c (g0 even), after the interpolation of
    the parents' tile views ``ga``, ``gb`` when ``interpolate``; returns the count.

    The clip loop vectorises: it indexes tile views from 0 (Numba then drops its
    negative-index handling) and stores each pair's count in ``flags`` (>= TILE // 2
    entries) instead of summing in the loop. It also interpolates in the same pass,
    so that reading the parents from memory overlaps the arithmetic.
    """
    n = x.shape[0]
    xt, st, lt, ut = x[c, g0:g1], scale[g0:g1], lower[g0:g1], upper[g0:g1]
    row = base + _U(c * pairs + (g0 >> 1))
    full = (g1 - g0) >> 1
    if mode == BOUND_CLIP:
        for q in range(full):
            w0, w1, w2, w3 = block(row + _U(q), key[0], key[1], key[2], key[3])
            z0, z1 = normal_pair(w1, w2)
            m0 = w0 < threshold
            m1 = w3 < threshold
            if interpolate:
                v0 = min(max(gb[2 * q] + w * (ga[2 * q] - gb[2 * q]), lt[2 * q]), ut[2 * q])
                v1 = min(max(gb[2 * q + 1] + w * (ga[2 * q + 1] - gb[2 * q + 1]), lt[2 * q + 1]),
                         ut[2 * q + 1])
            else:
                v0 = xt[2 * q]
                v1 = xt[2 * q + 1]
            y0 = min(max(v0 + step * st[2 * q] * z0, lt[2 * q]), ut[2 * q])
            y1 = min(max(v1 + step * st[2 * q + 1] * z1, lt[2 * q + 1]), ut[2 * q + 1])
            xt[2 * q] = y0 if m0 else v0
            xt[2 * q + 1] = y1 if m1 else v1
            flags[q] = np.uint32(m0) + np.uint32(m1)
    else:
        if interpolate:
            _interpolate_tile(ga, gb, w, xt, lt, ut)
        for q in range(full):
            w0, w1, w2, w3 = block(row + _U(q), key[0], key[1], key[2], key[3])
            z0, z1 = normal_pair(w1, w2)
            for k in range(2):
                if (w0 if k == 0 else w3) < threshold:
                    g = 2 * q + k
                    xt[g] = _mutated(xt[g] + step * st[g] * (z0 if k == 0 else z1), lt[g], ut[g], mode,
                                     key, base, n, pairs, c, g0 + g)
            flags[q] = np.uint32(w0 < threshold) + np.uint32(w3 < threshold)
    count = np.int64(flags[:full].sum())
    if (g1 - g0) & 1:  # odd dim: the last gene has no partner
        g = g1 - g0 - 1
        if interpolate and mode == BOUND_CLIP:
            xt[g] = min(max(gb[g] + w * (ga[g] - gb[g]), lt[g]), ut[g])
        w0, w1, w2, _ = block(row + _U(full), key[0], key[1], key[2], key[3])
        if w0 < threshold:
            z0, _ = normal_pair(w1, w2)
            xt[g] = _mutated(xt[g] + step * st[g] * z0, lt[g], ut[g], mode, key, base, n, pairs, c, g0 + g)
            count += 1
    return count


@numba.njit(**_JIT)
def _mutate_sparse(x, c, g0, g1, step, scale, lower, upper, mode, inv_log_q, key, base, pairs):
    """Geometric-gap mutation of genes [g0, g1) of row c; returns the count."""
    n = x.shape[0]
    row = base + _U(c * pairs)
    count = 0
    g = g0
    while g < g1:
        w0, _, _, w3 = block(row + _U(g >> 1), key[0], key[1], key[2], key[3])
        gap = np.float64(log_unit(w0 if g & 1 == 0 else w3)) * inv_log_q
        if gap >= g1 - g:
            break
        g += int(gap)
        _, w1, w2, _ = block(row + _U(g >> 1), key[0], key[1], key[2], key[3])
        z0, z1 = normal_pair(w1, w2)
        z = z0 if g & 1 == 0 else z1
        x[c, g] = _mutated(x[c, g] + step * scale[g] * z, lower[g], upper[g], mode, key, base,
                           n, pairs, c, g)
        count += 1
        g += 1
    return count


@numba.njit(parallel=True, **_JIT)
def vary(genomes, idx_a, idx_b, omega, interpolate, x, steps, scale, lower, upper, mode,
         threshold, inv_log_q, dense, key, base, counts):
    """Interpolation crossover (optional) then Gaussian mutation of every row of ``x``.

    Args:
        genomes, idx_a, idx_b, omega: as :func:`mpievo.kernels.operators.interpolate_rows`;
            read only when ``interpolate``, which first sets
            ``x[i] = clip(G[ib[i]] + omega[i] * (G[ia[i]] - G[ib[i]]))``.
        x: (n, dim) children, mutated in place.
        steps, scale, lower, upper, mode: as :func:`~mpievo.kernels.operators.mutate_sparse`.
        threshold: uint64 ``round(rate * 2**32)`` (dense mode; 0: no mutation).
        inv_log_q: ``1 / log1p(-rate)`` (sparse mode).
        dense: mask words (True) or geometric gaps (False); see the module docstring.
        key: stream key, a tuple of four uint64; base: uint64 first block.
        counts: (n,) int64 out: genes mutated per row.
    """
    n, dim = x.shape
    tiles = _tiles(dim)
    pairs = (dim + 1) // 2
    per_tile = np.zeros((n, tiles), np.int64)
    for task in numba.prange(n * tiles):
        c, t = _child_and_tile(task, n)
        g0 = t * TILE
        g1 = min(g0 + TILE, dim)
        ga = genomes[idx_a[c], g0:g1] if interpolate else x[c, g0:g1]
        gb = genomes[idx_b[c], g0:g1] if interpolate else x[c, g0:g1]
        w = omega[c] if interpolate else x[c, g0]  # ga, gb, w unused without interpolation
        if dense and threshold != 0:
            flags = np.empty(TILE // 2, np.uint32)
            per_tile[c, t] = _mutate_dense(x, c, g0, g1, steps[c], scale, lower, upper, mode, threshold,
                                           key, base, pairs, flags, ga, gb, w, interpolate)
            continue
        if interpolate:
            _interpolate_tile(ga, gb, w, x[c, g0:g1], lower[g0:g1], upper[g0:g1])
        if threshold != 0:
            per_tile[c, t] = _mutate_sparse(x, c, g0, g1, steps[c], scale, lower, upper,
                                            mode, inv_log_q, key, base, pairs)
    for c in range(n):
        counts[c] = per_tile[c].sum()


@numba.njit(inline="always")
def _cross_gene(kind, a, b, w, swap_threshold, alpha, coef, power):
    if kind == CROSS_UNIFORM:
        return b if w < swap_threshold else a
    if kind == CROSS_BLEND:
        low = min(a, b)
        span = abs(a - b)
        u = uniform_word(w)
        return low - alpha * span + u * (coef * span)
    # SBX: 24 bits of spread, the top bit picks one of the two children
    u = np.float64(w & _U(0xFFFFFF)) * 2.0 ** -24
    beta = (2.0 * u) ** power if u <= 0.5 else (0.5 / (1.0 - u)) ** power
    beta = beta if w >> _U(31) else -beta
    return 0.5 * ((1.0 + beta) * np.float64(a) + (1.0 - beta) * np.float64(b))


@numba.njit(parallel=True, **_JIT)
def cross(genomes, idx_a, idx_b, kind, swap_threshold, alpha, coef, eta, key, base, out):
    """Uniform (``kind`` CROSS_UNIFORM: gene from b where its word is below
    ``swap_threshold``), BLX-alpha (CROSS_BLEND: ``alpha`` and ``coef = 1 + 2 alpha`` in
    the genome dtype) or SBX (CROSS_SBX, index ``eta``) crossover of rows ``idx_a[i]``,
    ``idx_b[i]`` into ``out[i]``, one word per gene. Blend and SBX children may leave
    the box."""
    n, dim = out.shape
    tiles = _tiles(dim)
    quads = (dim + 3) // 4
    power = 1.0 / (eta + 1.0)
    for task in numba.prange(n * tiles):
        c, t = _child_and_tile(task, n)
        g0 = t * TILE
        g1 = min(g0 + TILE, dim)
        a = idx_a[c]
        b = idx_b[c]
        row = base + _U(c * quads)
        for q in range(g0 >> 2, (g1 + 3) >> 2):
            ws = block(row + _U(q), key[0], key[1], key[2], key[3])
            for k in range(4):
                g = 4 * q + k
                if g < g1:
                    out[c, g] = _cross_gene(kind, genomes[a, g], genomes[b, g], ws[k], swap_threshold,
                                            alpha, coef, power)


@numba.njit(inline="always")
def _in_box(x, c, g, lo, hi, w):
    """``x[c, g] = min(lo + u * (hi - lo), hi)`` with ``u`` = word ``w`` times 2**-32; the
    product is rounded to the genome dtype on store, then added to ``lo`` in that dtype
    (as the device's twin in cuda_counter_kernels)."""
    x[c, g] = np.float64(w) * _TWO_M32 * (hi - lo)
    x[c, g] = min(lo + x[c, g], hi)


@numba.njit(parallel=True, **_JIT)
def resample_outside(x, lower, upper, key, base):
    """Genes outside the box (or NaN) become ``lower + u * (upper - lower)`` (capped at
    ``upper``), ``u`` from the gene's word; returns how many were outside."""
    n, dim = x.shape
    tiles = _tiles(dim)
    quads = (dim + 3) // 4
    per_task = np.zeros(n * tiles, np.int64)
    for task in numba.prange(n * tiles):
        c, t = _child_and_tile(task, n)
        g0 = t * TILE
        row = base + _U(c * quads)
        moved = 0
        for g in range(g0, min(g0 + TILE, dim)):
            v = x[c, g]
            if not (v >= lower[g] and v <= upper[g]):
                ws = block(row + _U(g >> 2), key[0], key[1], key[2], key[3])
                _in_box(x, c, g, lower[g], upper[g], ws[g & 3])
                moved += 1
        per_task[task] = moved
    return per_task.sum()


@numba.njit(parallel=True, **_JIT)
def uniform_fill(x, lower, upper, key, base):
    """Every gene ``lower + u * (upper - lower)`` (capped at ``upper``), ``u`` from the
    gene's word as in :func:`resample_outside` (:func:`gene_blocks` blocks)."""
    n, dim = x.shape
    tiles = _tiles(dim)
    quads = (dim + 3) // 4
    for task in numba.prange(n * tiles):
        c, t = _child_and_tile(task, n)
        g0 = t * TILE
        g1 = min(g0 + TILE, dim)
        row = base + _U(c * quads)
        for q in range(g0 >> 2, (g1 + 3) >> 2):
            ws = block(row + _U(q), key[0], key[1], key[2], key[3])
            for k in range(4):
                g = 4 * q + k
                if g < g1:
                    _in_box(x, c, g, lower[g], upper[g], ws[k])
