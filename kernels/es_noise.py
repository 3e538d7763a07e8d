"""Evolution-strategy noise rebuilt from its key: members and the update, block by block.

Pair ``j`` of an ES generation has the noise vector ``z_j`` whose gene ``g`` is
normal ``g % 2`` of block ``base + j * half + g // 2`` of the generation's stream key
(:mod:`mpievo.kernels.random`; ``half = ceil(dim / 2)``, two normals per block), so any
rank computes any member's genes, or any block of genes of the update, from the key
alone, in any order and with no buffer of draws. Member ``2j`` is ``mean + sigma z_j``,
member ``2j + 1`` is ``mean - sigma z_j`` (antithetic pairs).

:func:`perturb` writes genes ``start .. start + len(out)`` of a member (a whole row, or
one tensor of a model in place); :func:`combine` gives ``sum_j c_j z_j`` over a block;
:func:`adam_update` and :func:`sgd_update` fold that sum into the optimizer's step in
place, :data:`BLOCK` genes at a time (the only temporary: no genome-sized one). The sum
of each gene runs over the pairs in order, in float64, so the update is the same bits
for any block split and any rank.

Example::

    key = (1, 0, 5, 1)                       # counter_key(seed, island, generation, purpose)
    row = np.empty(1000, np.float32)
    perturb(row, mean, 0.02, 1.0, key, 1, pair=3, half=500, start=0)   # member 6
"""

from __future__ import annotations

import numba
import numpy as np

from .random import block, check_key, normal_pair


