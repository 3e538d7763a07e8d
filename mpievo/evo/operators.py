"""Variation operators: plain callables, vectorised over a whole batch of children.

Every operator takes an explicit ``numpy.random.Generator`` and draws its random
numbers up front, in a documented order, before a kernel of
:mod:`mpievo.kernels.operators` (Numba) or numpy applies them. The fused kernel
:func:`breed` therefore gives exactly the same children as
``interpolate_crossover`` followed by ``gaussian_mutation`` with the same generator,
and a device implementation can reuse the draws with its own kernels.

Genomes are rows of a C-contiguous 2-D array (float32 or float64). The box
``lower``/``upper`` and the per-gene ``scale`` are (dim,) arrays of the genome dtype
(see :func:`box_arrays`).

Parent selection -- ``select(fitness, n, rng, **params) -> (n,) int64 member indices``:
    :func:`uniform_selection`, :func:`tournament_selection`, :func:`rank_selection`.
Crossover -- ``crossover(genomes, idx_a, idx_b, rng, lower, upper, out, **params) -> out``
(child ``i`` from rows ``idx_a[i]`` and ``idx_b[i]``):
    :func:`interpolate_crossover` (``omega*a + (1-omega)*b``, as in model merging),
    :func:`uniform_crossover`, :func:`blend_crossover` (BLX-alpha), :func:`sbx_crossover`.
Mutation -- :func:`gaussian_mutation` (per-gene probability, per-row step size, draws
the number and positions of mutated genes rather than a normal for every gene) and
:func:`self_adapt_steps` (log-normal self-adaptation of the step size).
Box handling -- :func:`apply_bounds` with modes ``clip``, ``reflect``, ``resample``.

Large genomes (``dim >= COUNTER_DIM``, 100,000 genes): the operators that draw per
gene -- mutation (also inside :func:`breed`), uniform, blend and SBX crossover, and
``resample`` box handling -- draw from the counter-based generator instead
(:mod:`mpievo.kernels.counter_operators`): parallel Numba kernels compute each gene's
numbers where they use them, keyed by the generator's stream
(:func:`~mpievo.evo.streams.counter_blocks`), with no draw buffer of genome size.
Same distributions, other numbers: a run at such a size does not repeat a run of
the numpy path. Selection, ``omega``, ``steps`` and the mutation rate still draw from
numpy; interpolation is the same computation in parallel.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from mpievo.kernels import counter_operators as counter_kernels
from mpievo.kernels import operators as kernels
from .streams import counter_blocks

BOUND_MODES = tuple(kernels.BOUND_MODES)
SELECTIONS = ("uniform", "tournament", "rank")
CROSSOVERS = ("interpolate", "uniform", "blend", "sbx")
#: genes per genome from which the per-gene draws come from the counter-based generator
COUNTER_DIM = 100_000
#: mutation rates from which every gene draws its mask word; below, geometric gaps
#: (whose cost grows with the rate: they break even at about 0.045 on a Xeon core)
DENSE_RATE = 0.05


def counter_based(dim: int) -> bool:
    """True when genomes of ``dim`` genes draw from the counter-based generator."""
    return dim >= COUNTER_DIM


def bound_code(mode: str) -> int:
    if mode not in kernels.BOUND_MODES:
        raise ValueError(f"expected bounds mode among {BOUND_MODES}, got {mode!r}")
    return kernels.BOUND_MODES[mode]


def box_arrays(lower, upper, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The box in the genome dtype, rounded inwards so that it stays inside the float64 box.

    A uniform box (both bounds broadcast views of one number, as :class:`~.problems.Problem`
    keeps scalar bounds) stays two broadcast views; bounds already in ``dtype`` are
    returned as they are (rounding them changes nothing): no genome-sized copies."""
    dtype = np.dtype(dtype)
    lower, upper = np.asarray(lower), np.asarray(upper)
    if lower.ndim == 1 and lower.strides == upper.strides == (0,):
        one = box_arrays(np.array(lower[:1]), np.array(upper[:1]), dtype)
        return tuple(np.broadcast_to(a, lower.shape) for a in one)
    if lower.dtype == upper.dtype == dtype and lower.flags.c_contiguous and upper.flags.c_contiguous:
        return lower, upper
    lower64 = np.asarray(lower, np.float64)
    upper64 = np.asarray(upper, np.float64)
    lo = np.array(lower64, dtype=dtype, order="C", ndmin=1)
    hi = np.array(upper64, dtype=dtype, order="C", ndmin=1)
    # in place: the box is as large as a genome
    np.nextafter(lo, dtype.type(np.inf), out=lo, where=lo < lower64)
    np.nextafter(hi, dtype.type(-np.inf), out=hi, where=hi > upper64)
    return lo, hi


