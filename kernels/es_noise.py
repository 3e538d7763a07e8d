"""Evolution-strategy noise rebuilt from its key: members and the update, block by block.

Pair ``j`` of an ES generation has the noise vector ``z_j`` whose genes ``4b .. 4b + 3``
are the four normals of block ``base + j * stride + b`` of the generation's stream key
(:mod:`mpievo.kernels.random`; ``stride = ceil(dim / 4)``, :func:`pair_stride`): the
:func:`~mpievo.kernels.random.normal_pair` of words 1 and 2, then of words 3 and 0, so
one Philox block serves four genes. Any rank computes any member's genes, or any range
of genes of the update, from the key alone, in any order and with no buffer of draws.
Member ``2j`` is ``mean + sigma z_j``, member ``2j + 1`` is ``mean - sigma z_j``
(antithetic pairs).

The blocks are made :data:`LANES` at a time, round by round over the lanes and then
normal by normal, loops the compiler turns into vector instructions (the same bits as
:func:`mpievo.kernels.random.block` one block at a time, tested): on the 1,000-D
benchmark this draws noise as fast as torch's ``randn`` on one thread (CPU time).

:func:`perturb` writes genes ``start .. start + len(out)`` of a member (a whole row, or
one tensor of a model in place); :func:`combine` gives ``sum_j c_j z_j`` over a range;
:func:`adam_update` and :func:`sgd_update` fold that sum into the optimizer's step in
place, :data:`BLOCK` genes at a time (the only temporary: no genome-sized one). The sum
of each gene runs over the pairs in order, in float64, so the update is the same bits
for any split into ranges and on any rank.

Example::

    key = (1, 0, 5, 1)                       # counter_key(seed, island, generation, purpose)
    row = np.empty(1000, np.float32)
    perturb(row, mean, 0.02, 1.0, key, 1, pair=3, stride=pair_stride(1000), start=0)   # member 6
"""

from __future__ import annotations

import numba
import numpy as np

from .random import PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1, ROUNDS, check_key, normal_pair

#: Philox blocks made together (each four genes of one pair): 1,024 genes per pass
LANES = 256
_GENES = 4 * LANES
_M0, _M1, _W0, _W1 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1), np.uint64(PHILOX_W0), np.uint64(PHILOX_W1)
_M32, _S32 = np.uint64(0xFFFFFFFF), np.uint64(32)


def pair_stride(dim: int) -> int:
    """Blocks of the stream per pair of a ``dim``-gene genome: ``ceil(dim / 4)``.

    Example::

        pair_stride(1000)        # 250
    """
    return (int(dim) + 3) // 4


@numba.njit(nogil=True, cache=True)
def _lanes(x0, x1, x2, x3, first, k0, k1, c2, c3):
    # Philox4x32-10 of blocks first .. first + LANES - 1, lane by lane within each round
    # (random.block's arithmetic, in an order the compiler vectorises)
    for lane in range(x0.shape[0]):
        index = first + np.uint64(lane)
        x0[lane] = index & _M32
        x1[lane] = index >> _S32
        x2[lane] = c2
        x3[lane] = c3
    for _ in range(ROUNDS):
        for lane in range(x0.shape[0]):
            p0 = _M0 * x0[lane]
            p1 = _M1 * x2[lane]
            y0 = (p1 >> _S32) ^ x1[lane] ^ k0
            y2 = (p0 >> _S32) ^ x3[lane] ^ k1
            x0[lane] = y0
            x1[lane] = p1 & _M32
            x2[lane] = y2
            x3[lane] = p0 & _M32
        k0 = (k0 + _W0) & _M32
        k1 = (k1 + _W1) & _M32


