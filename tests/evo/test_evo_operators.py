"""Variation operators: shapes, box, determinism, statistics, fused == composed.

Tests taking the ``draws`` fixture run twice: with numpy's draws (small genomes) and
with the counter-based kernels that large genomes use (``COUNTER_DIM`` lowered to 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpievo.evo import operators as ops


@pytest.fixture(params=["numpy", "counter"])
def draws(request, monkeypatch):
    """Which generator the operators draw from (see the module docstring)."""
    if request.param == "counter":
        monkeypatch.setattr(ops, "COUNTER_DIM", 1)
    return request.param


def setup(dim=12, members=20, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    lower, upper = ops.box_arrays(np.full(dim, -2.0), np.full(dim, 3.0), dtype)
    genomes = rng.uniform(-2.0, 3.0, (members, dim)).astype(dtype)
    return genomes, lower, upper


def inside(x, lower, upper):
    return bool(np.all((x >= lower) & (x <= upper)))


def test_box_arrays_round_inwards():
    lo, hi = ops.box_arrays([-5.12, 0.1], [5.12, 0.3], np.float32)
    assert lo.dtype == np.float32
    assert np.all(lo.astype(np.float64) >= [-5.12, 0.1]) and np.all(hi.astype(np.float64) <= [5.12, 0.3])


@pytest.mark.parametrize("select, kwargs", [
    (ops.uniform_selection, {}), (ops.tournament_selection, {"size": 3}), (ops.rank_selection, {"pressure": 2.0}),
])
def test_selection_shape_range_determinism(select, kwargs):
    fitness = np.arange(10.0)[::-1].copy()
    a = select(fitness, 500, np.random.default_rng(3), **kwargs)
    b = select(fitness, 500, np.random.default_rng(3), **kwargs)
    assert a.shape == (500,) and a.min() >= 0 and a.max() < 10
    assert np.array_equal(a, b)


def test_tournament_and_rank_favour_the_better():
    fitness = np.arange(10.0)  # member 0 best
    rng = np.random.default_rng(1)
    uniform = np.bincount(ops.uniform_selection(fitness, 20000, rng), minlength=10) / 20000
    tournament = np.bincount(ops.tournament_selection(fitness, 20000, rng, size=2), minlength=10) / 20000
    rank = np.bincount(ops.rank_selection(fitness, 20000, rng, pressure=2.0), minlength=10) / 20000
    # binary tournament: P(best) = 1 - (9/10)^2 = 0.19, P(worst) = 0.01
    assert tournament[0] == pytest.approx(0.19, abs=0.02) and tournament[9] == pytest.approx(0.01, abs=0.01)
    # linear ranking, pressure 2: P(rank r) = 2 (n-1-r) / (n (n-1)) -> 0.2 for the best, 0 for the worst
    assert rank[0] == pytest.approx(0.2, abs=0.02) and rank[9] == 0.0
    assert np.all(np.abs(uniform - 0.1) < 0.02)


def test_rank_selection_rejects_bad_pressure():
    with pytest.raises(ValueError, match=r"expected rank pressure in \[1, 2\], got 3"):
        ops.rank_selection(np.zeros(4), 2, np.random.default_rng(), pressure=3)


def test_interpolate_crossover_is_the_weighted_mean():
    genomes, lower, upper = setup(dtype=np.float64)
    ia, ib = np.array([0, 1, 2]), np.array([3, 4, 5])
    out = ops.interpolate_crossover(genomes, ia, ib, np.random.default_rng(0), lower, upper, omega=0.25)
    assert np.allclose(out, 0.25 * genomes[ia] + 0.75 * genomes[ib])
    rng = np.random.default_rng(5)
    w = rng.random(3)
    out = ops.interpolate_crossover(genomes, ia, ib, np.random.default_rng(5), lower, upper)
    assert np.allclose(out, w[:, None] * genomes[ia] + (1 - w[:, None]) * genomes[ib])


@pytest.mark.parametrize("crossover", [ops.interpolate_crossover, ops.uniform_crossover,
                                       ops.blend_crossover, ops.sbx_crossover])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_crossovers_shape_dtype_determinism(crossover, dtype, draws):
    genomes, lower, upper = setup(dtype=dtype)
    ia = np.random.default_rng(1).integers(0, 20, 40)
    ib = np.random.default_rng(2).integers(0, 20, 40)
    a = crossover(genomes, ia, ib, np.random.default_rng(9), lower, upper)
    b = crossover(genomes, ia, ib, np.random.default_rng(9), lower, upper, np.empty_like(a))
    assert a.shape == (40, 12) and a.dtype == dtype
    assert np.array_equal(a, b)
    ops.apply_bounds(a, lower, upper, np.random.default_rng(0), mode="clip")
    assert inside(a, lower, upper)


def test_uniform_crossover_takes_each_gene_from_a_parent(draws):
    genomes, lower, upper = setup()
    ia, ib = np.zeros(200, np.int64), np.ones(200, np.int64)
    out = ops.uniform_crossover(genomes, ia, ib, np.random.default_rng(4), lower, upper, swap_prob=0.3)
    from_b = out == genomes[1]
    assert np.all(from_b | (out == genomes[0]))
    assert from_b.mean() == pytest.approx(0.3, abs=0.03)


def test_blend_and_sbx_statistics(draws):
    genomes, lower, upper = setup(dtype=np.float64)
    ia, ib = np.zeros(20000, np.int64), np.ones(20000, np.int64)
    a, b = genomes[0], genomes[1]
    blx = ops.blend_crossover(genomes, ia, ib, np.random.default_rng(0), lower, upper, alpha=0.5)
    span = np.abs(a - b)
    assert np.all(blx >= np.minimum(a, b) - 0.5 * span - 1e-12)
    assert np.all(blx <= np.maximum(a, b) + 0.5 * span + 1e-12)
    assert np.allclose(blx.mean(axis=0), (a + b) / 2, atol=0.05)
    sbx = ops.sbx_crossover(genomes, ia, ib, np.random.default_rng(0), lower, upper, eta=15)
    # SBX keeps the parents' mean, and with eta = 15 most genes land close to a parent.
    assert np.allclose(sbx.mean(axis=0), (a + b) / 2, atol=0.02 * span.max())
    near = np.minimum(np.abs(sbx - a), np.abs(sbx - b)) <= 0.1 * span
    assert near.mean() > 0.7
    assert 0.45 < (np.abs(sbx - a) < np.abs(sbx - b)).mean() < 0.55


@pytest.mark.parametrize("rate", [0.03, 0.25])  # counter path: geometric gaps, mask words
def test_mutation_statistics_and_counts(draws, rate):
    dim, n = 200, 400
    x = np.zeros((n, dim))
    lower, upper = np.full(dim, -10.0), np.full(dim, 10.0)
    scale = np.full(dim, 2.0)
    counts = ops.gaussian_mutation(x, np.random.default_rng(0), lower, upper, rate=rate, steps=0.5,
                                   scale=scale)
    changed = x != 0
    assert np.array_equal(changed.sum(axis=1), counts)  # distinct genes, exactly counts[i] per row
    assert counts.mean() == pytest.approx(rate * dim, rel=0.05)
    assert x[changed].std() == pytest.approx(0.5 * 2.0, rel=0.05)
    assert abs(x[changed].mean()) < 0.05
    assert changed.mean(axis=0).std() < 0.03  # positions spread over all genes


def test_mutation_rate_one_mutates_every_gene_and_zero_none(draws):
    x = np.zeros((5, 7), np.float32)
    box = np.full(7, -1, np.float32), np.full(7, 1, np.float32)
    counts = ops.gaussian_mutation(x, np.random.default_rng(0), *box, rate=1.0, steps=0.1, scale=np.ones(7, np.float32))
    assert np.all(counts == 7) and np.all(x != 0)
    y = np.zeros((5, 7), np.float32)
    counts = ops.gaussian_mutation(y, np.random.default_rng(0), *box, rate=0.0, steps=0.1, scale=np.ones(7, np.float32))
    assert np.all(counts == 0) and np.all(y == 0)
    with pytest.raises(ValueError, match=r"expected mutation rate in \[0, 1\], got 1.5"):
        ops.gaussian_mutation(y, np.random.default_rng(0), *box, rate=1.5, steps=0.1, scale=np.ones(7, np.float32))


def test_per_row_steps(draws):
    x = np.zeros((3, 500))
    box = np.full(500, -1e9), np.full(500, 1e9)
    ops.gaussian_mutation(x, np.random.default_rng(2), *box, rate=1.0, steps=[0.0, 1.0, 100.0], scale=np.ones(500))
    assert np.all(x[0] == 0)
    assert x[1].std() == pytest.approx(1.0, rel=0.15) and x[2].std() == pytest.approx(100.0, rel=0.15)


def reference_mutation(x, draws, steps, scale, lower, upper):
    """Sparse mutation with clipping, gene by gene in Python (Floyd's sampling)."""
    out, start = x.copy(), 0
    for i, k in enumerate(draws.counts):
        taken = set()
        for t in range(k):
            gene = t
            if k < x.shape[1]:
                top = x.shape[1] - k + t
                gene = min(int(draws.pos_uniforms[start + t] * (top + 1)), top)
                gene = top if gene in taken else gene
                taken.add(gene)
            value = out[i, gene] + steps[i] * scale[gene] * draws.normals[start + t]
            out[i, gene] = min(max(value, lower[gene]), upper[gene])
        start += k
    return out


@pytest.mark.parametrize("rate", [0.3, 1.0])
def test_sparse_mutation_kernel_matches_a_python_reference(rate):
    genomes, lower, upper = setup(dim=9, members=40, dtype=np.float64)
    scale, steps = upper - lower, np.linspace(0.05, 1.5, 40)
    draws = ops.draw_mutation(np.random.default_rng(4), 40, 9, rate, np.float64, "clip")
    x = genomes.copy()
    ops.gaussian_mutation(x, np.random.default_rng(4), lower, upper, rate=rate, steps=steps, scale=scale)
    assert np.array_equal(x, reference_mutation(genomes, draws, steps, scale, lower, upper))


@pytest.mark.parametrize("mode", ["clip", "reflect", "resample"])
@given(values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=6, max_size=6),
       seed=st.integers(0, 2**32 - 1))
