"""Host (Numba) kernels that materialise seed-encoded genomes (recipes).

A recipe (:mod:`mpievo.evo.genomes.seeded`) is a weighted sum of base models plus
mutation *terms* ``(key, coefficient, rate)``. Term ``key`` (an int below 2**53)
is its own counter-based stream (:mod:`mpievo.kernels.random`, stream key
``(key low 32 bits, key high bits, TERM_STREAM, word)``), so any rank regenerates it
from the 24 bytes of the term, whatever the genome's size:

* gene ``g`` of a term uses block ``g`` of its normal stream (word ``NORMALS``): the
  first normal of :func:`~mpievo.kernels.random.normal_pair` of words 1 and 2 is its
  step, and in dense mode (``rate >= DENSE_RATE``) word 0 below
  ``round(rate * 2**32)`` says that the gene mutates;
* sparse mode: within each tile of :data:`TILE` genes the gap to the next mutated gene
  is ``floor(ln u / ln(1 - rate))``, ``u`` from word 0 of block ``g`` of the gap stream
  (word ``GAPS``), ``g`` the gene where the gap starts. Each gene then mutates with
  probability ``rate`` at a cost per mutated gene.

The mapping does not depend on the thread count (tiles are fixed), so every rank
materialises a recipe bit for bit alike.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .random import block, log_unit, normal_pair

#: genes per parallel task; part of the random mapping (sparse gaps restart per tile)
TILE = 16384
#: rates from which every gene draws its mask word (below: geometric gaps)
DENSE_RATE = 0.05
#: counter word 2 of every term stream (keeps them apart from the engine's streams)
TERM_STREAM = 0x7E57
NORMALS, GAPS = 0, 1

_JIT = dict(nogil=True, cache=True)
_U = np.uint64


@numba.njit(**_JIT)
def _tile(bases, weights, keys, coefs, thresholds, inv_log_qs, dense, scale, lower, upper, out, g0, g1):
    """Genes [g0, g1) of one genome: the weighted bases (float64, in base order), then
    every term in order, then the clip into [lower, upper] (NaN -> lower)."""
    c2 = _U(TERM_STREAM)
    for g in range(g0, g1):
        acc = 0.0
        for b in range(bases.shape[0]):
            if weights[b] != 0.0:
                acc += weights[b] * np.float64(bases[b, g])
        out[g] = acc
    for t in range(keys.shape[0]):
        k0 = keys[t] & _U(0xFFFFFFFF)
        k1 = keys[t] >> _U(32)
        coef = coefs[t]
        if dense[t]:
            for g in range(g0, g1):
                w0, w1, w2, _ = block(_U(g), k0, k1, c2, _U(NORMALS))
                if w0 < thresholds[t]:
                    z, _ = normal_pair(w1, w2)
                    out[g] += coef * np.float64(scale[g]) * np.float64(z)
        else:
            g = g0
            while g < g1:
                w0, _, _, _ = block(_U(g), k0, k1, c2, _U(GAPS))
                gap = np.float64(log_unit(w0)) * inv_log_qs[t]
                if gap >= g1 - g:
                    break
                g += int(gap)
                _, w1, w2, _ = block(_U(g), k0, k1, c2, _U(NORMALS))
                z, _ = normal_pair(w1, w2)
                out[g] += coef * np.float64(scale[g]) * np.float64(z)
                g += 1
    for g in range(g0, g1):
        v = out[g]
        if not v >= lower[g]:
            out[g] = lower[g]
        elif v > upper[g]:
            out[g] = upper[g]


@numba.njit(parallel=True, **_JIT)
def _materialize_tiles(bases, weights, keys, coefs, thresholds, inv_log_qs, dense, scale, lower, upper, out):
    dim = out.shape[0]
    for t in numba.prange((dim + TILE - 1) // TILE):
        _tile(bases, weights, keys, coefs, thresholds, inv_log_qs, dense, scale, lower, upper, out,
              t * TILE, min(dim, (t + 1) * TILE))


@numba.njit(**_JIT)
def _materialize_one_tile(bases, weights, keys, coefs, thresholds, inv_log_qs, dense, scale, lower, upper,
                          out):
    _tile(bases, weights, keys, coefs, thresholds, inv_log_qs, dense, scale, lower, upper, out,
          0, out.shape[0])


def materialize(bases, weights, terms, scale, lower, upper, out) -> None:
    """``out`` := the genome of a recipe: ``bases`` (B, dim), ``weights`` (B,) float64,
    ``terms`` (m, 3) rows of (key, coef, rate > 0), box and ``scale`` (dim,) in
    ``out``'s dtype. One pass over the genome, tile by tile (parallel from two tiles on:
    the result does not depend on it)."""
    keys = np.ascontiguousarray(terms[:, 0]).astype(np.uint64)
    if len(keys) and (keys.min() < 1 or keys.max() >= 2 ** 53):
        raise ValueError(f"expected term keys in [1, 2**53), got {keys.min()}..{keys.max()}")
    params = [term_params(float(rate)) for rate in terms[:, 2]]
    thresholds = np.array([p[0] for p in params], np.uint64)
    inv_log_qs = np.array([p[1] for p in params], np.float64)
    dense = np.array([p[2] for p in params], np.bool_)
    run = _materialize_tiles if out.shape[0] > TILE else _materialize_one_tile
    run(bases, np.ascontiguousarray(weights, np.float64), keys, np.ascontiguousarray(terms[:, 1]),
        thresholds, inv_log_qs, dense, scale, lower, upper, out)


def term_params(rate: float) -> tuple[int, float, bool]:
    """(dense threshold, 1 / ln(1 - rate), dense?) of a term's mutation rate (> 0)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"expected a term rate in (0, 1], got {rate!r}")
    dense = rate >= DENSE_RATE
    threshold = min(2 ** 32, int(round(rate * 2.0 ** 32)))
    inv_log_q = 1.0 / math.log1p(-rate) if rate < 1.0 else 0.0
    return threshold, inv_log_q, dense