@numba.njit(nogil=True, cache=True)
def _fill(z, words, normals, base, pair, stride, start, k0, k1, c2, c3):
    """``z[:] = z_pair[start : start + len(z)]`` (float32); ``words`` (4, LANES) uint64 and
    ``normals`` (4, LANES) float32 are the work space."""
    n = z.shape[0]
    if n == 0:
        return
    first = start // 4
    last = (start + n - 1) // 4
    offset = base + np.uint64(pair) * np.uint64(stride)
    for chunk in range(first, last + 1, LANES):
        _lanes(words[0], words[1], words[2], words[3], offset + np.uint64(chunk), k0, k1, c2, c3)
        w0, w1, w2, w3, n0, n1, n2, n3 = (words[0], words[1], words[2], words[3],
                                          normals[0], normals[1], normals[2], normals[3])
        for lane in range(LANES):
            n0[lane], n1[lane] = normal_pair(w1[lane], w2[lane])
        for lane in range(LANES):
            n2[lane], n3[lane] = normal_pair(w3[lane], w0[lane])
        low = max(start, 4 * chunk)
        high = min(start + n, 4 * (chunk + LANES))
        inner_low = (low + 3) // 4                 # the blocks whose four genes are all wanted
        inner_high = max(high // 4, inner_low)
        for gene in range(low, min(4 * inner_low, high)):
            z[gene - start] = normals[gene & 3, (gene >> 2) - chunk]
        for block in range(inner_low, inner_high):
            lane, at = block - chunk, 4 * block - start
            z[at] = n0[lane]
            z[at + 1] = n1[lane]
            z[at + 2] = n2[lane]
            z[at + 3] = n3[lane]
        for gene in range(max(4 * inner_high, low), high):
            z[gene - start] = normals[gene & 3, (gene >> 2) - chunk]


@numba.njit(nogil=True, cache=True)
def _perturb(out, mean, scale, base, pair, stride, start, k0, k1, c2, c3):
    words = np.empty((4, LANES), np.uint64)
    normals = np.empty((4, LANES), np.float32)
    z = np.empty(min(_GENES, out.shape[0]), np.float32)
    for first in range(0, out.shape[0], _GENES):
        count = min(_GENES, out.shape[0] - first)
        _fill(z[:count], words, normals, base, pair, stride, start + first, k0, k1, c2, c3)
        for i in range(count):
            out[first + i] = np.float64(mean[first + i]) + scale * np.float64(z[i])


@numba.njit(nogil=True, cache=True)
def _noise_row(z, base, pair, stride, start, k0, k1, c2, c3):
    _fill(z, np.empty((4, LANES), np.uint64), np.empty((4, LANES), np.float32), base, pair, stride, start,
          k0, k1, c2, c3)


@numba.njit(nogil=True, cache=True)
def _shift(out, mean, scale, z):
    for i in range(out.shape[0]):
        out[i] = np.float64(mean[i]) + scale * np.float64(z[i])


@numba.njit(nogil=True, cache=True)
def _members(out, noise, mean, sigma, base, stride, k0, k1, c2, c3):
    # every antithetic pair from one draw of its noise: rows 2j and 2j + 1 (and row j of
    # ``noise`` when it has rows: the update then reads it instead of drawing it again)
    n = out.shape[1]
    keep = noise.shape[0] > 0
    words = np.empty((4, LANES), np.uint64)
    normals = np.empty((4, LANES), np.float32)
    z = np.empty(min(_GENES, n), np.float32)
    for j in range(out.shape[0] // 2):
        for first in range(0, n, _GENES):
            count = min(_GENES, n - first)
            _fill(z[:count], words, normals, base, j, stride, first, k0, k1, c2, c3)
            for i in range(count):
                x = np.float64(mean[first + i])
                e = np.float64(z[i])
                out[2 * j, first + i] = x + sigma * e
                out[2 * j + 1, first + i] = x + (-sigma) * e
            if keep:
                noise[j, first:first + count] = z[:count]


@numba.njit(nogil=True, cache=True)
def _combine(out, coeffs, base, stride, start, k0, k1, c2, c3):
    # per gene, sum_j coeffs[j] z_j in float64, the pairs in order
    words = np.empty((4, LANES), np.uint64)
    normals = np.empty((4, LANES), np.float32)
    z = np.empty(min(_GENES, out.shape[0]), np.float32)
    out[:] = 0.0
    for first in range(0, out.shape[0], _GENES):
        count = min(_GENES, out.shape[0] - first)
        for j in range(coeffs.shape[0]):
            _fill(z[:count], words, normals, base, j, stride, start + first, k0, k1, c2, c3)
            c = coeffs[j]
            for i in range(count):
                out[first + i] += c * np.float64(z[i])


#: genes whose sums one update step holds at a time (the only temporary: 32 KiB)
BLOCK = 4096


@numba.njit(nogil=True, cache=True)
def _step(mean, m, v, coeffs, noise, given, hyper, base, stride, start, k0, k1, c2, c3):
    # Adam where v holds second moments; else SGD, m the velocity (empty: the plain step);
    # the sums from ``given`` when it has genes (low-rank noise), else from the noise
    decay, lr, beta1, beta2, eps, fix1, fix2, momentum = (hyper[0], hyper[1], hyper[2], hyper[3], hyper[4],
                                                          hyper[5], hyper[6], hyper[7])
    adam, velocity = v.shape[0] > 0, m.shape[0] > 0
    sums = np.empty(min(BLOCK, mean.shape[0]))
    for first in range(0, mean.shape[0], BLOCK):
        count = min(BLOCK, mean.shape[0] - first)
        if given.shape[0]:
            sums[:count] = given[first:first + count]
        elif noise.shape[0]:     # kept by _members: the same numbers, summed in the same order
            sums[:count] = 0.0
            for j in range(coeffs.shape[0]):
                c = coeffs[j]
                for i in range(count):
                    sums[i] += c * np.float64(noise[j, first + i])
        else:
            _combine(sums[:count], coeffs, base, stride, start + first, k0, k1, c2, c3)
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
_NO_SUMS = np.empty(0)


def _args(coeffs, key, base, stride, start, *hyper) -> tuple:
    return (np.ascontiguousarray(coeffs, np.float64), np.array(hyper, np.float64), np.uint64(base),
            np.int64(stride), np.int64(start), *_key(key))


def _noise(noise, start: int):
    if noise is None:
        return _NO_NOISE
    if start:
        raise ValueError(f"expected start 0 with kept noise (it holds every gene), got {start}")
    return noise


def _sums(sums):
    return _NO_SUMS if sums is None else np.ascontiguousarray(sums, np.float64)


def _key(key):
    return tuple(np.uint64(k) for k in check_key(key))


def perturb(out: np.ndarray, mean: np.ndarray, sigma: float, sign: float, key, base: int, *,
            pair: int, stride: int, start: int = 0) -> None:
    """``out[:] = mean + sign * sigma * z_pair[start : start + len(out)]`` (``mean`` the
    same genes), computed in float64 and rounded once to ``out``'s dtype.

    Example::

        perturb(row, mean, 0.02, -1.0, key, 1, pair=0, stride=pair_stride(dim))   # member 1
    """
    _perturb(out, mean, np.float64(sign * sigma), np.uint64(base), np.int64(pair), np.int64(stride),
             np.int64(start), *_key(key))


def noise(z: np.ndarray, key, base: int, *, pair: int, stride: int, start: int = 0) -> None:
    """``z[:] = z_pair[start : start + len(z)]`` (float32 ``z``): a pair's noise, drawn once
    for both of its members (:func:`shift`).

    Example::

        z = np.empty(dim, np.float32); noise(z, key, 1, pair=0, stride=pair_stride(dim))
    """
    _noise_row(z, np.uint64(base), np.int64(pair), np.int64(stride), np.int64(start), *_key(key))


def shift(out: np.ndarray, mean: np.ndarray, scale: float, z: np.ndarray) -> None:
    """``out[:] = mean + scale * z`` in float64, rounded once to ``out``'s dtype: with ``z``
    from :func:`noise` and ``scale = +-sigma``, the bits of :func:`perturb`.

    Example::

        shift(row, mean, -sigma, z)        # member 2j + 1 from pair j's noise
    """
    _shift(out, mean, np.float64(scale), z)


def members(out: np.ndarray, mean: np.ndarray, sigma: float, key, base: int, noise=None) -> None:
    """Every member of a generation into the rows of ``out`` (popsize, dim): the pairs'
    noise made once for both rows, the same bits as :func:`perturb` of each member; and
    into ``noise`` (popsize / 2, dim) float32 when given, for the update of the generation.

    Example::

        rows = np.empty((30, dim), np.float32); members(rows, mean, 1e-3, key, 1)
    """
    _members(out, _NO_NOISE if noise is None else noise, mean, np.float64(sigma), np.uint64(base),
             np.int64(pair_stride(out.shape[1])), *_key(key))


def combine(out: np.ndarray, coeffs: np.ndarray, key, base: int, *, stride: int, start: int = 0) -> None:
    """``out[:] = sum_j coeffs[j] * z_j[start : start + len(out)]`` (float64, pairs in order).

    Example::

        g = np.empty(dim); combine(g, np.array([0.5, -0.5]), key, 1, stride=pair_stride(dim))
    """
    args = _args(coeffs, key, base, stride, start)
    _combine(out, args[0], *args[2:])          # no hyper-parameters


def adam_update(mean, m, v, coeffs, key, base: int, *, stride: int, start: int, decay: float, lr: float,
                beta1: float, beta2: float, eps: float, step: int | None, noise=None, sums=None) -> None:
    """One Adam step in place on genes ``start ..`` of ``mean`` (``m``, ``v`` the same
    genes): gradient ``-sum_j coeffs[j] z_j + decay * mean``, bias-corrected for ``step``
    (None: no bias correction). ``noise``: the generation's noise kept by :func:`members`
    (the same bits as drawing it again from the key), else None. ``sums``: ``sum_j c_j
    z_j`` made already (:func:`mpievo.kernels.es_lowrank.lowrank_sums`), which then stands for
    the noise.

    Example::

        adam_update(mean, m, v, coeffs, key, 1, stride=stride, start=0, decay=0.0, lr=0.01,
                    beta1=0.9, beta2=0.999, eps=1e-8, step=1)
    """
    fix1, fix2 = (1.0, 1.0) if step is None else (1.0 - beta1 ** step, 1.0 - beta2 ** step)
    args = _args(coeffs, key, base, stride, start, decay, lr, beta1, beta2, eps, fix1, fix2, 0.0)
    _step(mean, m, v, args[0], _noise(noise, start), _sums(sums), *args[1:])


def sgd_update(mean, m, coeffs, key, base: int, *, stride: int, start: int, decay: float, lr: float,
               momentum: float, noise=None, sums=None) -> None:
    """One SGD-with-momentum step in place (``m`` the velocity; empty: the plain step, no
    velocity kept), gradient as :func:`adam_update`.

    Example::

        sgd_update(mean, m, coeffs, key, 1, stride=stride, start=0, decay=0.0, lr=0.01, momentum=0.9)
    """
    args = _args(coeffs, key, base, stride, start, decay, lr, 0.0, 0.0, 0.0, 1.0, 1.0, momentum)
    _step(mean, m, m[:0], args[0], _noise(noise, start), _sums(sums), *args[1:])