def cast_bound(values, dtype) -> np.ndarray:
    """A (dim,) bound or scale in ``dtype``; a broadcast view of one number stays one."""
    values = np.asarray(values)
    if values.ndim == 1 and values.strides == (0,):
        return np.broadcast_to(values[:1].astype(dtype), values.shape)
    return np.ascontiguousarray(values, dtype)


# --- parent selection ------------------------------------------------------------

def uniform_selection(fitness: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` members drawn uniformly with replacement (draws: n integers)."""
    return rng.integers(0, len(fitness), n)


def tournament_selection(fitness: np.ndarray, n: int, rng: np.random.Generator, *,
                         size: int = 2) -> np.ndarray:
    """Winners of ``n`` tournaments of ``size`` members drawn with replacement.

    Ties go to the contestant drawn first. Draws: an (n, size) integer array.
    """
    if size < 1:
        raise ValueError(f"expected tournament size >= 1, got {size}")
    contestants = rng.integers(0, len(fitness), (n, size))
    winner = np.argmin(fitness[contestants], axis=1)
    return contestants[np.arange(n), winner]


def rank_selection(fitness: np.ndarray, n: int, rng: np.random.Generator, *,
                   pressure: float = 1.5) -> np.ndarray:
    """Linear ranking: the best is picked ``pressure`` times as often as the average.

    ``pressure`` in [1, 2] (1 = uniform). Ties ranked by index. Draws: n uniforms.
    """
    if not 1.0 <= pressure <= 2.0:
        raise ValueError(f"expected rank pressure in [1, 2], got {pressure}")
    m = len(fitness)
    order = np.lexsort((np.arange(m), fitness))
    rank = np.arange(m)
    weights = pressure - (2.0 * pressure - 2.0) * rank / max(m - 1, 1)
    cumulative = np.cumsum(weights)
    picks = np.searchsorted(cumulative, rng.random(n) * cumulative[-1], side="right")
    return order[np.minimum(picks, m - 1)]


# --- crossover -------------------------------------------------------------------

def draw_omega(rng: np.random.Generator, n: int, omega: float | None, dtype) -> np.ndarray:
    """Interpolation weights: ``omega`` for every child, or U(0, 1) each when None."""
    if omega is None:
        return rng.random(n, dtype=np.float64).astype(dtype)
    return np.full(n, omega, dtype=dtype)


def _output(out, n, genomes):
    if out is None:
        return np.empty((n, genomes.shape[1]), genomes.dtype)
    if out.shape != (n, genomes.shape[1]) or out.dtype != genomes.dtype or not out.flags.c_contiguous:
        raise ValueError(f"expected out of shape {(n, genomes.shape[1])} and dtype {genomes.dtype}, "
                         f"got {out.shape} {out.dtype}")
    return out


def interpolate_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *,
                          omega: float | None = None) -> np.ndarray:
    """Child ``i = omega_i * a + (1 - omega_i) * b`` (clipped to absorb rounding).

    Args:
        omega: fixed weight in [0, 1], or None for a U(0, 1) weight per child.

    Draws: :func:`draw_omega`.
    """
    out = _output(out, len(idx_a), genomes)
    w = draw_omega(rng, len(idx_a), omega, genomes.dtype)
    if counter_based(genomes.shape[1]):
        # rate 0: interpolation only (scale is not read), no counter block taken
        _counter_vary(out, rng, lower, upper, rate=0.0, steps=0.0, scale=lower, code=kernels.BOUND_CLIP,
                      parents=(genomes, idx_a, idx_b, w))
    else:
        kernels.interpolate_rows(genomes, idx_a, idx_b, w, lower, upper, out)
    return out


def uniform_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *,
                      swap_prob: float = 0.5) -> np.ndarray:
    """Each gene from parent b with probability ``swap_prob``, else from a.

    Draws: an (n, dim) uniform array.
    """
    out = _output(out, len(idx_a), genomes)
    if counter_based(genomes.shape[1]):
        return _counter_cross(genomes, idx_a, idx_b, rng, out, counter_kernels.CROSS_UNIFORM,
                              swap_threshold=counter_kernels.rate_threshold(swap_prob))
    take_b = rng.random(out.shape) < swap_prob
    np.copyto(out, np.where(take_b, genomes[idx_b], genomes[idx_a]))
    return out


def blend_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *,
                    alpha: float = 0.5) -> np.ndarray:
    """BLX-alpha: each gene uniform in the parents' interval widened by ``alpha`` on both sides.

    Children may leave the box: apply :func:`apply_bounds` afterwards.
    Draws: an (n, dim) uniform array.
    """
    out = _output(out, len(idx_a), genomes)
    if counter_based(genomes.shape[1]):
        return _counter_cross(genomes, idx_a, idx_b, rng, out, counter_kernels.CROSS_BLEND, alpha=alpha)
    a, b = genomes[idx_a], genomes[idx_b]
    low = np.minimum(a, b)
    span = np.abs(a - b)
    u = rng.random(out.shape, dtype=np.float64).astype(genomes.dtype)
    np.copyto(out, low - alpha * span + u * ((1 + 2 * alpha) * span))
    return out


def sbx_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *,
                  eta: float = 15.0) -> np.ndarray:
    """Simulated binary crossover (distribution index ``eta``), one child per pair.

    Each gene comes from either of SBX's two children with probability 1/2, so the
    child's mean is the parents' mean. Children may leave the box: apply
    :func:`apply_bounds` afterwards.
    Draws: an (n, dim) uniform array (spread), then an (n, dim) one (which child).
    """
    out = _output(out, len(idx_a), genomes)
    if counter_based(genomes.shape[1]):
        return _counter_cross(genomes, idx_a, idx_b, rng, out, counter_kernels.CROSS_SBX, eta=eta)
    a = genomes[idx_a].astype(np.float64)
    b = genomes[idx_b].astype(np.float64)
    u = rng.random(out.shape)
    power = 1.0 / (eta + 1.0)
    beta = np.where(u <= 0.5, (2.0 * u) ** power, (0.5 / (1.0 - u)) ** power)
    beta = np.where(rng.random(out.shape) < 0.5, beta, -beta)  # -beta gives the second child
    np.copyto(out, 0.5 * ((1.0 + beta) * a + (1.0 - beta) * b), casting="same_kind")
    return out


def key_words(key) -> tuple:
    return tuple(np.uint64(k) for k in key)


def _counter_cross(genomes, idx_a, idx_b, rng, out, kind, *, swap_threshold: int = 0,
                   alpha: float = 0.0, eta: float = 0.0) -> np.ndarray:
    """Counter-based crossover (large genomes), one word per gene."""
    key, base = counter_blocks(rng, counter_kernels.gene_blocks(*out.shape))
    dtype = genomes.dtype.type
    counter_kernels.cross(genomes, idx_a, idx_b, kind, np.uint64(swap_threshold), dtype(alpha),
                          dtype(1 + 2 * alpha), float(eta), key_words(key), np.uint64(base), out)
    return out


# --- mutation --------------------------------------------------------------------

class MutationDraws(NamedTuple):
    """Random numbers of one :func:`gaussian_mutation` call, in draw order."""

    counts: np.ndarray             # (n,) genes mutated per row (binomial)
    pos_uniforms: np.ndarray       # (sum,) positions, float64 (empty when rate >= 1)
    normals: np.ndarray            # (sum,) standard normals, genome dtype
    resample_uniforms: np.ndarray  # (sum,) float64, drawn only for bounds='resample'


def draw_mutation(rng: np.random.Generator, n: int, dim: int, rate: float, dtype,
                  bounds: str) -> MutationDraws:
    """Draw what :func:`gaussian_mutation` needs: a binomial count per row, then
    positions, normals and (resample only) uniforms for each mutated gene.
    """
    _check_rate(rate)
    if rate >= 1.0:
        counts = np.full(n, dim, np.int64)
    else:
        counts = rng.binomial(dim, rate, n).astype(np.int64)
    total = int(counts.sum())
    pos_uniforms = np.empty(0) if rate >= 1.0 else rng.random(total)
    normals = rng.standard_normal(total, dtype=np.dtype(dtype).type)
    resample = rng.random(total) if bounds == "resample" else np.empty(0)
    return MutationDraws(counts, pos_uniforms, normals, resample)


def _check_rate(rate: float) -> None:
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"expected mutation rate in [0, 1], got {rate}")


def steps_array(steps, n, dtype) -> np.ndarray:
    arr = np.asarray(steps, dtype=dtype)
    if arr.ndim == 0:
        return np.full(n, arr, dtype=dtype)
    if arr.shape != (n,):
        raise ValueError(f"expected steps to be a scalar or of shape ({n},), got {arr.shape}")
    return np.ascontiguousarray(arr)


def gaussian_mutation(x: np.ndarray, rng: np.random.Generator, lower, upper, *, rate: float,
                      steps, scale, bounds: str = "clip") -> np.ndarray:
    """Add ``steps[i] * scale[j] * N(0, 1)`` to each gene ``j`` of row ``i`` with probability
    ``rate``, in place; each mutated gene is then put back in the box.

    Args:
        x: (n, dim) genomes, modified in place.
        lower, upper, scale: (dim,) arrays of x's dtype.
        rate: per-gene mutation probability.
        steps: scalar or (n,) step size per row (in units of ``scale``).
        bounds: box mode for mutated genes.

    Returns:
        (n,) number of genes mutated in each row.

    Draws: :func:`draw_mutation` (not a normal per gene: only per mutated gene); large
    genomes: the counter-based generator (see the module docstring).
    """
    code = bound_code(bounds)
    if counter_based(x.shape[1]):
        return _counter_vary(x, rng, lower, upper, rate=rate, steps=steps, scale=scale, code=code)
    draws = draw_mutation(rng, x.shape[0], x.shape[1], rate, x.dtype, bounds)
    kernels.mutate_sparse(x, draws.counts, draws.pos_uniforms, draws.normals,
                          draws.resample_uniforms, steps_array(steps, x.shape[0], x.dtype),
                          scale, lower, upper, code)
    return draws.counts


class VaryPlan(NamedTuple):
    """Random-number plan of one counter-based mutation (see counter_operators.vary)."""

    threshold: int     # round(rate * 2**32): a mask word below it mutates its gene
    inv_log_q: float   # 1 / log1p(-rate), for geometric gaps
    dense: bool        # mask words (True) or geometric gaps
    key: tuple         # stream key (four uint64)
    base: int          # first counter block


def vary_plan(rng: np.random.Generator, n: int, dim: int, rate: float, code: int) -> VaryPlan:
    """Take the counter blocks of a mutation of ``n`` rows of ``dim`` genes from ``rng``
    (none when ``rate`` is 0); host and device kernels share the plan."""
    _check_rate(rate)
    threshold = counter_kernels.rate_threshold(rate)
    inv_log_q = 1.0 / math.log1p(-rate) if 0.0 < rate < 1.0 else 0.0
    key, base = (0, 0, 0, 0), 0
    if threshold:
        key, base = counter_blocks(rng, counter_kernels.mutation_blocks(n, dim, code))
    return VaryPlan(threshold, inv_log_q, rate >= DENSE_RATE, key_words(key), base)


def _counter_vary(x, rng, lower, upper, *, rate, steps, scale, code, parents=None) -> np.ndarray:
    """Counter-based interpolation (``parents = (genomes, idx_a, idx_b, omega)``) and
    mutation of ``x`` in place (large genomes); returns the per-row mutation counts."""
    n, dim = x.shape
    interpolate = parents is not None
    if not interpolate:
        parents = (x, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, x.dtype))
    plan = vary_plan(rng, n, dim, rate, code)
    counts = np.empty(n, np.int64)
    counter_kernels.vary(*parents, interpolate, x, steps_array(steps, n, x.dtype), scale,
                         lower, upper, code, np.uint64(plan.threshold), plan.inv_log_q, plan.dense,
                         plan.key, np.uint64(plan.base), counts)
    return counts


def self_adapt_steps(step, n: int, rng: np.random.Generator, *, tau: float) -> np.ndarray:
    """Children's step sizes ``step * exp(tau * N(0, 1))`` (log-normal self-adaptation).

    Args:
        step: scalar or (n,) parent step sizes.
        tau: learning rate (typically 1/sqrt(2 * genes mutated)).

    Draws: n normals.
    """
    return np.asarray(step, dtype=np.float64) * np.exp(tau * rng.standard_normal(n))


def breed(genomes, idx_a, idx_b, rng, lower, upper, out=None, *, omega: float | None = None,
          rate: float, steps, scale, bounds: str = "clip") -> tuple[np.ndarray, np.ndarray]:
    """Interpolation crossover then Gaussian mutation in one fused kernel.

    Same draws, same children as :func:`interpolate_crossover` followed by
    :func:`gaussian_mutation`.

    Returns:
        (children, per-row number of mutated genes).
    """
    code = bound_code(bounds)
    n = len(idx_a)
    out = _output(out, n, genomes)
    w = draw_omega(rng, n, omega, genomes.dtype)
    if counter_based(genomes.shape[1]):
        counts = _counter_vary(out, rng, lower, upper, rate=rate, steps=steps, scale=scale, code=code,
                               parents=(genomes, idx_a, idx_b, w))
        return out, counts
    draws = draw_mutation(rng, n, genomes.shape[1], rate, genomes.dtype, bounds)
    kernels.breed_interpolate_mutate(
        genomes, idx_a, idx_b, w, draws.counts, draws.pos_uniforms, draws.normals,
        draws.resample_uniforms, steps_array(steps, n, genomes.dtype), scale, lower, upper, code, out)
    return out, draws.counts


# --- box handling ----------------------------------------------------------------

def apply_bounds(x: np.ndarray, lower, upper, rng: np.random.Generator | None = None, *,
                 mode: str = "clip") -> int:
    """Put every gene of ``x`` back into the box, in place.

    Modes: ``clip`` to the nearest bound, ``reflect`` off the bound (folded, so any
    overshoot lands inside), ``resample`` uniformly in the box (needs ``rng``; draws
    one uniform per gene outside, in row-major order). NaN genes go to ``lower``
    (clip/reflect) or are resampled.

    Returns:
        Number of genes that were outside the box.
    """
    code = bound_code(mode)
    if code == kernels.BOUND_RESAMPLE:
        if rng is None:
            raise ValueError("expected a Generator for bounds mode 'resample', got None")
        if counter_based(x.shape[1]):
            key, base = counter_blocks(rng, counter_kernels.gene_blocks(*x.shape))
            return int(counter_kernels.resample_outside(x, lower, upper, key_words(key), np.uint64(base)))
        outside = ~((x >= lower) & (x <= upper))
        count = int(np.count_nonzero(outside))
        if count:
            rows, cols = np.nonzero(outside)
            u = rng.random(count)
            values = lower[cols] + (u * (upper[cols] - lower[cols])).astype(x.dtype)
            x[rows, cols] = np.minimum(values, upper[cols])
        return count
    return int(kernels.bound_rows(x, lower, upper, code))


def round_integers(x, columns) -> None:
    """Round the integer genes ``columns`` (sorted indices; None: none) of the host rows
    ``x`` to the nearest integer, in place (ties to even: deterministic). Genes inside an
    integer box stay inside it; half-precision rows round in float32 (integers up to
    256 exact in bfloat16).

    Example::

        x = np.array([[0.4, 2.6], [0.6, 1.5]], np.float32)
        round_integers(x, np.array([0]))          # x[:, 0] is now [0, 1]
    """
    if columns is None or not len(columns):
        return
    part = x[:, columns].astype(np.float32 if x.dtype.itemsize < 4 else x.dtype)
    x[:, columns] = np.rint(part).astype(x.dtype)


# --- storage of a host island (mpievo.evo.device_operators has the device's) ----------

def place(arr) -> np.ndarray:
    """The box or scale where this backend's kernels read it: the host, as it is."""
    return arr


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised array for children."""
    return np.empty(shape, dtype)


def uniform_genomes(rng: np.random.Generator, lower, upper, out: np.ndarray) -> np.ndarray:
    """Uniform genomes in the box (``lower``/``upper`` in the genome dtype): one float64
    row of numpy draws at a time (no population-sized temporary: the same draws as one
    call), or for large genomes one counter-based word per gene (as on the device)."""
    if counter_based(out.shape[1]):
        key, base = counter_blocks(rng, counter_kernels.gene_blocks(*out.shape))
        counter_kernels.uniform_fill(out, lower, upper, key_words(key), np.uint64(base))
        return out
    for row in out:
        row[...] = rng.uniform(lower, upper)
    np.clip(out, lower, upper, out=out)
    return out