@numba.njit(nogil=True, cache=True)
def _pair(base, pair, half, gene, k0, k1, c2, c3):
    """The two normals of the block holding ``gene`` (even gene first)."""
    _, w1, w2, _ = block(base + np.uint64(pair) * np.uint64(half) + np.uint64(gene // 2), k0, k1, c2, c3)
    return normal_pair(w1, w2)


@numba.njit(nogil=True, cache=True)
def _sums(coeffs, base, half, gene, k0, k1, c2, c3):
    """``sum_j coeffs[j] z_j`` at the even gene of ``gene``'s block and at the odd one."""
    even = 0.0
    odd = 0.0
    for j in range(coeffs.shape[0]):
        a, b = _pair(base, j, half, gene, k0, k1, c2, c3)
        even += coeffs[j] * np.float64(a)
        odd += coeffs[j] * np.float64(b)
    return even, odd


@numba.njit(nogil=True, cache=True)
def _perturb(out, mean, scale, base, pair, half, start, k0, k1, c2, c3):
    a = b = np.float32(0.0)
    for i in range(out.shape[0]):
        gene = start + i
        if i == 0 or gene % 2 == 0:          # one block per two genes
            a, b = _pair(base, pair, half, gene, k0, k1, c2, c3)
        out[i] = np.float64(mean[i]) + scale * np.float64(a if gene % 2 == 0 else b)


@numba.njit(nogil=True, cache=True)
def _members(out, noise, mean, sigma, base, half, k0, k1, c2, c3):
    # every antithetic pair from one pass over its noise: rows 2j and 2j + 1 (and row j of
    # ``noise`` when it has rows: the update then reads it instead of drawing it again)
    n = out.shape[1]
    keep = noise.shape[0] > 0
    for j in range(out.shape[0] // 2):
        for i in range(0, n, 2):
            a, b = _pair(base, j, half, i, k0, k1, c2, c3)
            x = np.float64(mean[i])
            out[2 * j, i] = x + sigma * np.float64(a)
            out[2 * j + 1, i] = x + (-sigma) * np.float64(a)
            if keep:
                noise[j, i] = a
            if i + 1 < n:
                x = np.float64(mean[i + 1])
                out[2 * j, i + 1] = x + sigma * np.float64(b)
                out[2 * j + 1, i + 1] = x + (-sigma) * np.float64(b)
                if keep:
                    noise[j, i + 1] = b


@numba.njit(nogil=True, cache=True)
def _combine(out, coeffs, base, half, start, k0, k1, c2, c3):
    # the sums of two genes (one block per pair) at a time
    n = out.shape[0]
    i = 0
    while i < n:
        gene = start + i
        even, odd = _sums(coeffs, base, half, gene, k0, k1, c2, c3)
        if gene % 2 == 0:
            out[i] = even
            if i + 1 < n:
                out[i + 1] = odd
            i += 2
        else:
            out[i] = odd
            i += 1


#: genes whose sums one update step holds at a time (the only temporary: 32 KiB)
BLOCK = 4096


@numba.njit(nogil=True, cache=True)
def _step(mean, m, v, coeffs, noise, hyper, base, half, start, k0, k1, c2, c3):
    # Adam where v holds second moments; else SGD, m the velocity (empty: the plain step)
    decay, lr, beta1, beta2, eps, fix1, fix2, momentum = (hyper[0], hyper[1], hyper[2], hyper[3], hyper[4],
                                                          hyper[5], hyper[6], hyper[7])
    adam, velocity = v.shape[0] > 0, m.shape[0] > 0
    sums = np.empty(min(BLOCK, mean.shape[0]))
    for first in range(0, mean.shape[0], BLOCK):
        count = min(BLOCK, mean.shape[0] - first)
        if noise.shape[0]:       # kept by _members: the same numbers, summed in the same order
            for i in range(count):
                total = 0.0
                for j in range(coeffs.shape[0]):
                    total += coeffs[j] * np.float64(noise[j, first + i])
                sums[i] = total
        else:
            _combine(sums[:count], coeffs, base, half, start + first, k0, k1, c2, c3)
        for i in range(first, first + count):
            x = np.float64(mean[i])
            g = -sums[i - first] + decay * x
            if adam:
                mi = beta1 * np.float64(m[i]) + (1.0 - beta1) * g
                vi = beta2 * np.float64(v[i]) + (1.0 - beta2) * g * g
                m[i] = mi
                v[i] = vi
                mean[i] = x - lr * (mi / fix1) / (np.sqrt(vi / fix2) + eps)
            else:
                if velocity:
                    g = momentum * np.float64(m[i]) + g
                    m[i] = g
                mean[i] = x - lr * g


#: no kept noise: the update draws it from the key
_NO_NOISE = np.empty((0, 0), np.float32)


def _args(coeffs, key, base, half, start, *hyper) -> tuple:
    return (np.ascontiguousarray(coeffs, np.float64), np.array(hyper, np.float64), np.uint64(base),
            np.int64(half), np.int64(start), *_key(key))


def _noise(noise, start: int):
    if noise is None:
        return _NO_NOISE
    if start:
        raise ValueError(f"expected start 0 with kept noise (it holds every gene), got {start}")
    return noise


def _key(key):
    return tuple(np.uint64(k) for k in check_key(key))


def perturb(out: np.ndarray, mean: np.ndarray, sigma: float, sign: float, key, base: int, *,
            pair: int, half: int, start: int = 0) -> None:
    """``out[:] = mean + sign * sigma * z_pair[start : start + len(out)]`` (``mean`` the
    same genes), computed in float64 and rounded once to ``out``'s dtype.

    Example::

        perturb(row, mean, 0.02, -1.0, key, 1, pair=0, half=(dim + 1) // 2)   # member 1
    """
    _perturb(out, mean, np.float64(sign * sigma), np.uint64(base), np.int64(pair), np.int64(half),
             np.int64(start), *_key(key))


def members(out: np.ndarray, mean: np.ndarray, sigma: float, key, base: int, noise=None) -> None:
    """Every member of a generation into the rows of ``out`` (popsize, dim): the pairs'
    noise made once for both rows, the same bits as :func:`perturb` of each member; and
    into ``noise`` (popsize / 2, dim) float32 when given, for the update of the generation.

    Example::

        rows = np.empty((30, dim), np.float32); members(rows, mean, 1e-3, key, 1)
    """
    _members(out, _NO_NOISE if noise is None else noise, mean, np.float64(sigma), np.uint64(base),
             np.int64((out.shape[1] + 1) // 2), *_key(key))


def combine(out: np.ndarray, coeffs: np.ndarray, key, base: int, *, half: int, start: int = 0) -> None:
    """``out[:] = sum_j coeffs[j] * z_j[start : start + len(out)]`` (float64, pairs in order).

    Example::

        g = np.empty(dim); combine(g, np.array([0.5, -0.5]), key, 1, half=(dim + 1) // 2)
    """
    args = _args(coeffs, key, base, half, start)
    _combine(out, args[0], *args[2:])          # no hyper-parameters


def adam_update(mean, m, v, coeffs, key, base: int, *, half: int, start: int, decay: float, lr: float,
                beta1: float, beta2: float, eps: float, step: int | None, noise=None) -> None:
    """One Adam step in place on genes ``start ..`` of ``mean`` (``m``, ``v`` the same
    genes): gradient ``-sum_j coeffs[j] z_j + decay * mean``, bias-corrected for ``step``
    (None: no bias correction). ``noise``: the generation's noise kept by :func:`members`
    (the same bits as drawing it again from the key), else None.

    Example::

        adam_update(mean, m, v, coeffs, key, 1, half=half, start=0, decay=0.0, lr=0.01,
                    beta1=0.9, beta2=0.999, eps=1e-8, step=1)
    """
    fix1, fix2 = (1.0, 1.0) if step is None else (1.0 - beta1 ** step, 1.0 - beta2 ** step)
    args = _args(coeffs, key, base, half, start, decay, lr, beta1, beta2, eps, fix1, fix2, 0.0)
    _step(mean, m, v, args[0], _noise(noise, start), *args[1:])


def sgd_update(mean, m, coeffs, key, base: int, *, half: int, start: int, decay: float, lr: float,
               momentum: float, noise=None) -> None:
    """One SGD-with-momentum step in place (``m`` the velocity; empty: the plain step, no
    velocity kept), gradient as :func:`adam_update`.

    Example::

        sgd_update(mean, m, coeffs, key, 1, half=half, start=0, decay=0.0, lr=0.01, momentum=0.9)
    """
    args = _args(coeffs, key, base, half, start, decay, lr, 0.0, 0.0, 0.0, 1.0, 1.0, momentum)
    _step(mean, m, m[:0], args[0], _noise(noise, start), *args[1:])