def test_bounds_modes_land_in_the_box(mode, values, seed):
    lower, upper = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 0.5, 2.5])
    x = np.array(values).reshape(2, 3)
    before = x.copy()
    moved = ops.apply_bounds(x, lower, upper, np.random.default_rng(seed), mode=mode)
    assert inside(x, lower, upper)
    was_inside = (before >= lower) & (before <= upper)
    assert moved == int((~was_inside).sum())
    assert np.array_equal(x[was_inside], before[was_inside])


def test_bounds_mode_values():
    lower, upper = np.zeros(3), np.ones(3)
    x = np.array([[-0.25, 1.5, 3.25]])
    ops.apply_bounds(x, lower, upper, mode="reflect")
    assert np.allclose(x, [[0.25, 0.5, 0.75]])  # 3.25 folds: 3.25 mod 2 = 1.25 -> 0.75
    x = np.array([[-0.25, 1.5, np.nan]])
    ops.apply_bounds(x, lower, upper, mode="clip")
    assert np.array_equal(x, [[0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="expected a Generator for bounds mode 'resample'"):
        ops.apply_bounds(np.array([[5.0, 0, 0]]), lower, upper, mode="resample")
    with pytest.raises(ValueError, match="expected bounds mode among"):
        ops.apply_bounds(x, lower, upper, mode="wrap")


def test_resample_bounds_values(draws):
    lower, upper = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 0.5, 2.5])
    x = np.array([[-5.0, 0.25, 9.0], [0.5, np.nan, 2.25]] * 50)
    before = x.copy()
    moved = ops.apply_bounds(x, lower, upper, np.random.default_rng(1), mode="resample")
    outside = np.isnan(before) | (before < lower) | (before > upper)
    assert moved == outside.sum() == 150 and inside(x, lower, upper)
    np.testing.assert_array_equal(x[~outside], before[~outside])
    assert len(np.unique(x[::2, 0])) == 50  # fresh uniforms, not a constant


