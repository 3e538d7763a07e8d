"""One compiled GA generation (host, Numba): selection, draws, breeding, step-size rule.

:func:`breed_generation` picks both parents of every child by tournament, draws its
interpolation weight and (self-adaptation) its step size, and breeds it -- crossover,
mutation and box in one pass over the child's row -- in a single dispatch, with every
random number computed from the counter-based generator of :mod:`.random` where it is
used: no numpy generator calls, no draw buffers.
:func:`adapt_step` is the step-size rule after evaluation, also one dispatch.
:func:`~.operators.kth_smallest` finds the median (as it does the archive merge's
threshold): quick to compile, unlike ``np.partition`` in Numba.

Random mapping of a generation of ``n`` children (``base`` the first block the caller
took from its stream, ``M = mutation_span(n, dim, mode, dense)``):

* mutation, blocks ``base .. base + M - 1``. Sparse (rate below ``DENSE_RATE``):
  geometric gaps, the ``j``-th mutated gene of child ``c`` from block
  ``base + c * (dim + 1) + j`` -- word 0 the gap ``floor(ln u / ln(1 - rate))``,
  words 1 and 2 its normal, word 3 its resample uniform -- one block per mutated gene.
  Dense: the mask words of :func:`.counter_operators.vary` (same mapping, so the
  children equal ``vary``'s given the same parents, weights and steps);
* child ``c``'s own blocks ``base + M + c * child_blocks(size) + j``: ``j = 0``, word 0
  its interpolation weight (``w * 2**-32``), words 1 and 2 a normal for its step
  (self-adaptation); ``j >= 1``, the ``2 * size`` tournament contestants, parent a's
  then parent b's, four words a block; contestant ``r = (w * m) >> 32`` of the ``m``
  members eligible (bias below ``m / 2**32``).

The caller takes :func:`generation_blocks` blocks.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import register_jitable

from .counter_operators import TILE, _mutate_dense, mutation_blocks
from .operators import BOUND_CLIP, _bound_value, kth_smallest
from .random import block, log_unit, normal_pair

_JIT = dict(nogil=True, cache=True)
_U = np.uint64
_TWO_M32 = 2.0 ** -32
SIGMA_MIN, SIGMA_MAX = 1e-30, 1.0
#: the success rule: sigma *= exp(SUCCESS_RATE * (p - SUCCESS_TARGET))
SUCCESS_TARGET, SUCCESS_RATE = 0.2, 0.5


@register_jitable
def mutation_span(n: int, dim: int, mode: int, dense: bool) -> int:
    """Blocks of the mutation of ``n`` children (dense: vary's; sparse: dim + 1 each)."""
    return mutation_blocks(n, dim, mode) if dense else n * (dim + 1)


@register_jitable
def child_blocks(tournament: int) -> int:
    """Counter blocks of one child's own draws (weight, step, 2 * ``tournament`` contestants)."""
    return 1 + (2 * tournament + 3) // 4


def generation_blocks(n: int, dim: int, mode: int, dense: bool, tournament: int) -> int:
    """Blocks one :func:`breed_generation` of ``n`` children of ``dim`` genes takes."""
    return mutation_span(n, dim, mode, dense) + n * child_blocks(tournament)


@numba.njit(nogil=True)
def _tournament(fitness, pool, m, size, key, row, first):
    """Winner (a member slot) of the tournament of contestant words ``first ..
    first + size - 1`` of the child's blocks from ``row + 1``; ties: the first drawn."""
    winner = -1
    best = np.inf
    for t in range(first, first + size):
        words = block(row + _U(1 + (t >> 2)), key[0], key[1], key[2], key[3])
        r = np.int64((_U(words[t & 3]) * _U(m)) >> _U(32))
        slot = pool[r] if pool.shape[0] else r
        if winner < 0 or fitness[slot] < best:
            winner = slot
            best = fitness[slot]
    return winner


@numba.njit(nogil=True)
def _interpolate_row(genomes, a, b, w, out, c, lower, upper, uniform):
    """``out[c] = clip(G[b] + w (G[a] - G[b]))``; a uniform box as two scalars, so the
    loop reads two rows instead of four."""
    ga = genomes[a]
    gb = genomes[b]
    x = out[c]
    if uniform:
        lo = lower[0]
        hi = upper[0]
        for g in range(x.shape[0]):
            x[g] = min(max(gb[g] + w * (ga[g] - gb[g]), lo), hi)
    else:
        for g in range(x.shape[0]):
            x[g] = min(max(gb[g] + w * (ga[g] - gb[g]), lower[g]), upper[g])


@numba.njit(nogil=True)
def _mutate_gaps(out, c, step, scale, lower, upper, mode, inv_log_q, key, row):
    """Geometric-gap mutation of child ``c``: its ``j``-th mutated gene takes block
    ``row + j`` (word 0 the gap, words 1, 2 the normal, word 3 a resample uniform);
    returns how many genes mutated."""
    dim = out.shape[1]
    g = 0
    j = 0
    while True:
        w0, w1, w2, w3 = block(row + _U(j), key[0], key[1], key[2], key[3])
        gap = np.float64(log_unit(w0)) * inv_log_q
        if gap >= dim - g:
            return j
        g += int(gap)
        z, _ = normal_pair(w1, w2)
        v = out[c, g] + step * scale[g] * z
        if mode == BOUND_CLIP:
            out[c, g] = min(max(v, lower[g]), upper[g])
        else:
            out[c, g] = _bound_value(v, lower[g], upper[g], mode, np.float64(w3) * _TWO_M32)
        g += 1
        j += 1


@numba.njit(nogil=True)
def _draw(fitness, pool, tournament, omega, sigma, tau, key, own, idx_a, idx_b, omegas, steps):
    m = pool.shape[0] if pool.shape[0] else fitness.shape[0]
    per_child = child_blocks(tournament)
    for c in range(idx_a.shape[0]):
        row = own + _U(c * per_child)
        w0, w1, w2, _ = block(row, key[0], key[1], key[2], key[3])
        omegas[c] = np.float64(w0) * _TWO_M32 if omega < 0 else omega
        if tau > 0:
            z, _ = normal_pair(w1, w2)
            steps[c] = sigma * math.exp(tau * np.float64(z))
        else:
            steps[c] = sigma
        idx_a[c] = _tournament(fitness, pool, m, tournament, key, row, 0)
        idx_b[c] = _tournament(fitness, pool, m, tournament, key, row, tournament)


@numba.njit(nogil=True)
def _breed_dense(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, mode, threshold, key, base, out,
                 counts):
    """Crossover and dense mutation: vary's mask words, tile by tile."""
    n, dim = out.shape
    pairs = (dim + 1) // 2
    flags = np.empty(TILE // 2, np.uint32)
    for c in range(n):
        total = 0
        for g0 in range(0, dim, TILE):
            g1 = min(g0 + TILE, dim)
            total += _mutate_dense(out, c, g0, g1, steps[c], scale, lower, upper, mode, threshold,
                                   key, base, pairs, flags, genomes[idx_a[c], g0:g1],
                                   genomes[idx_b[c], g0:g1], omegas[c], True)
        counts[c] = total


@numba.njit(nogil=True)
def _breed_sparse(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, uniform, mode, threshold, inv_log_q,
                  key, base, out, counts):
    """Interpolation, then sparse mutation by geometric gaps."""
    n, dim = out.shape
    for c in range(n):
        _interpolate_row(genomes, idx_a[c], idx_b[c], omegas[c], out, c, lower, upper, uniform)
        counts[c] = 0 if threshold == 0 else _mutate_gaps(
            out, c, steps[c], scale, lower, upper, mode, inv_log_q, key, base + _U(c * (dim + 1)))


# One compiled entry per mutation path: each compiles only its own (the dense path alone
# takes most of a cold compile, and a configuration uses one of them).

@numba.njit(**_JIT)
def generation_dense(genomes, fitness, pool, tournament, omega, sigma, tau, lower, upper, scale, mode, threshold,
                     key, base, idx_a, idx_b, omegas, steps, out, counts):
    """:func:`breed_generation` with dense mutation."""
    n, dim = out.shape
    _draw(fitness, pool, tournament, omega, sigma, tau, key, base + _U(mutation_span(n, dim, mode, True)),
          idx_a, idx_b, omegas, steps)
    _breed_dense(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, mode, threshold, key, base, out, counts)


@numba.njit(**_JIT)
def generation_sparse(genomes, fitness, pool, tournament, omega, sigma, tau, lower, upper, scale, uniform, mode,
                      threshold, inv_log_q, key, base, idx_a, idx_b, omegas, steps, out, counts):
    """:func:`breed_generation` with sparse mutation."""
    n, dim = out.shape
    _draw(fitness, pool, tournament, omega, sigma, tau, key, base + _U(mutation_span(n, dim, mode, False)),
          idx_a, idx_b, omegas, steps)
    _breed_sparse(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, uniform, mode, threshold, inv_log_q,
                  key, base, out, counts)


@numba.njit(**_JIT)
def children_dense(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, mode, threshold, key, base, out,
                   counts):
    """:func:`breed_children` with dense mutation."""
    _breed_dense(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, mode, threshold, key, base, out, counts)


@numba.njit(**_JIT)
def children_sparse(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, uniform, mode, threshold, inv_log_q,
                    key, base, out, counts):
    """:func:`breed_children` with sparse mutation."""
    _breed_sparse(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, uniform, mode, threshold, inv_log_q,
                  key, base, out, counts)


def breed_generation(genomes, fitness, pool, tournament, omega, sigma, tau, lower, upper, scale, uniform,
                     mode, threshold, inv_log_q, dense, key, base, idx_a, idx_b, omegas, steps, out, counts):
    """Select, draw and breed the ``n = out.shape[0]`` children of a generation in place:
    :func:`draw_children` then :func:`breed_children`, in one dispatch (of
    :func:`generation_dense` or :func:`generation_sparse`).

    Args:
        genomes, fitness: the members (rows and fitness, no NaN).
        pool: int64 slots parents may come from; empty: every member.
        tournament: contestants per parent (1: uniform selection).
        omega: fixed interpolation weight, or < 0 for a uniform one per child.
        sigma: step size of every child; tau > 0: ``sigma * exp(tau * N(0, 1))`` each.
        lower, upper, scale: contiguous (dim,) box and gene scale, genome dtype;
            ``uniform``: every gene has the box of gene 0.
        mode, threshold, inv_log_q, dense: mutation as in :func:`.counter_operators.vary`
            (box mode, dense mask threshold, ``1 / log1p(-rate)`` of sparse gaps).
        key, base: stream key (four uint64) and first block (see the module docstring).
        idx_a, idx_b (int64), omegas, steps (genome dtype): (n,) out, each child's draws.
        out: (n, dim) children; counts: (n,) int64 out, genes mutated per child.
    """
    if dense:
        generation_dense(genomes, fitness, pool, tournament, omega, sigma, tau, lower, upper, scale, mode, threshold,
                         key, base, idx_a, idx_b, omegas, steps, out, counts)
    else:
        generation_sparse(genomes, fitness, pool, tournament, omega, sigma, tau, lower, upper, scale, uniform, mode,
                          threshold, inv_log_q, key, base, idx_a, idx_b, omegas, steps, out, counts)


@numba.njit(**_JIT)
def draw_children(fitness, pool, tournament, omega, sigma, tau, dim, mode, dense, key, base,
                  idx_a, idx_b, omegas, steps):
    """The first half of :func:`breed_generation` (same arguments): each child's parents,
    weight and step, for a caller that prepares the parents' rows before breeding
    (half-precision archives breed float32 copies of the parents used)."""
    own = base + _U(mutation_span(idx_a.shape[0], dim, mode, dense))
    _draw(fitness, pool, tournament, omega, sigma, tau, key, own, idx_a, idx_b, omegas, steps)


def breed_children(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, uniform, mode, threshold,
                   inv_log_q, dense, key, base, out, counts):
    """The second half of :func:`breed_generation`: breed from :func:`draw_children`'s draws."""
    if dense:
        children_dense(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, mode, threshold, key, base, out,
                       counts)
    else:
        children_sparse(genomes, idx_a, idx_b, omegas, steps, lower, upper, scale, uniform, mode, threshold,
                        inv_log_q, key, base, out, counts)


@numba.njit(**_JIT)
def adapt_step(fitness, counts, steps, members, sigma, self_adapt):
    """The step-size rule after a generation (see :mod:`mpievo.evo.algorithms.ga`).

    Args:
        fitness: (n,) the children's fitness (no NaN); counts: (n,) genes mutated;
            steps: (n,) their step sizes (self-adaptation).
        members: fitness of the breeding members (not modified).
        sigma: the current step size; self_adapt: mutative self-adaptation, else
            the success rule against the members' upper median.

    Returns:
        (new sigma, the members' upper median (inf: none), the best of children and members).
    """
    best = np.inf
    for v in fitness:
        best = min(best, v)
    for v in members:
        best = min(best, v)
    median = kth_smallest(members.copy(), members.shape[0] // 2) if members.shape[0] else np.inf
    mutated = 0
    for c in range(counts.shape[0]):
        mutated += counts[c] > 0
    if mutated == 0:
        return sigma, median, best
    if self_adapt:   # geometric mean of the steps of the best quarter (ties: lower index)
        scratch = np.empty(mutated)
        j = 0
        for c in range(counts.shape[0]):
            if counts[c] > 0:
                scratch[j] = fitness[c]
                j += 1
        k = max(1, mutated // 4)
        cut = kth_smallest(scratch, k - 1)
        below = 0
        for c in range(counts.shape[0]):
            below += counts[c] > 0 and fitness[c] < cut
        ties = k - below
        logs = 0.0
        for c in range(counts.shape[0]):
            if counts[c] > 0 and (fitness[c] < cut or (fitness[c] == cut and ties > 0)):
                ties -= fitness[c] == cut
                logs += math.log(np.float64(steps[c]))
        new = math.exp(logs / k)
    else:
        better = 0
        for c in range(counts.shape[0]):
            better += counts[c] > 0 and fitness[c] < median
        new = sigma * math.exp(SUCCESS_RATE * (better / mutated - SUCCESS_TARGET))
    return min(max(new, SIGMA_MIN), SIGMA_MAX), median, best
