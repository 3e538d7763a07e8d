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
    # base by base over a float64 tile: the same sums in the same order as gene by gene,
    # in loops the compiler vectorises
    acc = np.zeros(g1 - g0)
    for b in range(bases.shape[0]):
        w = weights[b]
        if w != 0.0:
            row = bases[b, g0:g1]
            for j in range(g1 - g0):
                acc[j] += w * np.float64(row[j])
    for j in range(g1 - g0):
        out[g0 + j] = acc[j]
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
def _materialize_rows(bases, weights, keys, coefs, thresholds, inv_log_qs, dense, counts, scale, lower, upper,
                      out):
    n, dim = out.shape
    tiles = (dim + TILE - 1) // TILE
    for task in numba.prange(n * tiles):
        i = task // tiles
        t = task - i * tiles
        m = counts[i]
        _tile(bases, weights[i], keys[i, :m], coefs[i, :m], thresholds[i, :m], inv_log_qs[i, :m], dense[i, :m],
              scale, lower, upper, out[i], t * TILE, min(dim, (t + 1) * TILE))


def materialize_rows(bases, weights, terms, scale, lower, upper, out) -> None:
    """``out[i]`` := the genome of recipe ``i``: ``bases`` (B, dim), ``weights`` (n, B)
    float64, ``terms`` (n, K, 3) of (key, coef, rate), used terms (key > 0) first in
    each row, box and ``scale`` (dim,) in ``out``'s dtype. One pass over each genome,
    tile by tile, in parallel over (row, tile): the result does not depend on it.

    Raises:
        ValueError: a used term's key outside [1, 2**53) or rate outside (0, 1].
    """
    keys, coefs, thresholds, inv_log_qs, dense, used = term_arrays(terms)
    counts = used.sum(axis=1)
    if not np.all(used == (np.arange(used.shape[1]) < counts[:, None])):
        raise ValueError("expected each recipe's used terms (key > 0) first, got gaps")
    _materialize_rows(bases, np.ascontiguousarray(weights, np.float64), keys, coefs, thresholds, inv_log_qs,
                      dense, counts.astype(np.int64), scale, lower, upper, out)


def term_arrays(terms):
    """What the kernels read of terms ``(..., 3)`` of (key, coef, rate): uint64 keys,
    coefficients, :func:`term_params` of the rates, and which terms are used (key > 0).

    Raises:
        ValueError: a used term's key outside [1, 2**53) or rate outside (0, 1].
    """
    terms = np.asarray(terms, np.float64)
    keys, coefs, rates = terms[..., 0], terms[..., 1], terms[..., 2]
    used = keys > 0
    if np.any(used & ((keys >= 2 ** 53) | ~(rates > 0) | ~(rates <= 1))):
        raise ValueError("expected term keys in [1, 2**53) and rates in (0, 1], got "
                         f"keys {keys[used].min()}..{keys[used].max()}, rates {rates[used].min()}..{rates[used].max()}")
    thresholds, inv_log_qs, dense = term_params(np.where(used, rates, 0.5))   # unused: never read
    return keys.astype(np.uint64), np.ascontiguousarray(coefs), thresholds, inv_log_qs, dense, used


def materialize(bases, weights, terms, scale, lower, upper, out) -> None:
    """:func:`materialize_rows` of one recipe: ``weights`` (B,), ``terms`` (m, 3) used
    terms, ``out`` (dim,)."""
    materialize_rows(bases, np.asarray(weights, np.float64)[None, :], np.asarray(terms, np.float64)[None],
                     scale, lower, upper, out[None, :])


def term_params(rates: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per term rate in (0, 1]: the dense mask bound ``round(rate * 2**32)`` (uint64),
    ``1 / ln(1 - rate)`` for the sparse gaps (0 at rate 1) and whether the term is
    dense (``rate >= DENSE_RATE``)."""
    rates = np.asarray(rates, np.float64)
    below = rates < 1.0
    thresholds = np.minimum(np.rint(rates * 2.0 ** 32), 2.0 ** 32).astype(np.uint64)
    inv_log_qs = np.where(below, 1.0 / np.log1p(-np.where(below, rates, 0.5)), 0.0)
    return thresholds, inv_log_qs, rates >= DENSE_RATE