@pytest.mark.parametrize("mode", ["clip", "reflect", "resample"])
def test_mutation_respects_box(mode, draws):
    genomes, lower, upper = setup(dim=30, members=50)
    x = genomes.copy()
    ops.gaussian_mutation(x, np.random.default_rng(3), lower, upper, rate=0.5, steps=5.0,
                          scale=(upper - lower), bounds=mode)
    assert inside(x, lower, upper)


@pytest.mark.parametrize("mode", ["clip", "reflect", "resample"])
@pytest.mark.parametrize("omega", [None, 0.3])
def test_fused_breed_equals_crossover_then_mutation(mode, omega, draws):
    genomes, lower, upper = setup(dim=40, members=16)
    scale = (upper - lower).astype(np.float32)
    ia = np.random.default_rng(1).integers(0, 16, 64)
    ib = np.random.default_rng(2).integers(0, 16, 64)
    steps = np.linspace(0.01, 2.0, 64)
    fused, counts = ops.breed(genomes, ia, ib, np.random.default_rng(7), lower, upper, omega=omega,
                              rate=0.2, steps=steps, scale=scale, bounds=mode)
    rng = np.random.default_rng(7)
    composed = ops.interpolate_crossover(genomes, ia, ib, rng, lower, upper, omega=omega)
    counts2 = ops.gaussian_mutation(composed, rng, lower, upper, rate=0.2, steps=steps, scale=scale, bounds=mode)
    assert np.array_equal(fused, composed) and np.array_equal(counts, counts2)
    assert inside(fused, lower, upper)


