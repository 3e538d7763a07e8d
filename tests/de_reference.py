"""numpy replays of the compiled DE steps' documented random mapping
(:mod:`mpievo.kernels.de_step`): the tests check the kernels against these, and the
draws' laws (distinct partners, the crossover rate) on these."""

from __future__ import annotations

import math

import numpy as np

from mpievo.kernels.random import normals, words

_U = np.uint64


def _below(w, m) -> np.ndarray:
    return ((np.asarray(w, np.uint64) * _U(m)) >> _U(32)).astype(np.int64)


def _past(r: np.ndarray, *excluded: np.ndarray) -> np.ndarray:
    """``r`` stepped past the excluded indices in increasing order."""
    for e in np.sort(np.stack(excluded), axis=0):
        r = r + (r >= e)
    return r


def own_words(key, base: int, n: int) -> np.ndarray:
    """(n, 8) the words of each trial's own two blocks."""
    return words(key, base, 2 * n).astype(np.uint64).reshape(n, 8)


def cross_mask(key, base: int, n: int, dim: int, cr: np.ndarray, j_rand: np.ndarray) -> np.ndarray:
    """(n, dim) True where the trial takes the mutant's gene."""
    octs = (dim + 7) // 8
    w = words(key, base + 2 * n, n * octs).reshape(n, octs * 4)
    halves = np.stack([w & 0xFFFF, w >> 16], axis=-1).reshape(n, octs * 8)[:, :dim]
    mask = halves / 65536.0 < cr[:, None]
    mask[np.arange(n), j_rand] = True
    return mask


def partner_draws(n: int, pool: int, base) -> tuple[np.ndarray, np.ndarray]:
    """SHADE's r1 (a member other than i) and r2 (of the pool, other than i and r1)."""
    w = own_words((1, 2, 3, 4), int(base), n)
    i = np.arange(n)
    r1 = _past(_below(w[:, 6], n - 1), i)
    return r1, _past(_below(w[:, 7], pool - 2), i, r1)


def jde_reference(x, f_scale, cr, tau_f, tau_cr, lower, upper, key, base, resample=False) -> dict:
    """jDE's trials of a generation as the mapping says (box: clip, or resample)."""
    n, dim = x.shape
    w = own_words(key, base, n)
    u = w * 2.0 ** -32
    f = np.where(u[:, 0] < tau_f, 0.1 + 0.9 * u[:, 1], f_scale)
    c = np.where(u[:, 2] < tau_cr, u[:, 3], cr)
    j_rand = _below(w[:, 4], dim)
    i = np.arange(n)
    r1 = _past(_below(w[:, 5], n - 1), i)
    r2 = _past(_below(w[:, 6], n - 2), i, r1)
    r3 = _past(_below(w[:, 7], n - 3), i, r1, r2)
    mutant = x[r1] + f.astype(x.dtype)[:, None] * (x[r2] - x[r3])
    cross = cross_mask(key, base, n, dim, c, j_rand)
    trial = np.where(cross, mutant, x)
    outside = ~((trial >= lower) & (trial <= upper))
    if resample:
        tail = base + 2 * n + n * ((dim + 7) // 8)
        quads = (dim + 3) // 4
        uniforms = words(key, tail, n * quads).reshape(n, quads * 4)[:, :dim] * 2.0 ** -32
        trial = np.where(outside, lower + uniforms * (upper - lower), trial).astype(x.dtype)
    else:
        trial = np.clip(trial, lower, upper)
    return {"f": f, "cr": c, "partners": np.stack([r1, r2, r3], axis=1), "cross": cross, "outside": outside,
            "trial": trial}


def truncated_cauchy(loc: float, w: int) -> float:
    below_zero = 0.5 - math.atan(loc / 0.1) / math.pi
    u = below_zero + (1.0 - below_zero) * ((w + 0.5) * 2.0 ** -32)
    return min(max(loc + 0.1 * math.tan(math.pi * (u - 0.5)), 1e-300), 1.0)


def shade_reference(x, external, fitness, memory_f, memory_cr, pbest, lower, upper, key, base) -> dict:
    """SHADE's trials of a generation (current-to-pbest/1/bin, the midpoint box rule)."""
    n, dim = x.shape
    archived = len(external)
    w = own_words(key, base, n)
    slot = _below(w[:, 0], len(memory_f))
    z = normals(key, base, 2 * n)[::2, 0].astype(np.float64)
    c = np.clip(memory_cr[slot] + 0.1 * z, 0.0, 1.0)
    f = np.array([truncated_cauchy(memory_f[s], int(v)) for s, v in zip(slot, w[:, 3])])
    j_rand = _below(w[:, 4], dim)
    top = np.argsort(fitness, kind="stable")[:max(2, int(np.rint(pbest * n)))]
    best = top[_below(w[:, 5], len(top))]
    i = np.arange(n)
    r1 = _past(_below(w[:, 6], n - 1), i)
    r2 = _past(_below(w[:, 7], n + archived - 2), i, r1)
    pool = np.concatenate([x, external])
    step = f.astype(x.dtype)[:, None]
    mutant = x + step * (x[best] - x) + step * (x[r1] - pool[r2])
    cross = cross_mask(key, base, n, dim, c, j_rand)
    trial = np.where(cross, mutant, x)
    trial = np.where(trial < lower, (lower + x) * x.dtype.type(0.5),
                     np.where(trial > upper, (upper + x) * x.dtype.type(0.5), trial)).astype(x.dtype)
    tail = base + 2 * n + n * ((dim + 7) // 8)
    keys = words(key, tail, (archived + n + 3) // 4).reshape(-1)[:archived + n] * 2.0 ** -32
    return {"f": f, "cr": c, "r2": r2, "cross": cross, "mutant": np.where(cross, mutant, x), "trial": trial,
            "keys": keys}
