"""One compiled DE generation (host, Numba): jDE's and SHADE's trial vectors, and their
selection, each in one dispatch.

:func:`jde_trials` and :func:`shade_trials` draw every trial's parameters and partners
and build it -- mutant, binomial crossover, box -- in one pass over its row, with every
random number computed from the counter-based generator of :mod:`.random` where it is
used (no numpy generator, no draw buffers). :func:`jde_select` and :func:`shade_select`
are the selections after evaluation (SHADE's also files the beaten parents in its
external archive).

Random mapping of a generation of ``n`` trials of ``dim`` genes (``base``: the first
block the caller took from its stream; ``u = w * 2**-32`` for a word ``w``, an integer in
``[0, m)`` is ``(w * m) >> 32``):

* trial ``i``'s own blocks ``base + 2i`` and ``base + 2i + 1``, words 0-7:

  - jDE: 0 renew F (``u < tau_f``), 1 the new F (``0.1 + 0.9 u``), 2 renew CR
    (``u < tau_cr``), 3 the new CR (``u``), 4 ``j_rand``, 5-7 the partners r1, r2, r3;
  - SHADE: 0 the memory slot, 1 and 2 CR's normal, 3 F (the Cauchy truncated to
    ``F > 0``, by inversion of ``(w + 1/2) * 2**-32``), 4 ``j_rand``, 5 the p-best rank,
    6 r1, 7 r2;

* crossover: gene ``g`` of trial ``i`` takes the 16-bit half ``g % 2`` of word
  ``(g // 2) % 4`` of block ``base + 2n + i * ceil(dim / 8) + g // 8``; it comes from the
  mutant when that half over ``2**16`` is below CR, or when ``g == j_rand`` (so CR acts
  in steps of ``2**-16``);
* after those ``2n + n * ceil(dim / 8)`` blocks, at ``tail``: jDE's ``resample`` box
  takes gene ``g``'s uniform from word ``g % 4`` of block ``tail + i * ceil(dim / 4) + g // 4``;
  SHADE's external-archive key ``k`` (of ``|A| + n``) is word ``k % 4`` of block
  ``tail + k // 4``.

Partners are distinct and never the trial's own index: the ``k``-th is uniform over the
indices left, drawn as an integer below their count and then stepped past the excluded
ones in increasing order. The caller takes :func:`jde_blocks` or :func:`shade_blocks`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .operators import BOUND_RESAMPLE, _bound_value, _copy_row, kth_smallest
from .random import block, normal_pair

_JIT = dict(nogil=True, cache=True)
_U = np.uint64
_TWO_M32 = 2.0 ** -32
_HALF_WORD = 65536.0
F_LOWER, F_SPAN = 0.1, 0.9   # jDE's F renewal: U(0.1, 1.0)
SCALE = 0.1                  # SHADE's spread of F (Cauchy) and CR (normal)


def _cross_blocks(n: int, dim: int) -> int:
    return 2 * n + n * ((dim + 7) // 8)


def jde_blocks(n: int, dim: int) -> int:
    """Blocks one :func:`jde_trials` of ``n`` trials takes (resample included)."""
    return _cross_blocks(n, dim) + n * ((dim + 3) // 4)


def shade_blocks(n: int, dim: int, archived: int) -> int:
    """Blocks one :func:`shade_trials` of ``n`` trials with ``archived`` genomes in A takes."""
    return _cross_blocks(n, dim) + (archived + n + 3) // 4


@numba.njit(inline="always")
def _below(w, m):
    return np.int64((_U(w) * _U(m)) >> _U(32))


@numba.njit(inline="always")
def _past(r, a, b):
    """``r`` stepped past the excluded ``a`` and ``b`` (distinct) in increasing order."""
    if r >= min(a, b):
        r += 1
    if r >= max(a, b):
        r += 1
    return r


@numba.njit(inline="always")
def _own_words(key, base, i):
    a0, a1, a2, a3 = block(base + _U(2 * i), key[0], key[1], key[2], key[3])
    b0, b1, b2, b3 = block(base + _U(2 * i + 1), key[0], key[1], key[2], key[3])
    return a0, a1, a2, a3, b0, b1, b2, b3


@numba.njit(inline="always")
def _pick(trial, x, i, g, half, threshold, j_rand):
    mutant = trial[i, g]
    parent = x[i, g]
    trial[i, g] = mutant if (half < threshold) | (g == j_rand) else parent


@numba.njit(inline="always")
def _cross(trial, x, i, cr, j_rand, key, row):
    """Binomial crossover of row ``i``: gene ``g`` keeps the mutant in ``trial`` when its
    16-bit half-word is below ``cr * 2**16`` or ``g == j_rand``, else takes the parent's
    (selects, not branches: CR near 0.5 would mispredict every other gene)."""
    dim = trial.shape[1]
    threshold = _U(math.ceil(cr * _HALF_WORD))   # half < cr * 2**16  <=>  half < ceil(...)
    mask = _U(0xFFFF)
    for o in range((dim + 7) // 8):
        w0, w1, w2, w3 = block(row + _U(o), key[0], key[1], key[2], key[3])
        g = 8 * o
        if g + 8 <= dim:
            _pick(trial, x, i, g, w0 & mask, threshold, j_rand)
            _pick(trial, x, i, g + 1, w0 >> _U(16), threshold, j_rand)
            _pick(trial, x, i, g + 2, w1 & mask, threshold, j_rand)
            _pick(trial, x, i, g + 3, w1 >> _U(16), threshold, j_rand)
            _pick(trial, x, i, g + 4, w2 & mask, threshold, j_rand)
            _pick(trial, x, i, g + 5, w2 >> _U(16), threshold, j_rand)
            _pick(trial, x, i, g + 6, w3 & mask, threshold, j_rand)
            _pick(trial, x, i, g + 7, w3 >> _U(16), threshold, j_rand)
        else:
            words = (w0, w1, w2, w3)
            for k in range(dim - g):
                _pick(trial, x, i, g + k, (words[k >> 1] >> _U(16 * (k & 1))) & mask, threshold, j_rand)


@numba.njit(**_JIT)
def jde_trials(x, f_scale, cr, tau_f, tau_cr, lower, upper, mode, key, base, trial, trial_f, trial_cr):
    """jDE's trials (DE/rand/1/bin) of a generation, in place.

    Args:
        x: (n, dim) the population (inside the box); f_scale, cr: (n,) its F and CR.
        tau_f, tau_cr: renewal probabilities of F and CR.
        lower, upper: contiguous (dim,) box, x's dtype; mode: box mode (operators' codes).
        key, base: stream key (four uint64) and first block (module docstring).
        trial: (n, dim) out; trial_f, trial_cr: (n,) out, each trial's F and CR.
    """
    n, dim = x.shape
    cross_base = base + _U(2 * n)
    octs = (dim + 7) // 8
    tail = cross_base + _U(n * octs)
    quads = (dim + 3) // 4
    for i in range(n):
        w0, w1, w2, w3, w4, w5, w6, w7 = _own_words(key, base, i)
        f = F_LOWER + F_SPAN * (w1 * _TWO_M32) if w0 * _TWO_M32 < tau_f else f_scale[i]
        c = w3 * _TWO_M32 if w2 * _TWO_M32 < tau_cr else cr[i]
        trial_f[i], trial_cr[i] = f, c
        j_rand = _below(w4, dim)
        r1 = _below(w5, n - 1)
        r1 += r1 >= i
        r2 = _past(_below(w6, n - 2), i, r1)
        lo, mid, hi = min(i, r1, r2), max(min(i, r1), min(max(i, r1), r2)), max(i, r1, r2)
        r3 = _below(w7, n - 3)
        r3 += r3 >= lo
        r3 += r3 >= mid
        r3 += r3 >= hi
        fx = x.dtype.type(f)
        for g in range(dim):   # the mutant, then the crossover's choices (both branch-free)
            trial[i, g] = x[r1, g] + fx * (x[r2, g] - x[r3, g])
        _cross(trial, x, i, c, j_rand, key, cross_base + _U(i * octs))
        for g in range(dim):
            v = trial[i, g]
            if not (v >= lower[g] and v <= upper[g]):
                u = 0.0
                if mode == BOUND_RESAMPLE:
                    u = block(tail + _U(i * quads + (g >> 2)), key[0], key[1], key[2], key[3])[g & 3] * _TWO_M32
                trial[i, g] = _bound_value(v, lower[g], upper[g], mode, u)


@numba.njit(**_JIT)
def jde_select(trial, trial_fitness, trial_f, trial_cr, x, fitness, f_scale, cr):
    """Each trial replaces its target when not worse, and then keeps its F and CR."""
    for i in range(x.shape[0]):
        if trial_fitness[i] <= fitness[i]:
            _copy_row(trial, i, x, i)
            fitness[i] = trial_fitness[i]
            f_scale[i] = trial_f[i]
            cr[i] = trial_cr[i]


@numba.njit(inline="always")
def truncated_cauchy(loc, w):
    """``Cauchy(loc, SCALE)`` given ``> 0`` (redrawing while <= 0 has this law), truncated
    to 1 above, from the word ``w`` by inversion of the distribution function."""
    below_zero = 0.5 - math.atan(loc / SCALE) / math.pi
    u = below_zero + (1.0 - below_zero) * ((w + 0.5) * _TWO_M32)
    f = loc + SCALE * math.tan(math.pi * (u - 0.5))
    # positive for every word (u > below_zero by at least 2**-33 of the rest); the floor only
    # guards against rounding
    return min(max(f, 1e-300), 1.0)


@numba.njit(**_JIT)
def shade_trials(x, external, archived, best, memory_f, memory_cr, lower, upper, key, base,
                 trial, trial_f, trial_cr, keys):
    """SHADE's trials (current-to-pbest/1/bin with the external archive) of a generation.

    Args:
        x: (n, dim) the population; external: rows of A, the first ``archived`` in use.
        best: int64 indices of the ``max(2, round(p n))`` best members (p-best candidates).
        memory_f, memory_cr: (H,) the success-history memories.
        lower, upper: contiguous (dim,) box, x's dtype.
        key, base: stream key (four uint64) and first block (module docstring).
        trial: (n, dim) out; trial_f, trial_cr: (n,) out; keys: (archived + n,) out,
            the uniform keys that decide which genomes stay in A (:func:`shade_select`).
    """
    n, dim = x.shape
    memory = memory_f.shape[0]
    cross_base = base + _U(2 * n)
    octs = (dim + 7) // 8
    tail = cross_base + _U(n * octs)
    for k in range(keys.shape[0]):
        keys[k] = block(tail + _U(k >> 2), key[0], key[1], key[2], key[3])[k & 3] * _TWO_M32
    for i in range(n):
        w0, w1, w2, w3, w4, w5, w6, w7 = _own_words(key, base, i)
        slot = _below(w0, memory)
        z, _ = normal_pair(w1, w2)
        c = min(max(memory_cr[slot] + SCALE * np.float64(z), 0.0), 1.0)
        f = truncated_cauchy(memory_f[slot], w3)
        trial_f[i], trial_cr[i] = f, c
        j_rand = _below(w4, dim)
        pbest = best[_below(w5, best.shape[0])]
        r1 = _below(w6, n - 1)
        r1 += r1 >= i
        r2 = _past(_below(w7, n + archived - 2), i, r1)
        fx = x.dtype.type(f)
        half = x.dtype.type(0.5)
        for g in range(dim):
            parent = x[i, g]
            other = x[r2, g] if r2 < n else external[r2 - n, g]
            trial[i, g] = parent + fx * (x[pbest, g] - parent) + fx * (x[r1, g] - other)
        _cross(trial, x, i, c, j_rand, key, cross_base + _U(i * octs))
        for g in range(dim):
            # the paper's box rule: halfway between the parent's gene and the violated bound
            v = trial[i, g]
            if v < lower[g]:
                trial[i, g] = (lower[g] + x[i, g]) * half
            elif v > upper[g]:
                trial[i, g] = (upper[g] + x[i, g]) * half
            elif not (v == v):
                trial[i, g] = lower[g]


@numba.njit(**_JIT)
def memory_update(f, cr, gains, count):
    """SHADE's new memory entries from the first ``count`` successes: with weights
    ``w = d / sum(d)`` of the improvements ``d``, the weighted Lehmer mean
    ``sum(w F^2) / sum(w F)`` of F and the weighted mean ``sum(w CR)`` of CR."""
    total = weighted_f = weighted_f2 = weighted_cr = 0.0
    for k in range(count):
        total += gains[k]
        weighted_f += gains[k] * f[k]
        weighted_f2 += gains[k] * f[k] * f[k]
        weighted_cr += gains[k] * cr[k]
    return weighted_f2 / weighted_f, weighted_cr / total


@numba.njit(**_JIT)
def shade_select(trial, trial_fitness, trial_f, trial_cr, keys, x, fitness, external, archived, capacity,
                 success_f, success_cr, gains):
    """SHADE's selection: a trial replaces its parent when not worse; strictly beaten
    parents are candidates for A, of which (with A's members) those with the smallest
    ``keys`` stay while more than ``capacity`` compete (a uniform subset; A's row order
    is not kept: partners are drawn uniformly from it).

    Writes the successes with a finite gain (F, CR, ``f(parent) - f(trial)``) to the
    front of ``success_f``, ``success_cr``, ``gains`` (each (n,)).

    Returns:
        (successes written, rows of A in use after the selection); ``external`` must hold
        ``min(capacity, archived + n)`` rows or more.
    """
    n = x.shape[0]
    candidates = 0
    for i in range(n):
        candidates += trial_fitness[i] < fitness[i]
    total = archived + candidates
    cut, ties = np.inf, 0
    if total > capacity:   # the capacity-th smallest key among the candidates
        scratch = np.empty(total)
        j = 0
        for k in range(archived):
            scratch[j] = keys[k]
            j += 1
        for i in range(n):
            if trial_fitness[i] < fitness[i]:
                scratch[j] = keys[archived + i]
                j += 1
        if capacity > 0:
            cut = kth_smallest(scratch, capacity - 1)
            below = 0
            for k in range(archived):
                below += keys[k] < cut
            for i in range(n):
                below += trial_fitness[i] < fitness[i] and keys[archived + i] < cut
            ties = capacity - below
        else:
            cut = -1.0
    # members of A that leave free their rows; kept losers fill those, then append
    free = np.empty(archived, np.int64)
    freed = 0
    for k in range(archived):
        stays = keys[k] < cut or (keys[k] == cut and ties > 0)
        if keys[k] == cut and stays:
            ties -= 1
        if not stays:
            free[freed] = k
            freed += 1
    used, filled, succeeded = archived, 0, 0
    for i in range(n):
        if not trial_fitness[i] < fitness[i]:
            if trial_fitness[i] <= fitness[i]:   # equal: replaces, no success
                _copy_row(trial, i, x, i)
            continue
        k = keys[archived + i]
        stays = k < cut or (k == cut and ties > 0)
        if k == cut and stays:
            ties -= 1
        if stays:
            if filled < freed:
                _copy_row(x, i, external, free[filled])
                filled += 1
            else:
                _copy_row(x, i, external, used)
                used += 1
        gain = fitness[i] - trial_fitness[i]
        if math.isfinite(gain):
            success_f[succeeded], success_cr[succeeded], gains[succeeded] = trial_f[i], trial_cr[i], gain
            succeeded += 1
        _copy_row(trial, i, x, i)
        fitness[i] = trial_fitness[i]
    # rows freed and not refilled: move the last rows in use into them
    holes = free[filled:freed]
    for h in range(holes.shape[0] - 1, -1, -1):
        used -= 1
        if holes[h] != used:
            _copy_row(external, used, external, holes[h])
    return succeeded, used