@pytest.mark.parametrize("mode", ["clip", "resample"])
def test_large_genomes_draw_from_the_counter_stream(mode):
    from mpievo.evo.streams import counter_blocks, stream
    from mpievo.kernels import counter_operators as co

    dim = ops.COUNTER_DIM
    assert ops.counter_based(dim) and not ops.counter_based(dim - 1)
    genomes, lower, upper = setup(dim=dim, members=4)
    ia, ib, steps = np.array([0, 1, 2]), np.array([3, 2, 1]), np.full(3, 2.0, np.float32)
    scale = upper - lower
    rng = stream(3, 1, 4)
    children, counts = ops.breed(genomes, ia, ib, rng, lower, upper, omega=0.25, rate=1.0, steps=steps,
                                 scale=scale, bounds=mode)
    after = rng.random(3)
    reference = stream(3, 1, 4)  # omega is fixed: no numpy draw before the kernel's blocks
    blocks = 3 * (dim // 2) * (2 if mode == "resample" else 1)  # resample: a second range
    key, base = counter_blocks(reference, blocks)
    want, want_counts = np.empty_like(children), np.empty(3, np.int64)
    co.vary(genomes, ia, ib, np.full(3, 0.25, np.float32), True, want, steps, scale, lower, upper,
            ops.kernels.BOUND_MODES[mode], np.uint64(2**32), 0.0, True, tuple(np.uint64(k) for k in key),
            np.uint64(base), want_counts)
    np.testing.assert_array_equal(children, want)
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_array_equal(after, reference.random(3))  # the stream skipped the kernel's blocks


def test_self_adapt_steps_log_normal():
    steps = ops.self_adapt_steps(0.1, 50000, np.random.default_rng(0), tau=0.5)
    logs = np.log(steps / 0.1)
    assert logs.mean() == pytest.approx(0.0, abs=0.01) and logs.std() == pytest.approx(0.5, rel=0.02)
