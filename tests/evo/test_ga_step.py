"""The GA's compiled generation step (mpievo.kernels.ga_step) and its use by the GA."""

import math

import numpy as np
import pytest

from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.island import Island
from mpievo.evo.problems import make_problem
from mpievo.kernels import counter_operators as co
from mpievo.kernels import ga_step
from mpievo.kernels.operators import kth_smallest, survivors

KEY = tuple(np.uint64(k) for k in (5, 6, 7, 1))


def _breed(dtype, dim, rate, mode, *, pool=None, tournament=2, omega=-1.0, tau=0.3, n=12, capacity=40,
           uniform=True):
    rng = np.random.default_rng(dim)
    genomes = rng.uniform(-5, 5, (capacity, dim)).astype(dtype)
    fitness = rng.random(capacity)
    lower, upper = np.full(dim, -5, dtype), np.full(dim, 5, dtype)
    out = np.empty((n, dim), dtype)
    draws = dict(idx_a=np.empty(n, np.int64), idx_b=np.empty(n, np.int64), omegas=np.empty(n, dtype),
                 steps=np.empty(n, dtype), counts=np.empty(n, np.int64))
    plan = dict(mode=mode, threshold=np.uint64(co.rate_threshold(rate)),
                inv_log_q=1 / math.log1p(-rate) if 0 < rate < 1 else 0.0, dense=rate >= 0.05)
    pool = np.empty(0, np.int64) if pool is None else pool
    ga_step.breed_generation(genomes, fitness, pool, tournament, omega, 0.1, tau, lower, upper, upper - lower,
                             uniform,
                             plan["mode"], plan["threshold"], plan["inv_log_q"], plan["dense"], KEY,
                             np.uint64(3), draws["idx_a"], draws["idx_b"], draws["omegas"], draws["steps"],
                             out, draws["counts"])
    return genomes, fitness, (lower, upper), plan, draws, out


@pytest.mark.parametrize("dtype, dim, rate, mode", [
    (np.float32, 37, 1.0, 1),      # every gene, reflect, odd dim
    (np.float64, 17000, 0.1, 2),   # mask words, resample, two tiles
])
def test_dense_breeding_is_vary_with_the_kernels_own_draws(dtype, dim, rate, mode):
    genomes, _, (lower, upper), plan, d, out = _breed(dtype, dim, rate, mode)
    again = np.empty_like(out)
    counts = np.empty_like(d["counts"])
    co.vary(genomes, d["idx_a"], d["idx_b"], d["omegas"], True, again, d["steps"], upper - lower, lower, upper,
            plan["mode"], plan["threshold"], plan["inv_log_q"], plan["dense"], KEY, np.uint64(3), counts)
    np.testing.assert_array_equal(out, again)
    np.testing.assert_array_equal(d["counts"], counts)
    assert np.all((out >= lower) & (out <= upper))
    assert d["counts"].sum() > 0 and len(set(d["idx_a"])) > 3 and np.ptp(d["omegas"]) > 0.1


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("uniform", [True, False])
def test_sparse_mutation_changes_counts_genes_of_the_interpolated_children(mode, uniform):
    dim, rate, n = 400, 0.02, 300
    genomes, _, (lower, upper), _, d, out = _breed(np.float64, dim, rate, mode, n=n, uniform=uniform)
    _, _, _, _, d0, crossed = _breed(np.float64, dim, 0.0, mode, n=n, uniform=uniform)
    w = d["omegas"][:, None]
    np.testing.assert_allclose(crossed, genomes[d["idx_b"]] + w * (genomes[d["idx_a"]] - genomes[d["idx_b"]]))
    np.testing.assert_array_equal(d0["idx_a"], d["idx_a"])     # mutation draws apart from the children's
    np.testing.assert_array_equal(np.count_nonzero(out != crossed, axis=1), d["counts"])
    assert abs(d["counts"].mean() - rate * dim) < 0.2 * rate * dim    # binomial(dim, rate) on average
    assert np.all((out >= lower) & (out <= upper))
    if mode == 0:   # N(0, 1) in units of step * width (clipped genes left out)
        moved = (out != crossed) & (out > lower) & (out < upper)
        z = ((out - crossed) / (d["steps"][:, None] * 10.0))[moved]
        assert abs(np.mean(z)) < 0.1 and 0.85 < np.std(z) < 1.15


def test_tournament_winners_are_the_better_contestants_and_respect_the_pool():
    pool = np.array([3, 9, 27], np.int64)
    _, fitness, _, _, d, _ = _breed(np.float64, 20, 0.1, 0, pool=pool, n=200)
    assert set(d["idx_a"]) | set(d["idx_b"]) <= set(pool.tolist())
    # a tournament of 2 from the pool: the best of the three wins 5/9 of them
    best = pool[np.argmin(fitness[pool])]
    share = np.mean(np.concatenate([d["idx_a"], d["idx_b"]]) == best)
    assert 0.45 < share < 0.66
    _, _, _, _, uniform, _ = _breed(np.float64, 20, 0.1, 0, tournament=1, n=400)
    assert abs(np.mean(fitness[uniform["idx_a"]]) - np.mean(fitness)) < 0.06  # no pressure


def test_fixed_omega_and_success_steps():
    _, _, _, _, d, _ = _breed(np.float64, 20, 0.1, 0, omega=0.25, tau=0.0)
    assert np.all(d["omegas"] == 0.25) and np.all(d["steps"] == 0.1)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 1001])
def test_kth_smallest_matches_a_sort(n):
    rng = np.random.default_rng(n)
    for values in (rng.random(n), rng.integers(0, 3, n).astype(float), np.full(n, np.inf)):
        for k in {0, n // 2, n - 1}:
            assert kth_smallest(values.copy(), k) == np.sort(values)[k]


def test_survivors_still_keep_the_stable_best():
    rng = np.random.default_rng(0)
    members, candidates = rng.integers(0, 5, 30).astype(float), rng.integers(0, 5, 12).astype(float)
    entered, slots = survivors(members, candidates, 30)
    order = np.argsort(np.concatenate([members, candidates]), kind="stable")[:30]
    np.testing.assert_array_equal(entered, np.sort(order[order >= 30]) - 30)
    assert sorted(slots) == sorted(set(range(30)) - set(order[order < 30]))


def test_adapt_step_success_rule_and_self_adaptation_against_numpy():
    rng = np.random.default_rng(1)
    fitness, members = rng.random(16), rng.random(41)
    counts = rng.integers(0, 3, 16)
    steps = rng.uniform(0.05, 0.2, 16)
    kept = members.copy()
    sigma, median, best = ga_step.adapt_step(fitness, counts, steps, members, 0.1, False)
    np.testing.assert_array_equal(members, kept)   # not reordered
    assert median == np.sort(members)[20] and best == min(fitness.min(), members.min())
    mutated = counts > 0
    p = np.mean(fitness[mutated] < median)
    assert sigma == pytest.approx(0.1 * math.exp(0.5 * (p - 0.2)))
    sigma, _, _ = ga_step.adapt_step(fitness, counts, steps, members, 0.1, True)
    idx = np.flatnonzero(mutated)
    k = max(1, len(idx) // 4)
    chosen = idx[np.argsort(fitness[idx], kind="stable")[:k]]
    assert sigma == pytest.approx(math.exp(np.mean(np.log(steps[chosen]))))
    unchanged, _, _ = ga_step.adapt_step(fitness, np.zeros(16, np.int64), steps, members, 0.1, False)
    assert unchanged == 0.1


def test_the_default_ga_takes_the_compiled_step_and_repeats_itself():
    problem = make_problem("sphere", 50)
    islands = [Island(0, problem, EngineConfig(capacity=32, batch_size=16), seed=4) for _ in range(2)]
    for island in islands:
        island.run(30)
    assert islands[0].algorithm._step is not None
    assert islands[0].best()[1] == islands[1].best()[1]
    np.testing.assert_array_equal(islands[0].archive.genomes, islands[1].archive.genomes)
    assert islands[0].best()[1] < 0.2 * Island(0, problem, EngineConfig(capacity=32), seed=4).run(0).best()[1]
    ranked = Island(0, problem, EngineConfig(capacity=32, selection="rank"), seed=4)
    ranked.initialize()
    assert ranked.algorithm._step is None   # rank selection: the numpy path


def test_stream_keys_start_where_a_fresh_stream_would():
    from mpievo.evo.streams import StreamKeys, as_generator, counter_blocks, stream

    for keys in (StreamKeys(7, 3, 11), StreamKeys(2**40, 0, 5, "init")):
        assert keys.counter_start() == counter_blocks(keys.generator(), 5)
        assert as_generator(keys).random() == stream(*keys).random()
    rng = stream(1, 2, 3)
    assert as_generator(rng) is rng


def test_the_compiled_step_keys_each_call_by_its_own_stream():
    from mpievo.evo.streams import StreamKeys

    island = Island(0, make_problem("sphere", 20), EngineConfig(capacity=16, batch_size=8), seed=1)
    island.initialize()
    step, out = island.algorithm._step, np.empty((8, 20), np.float32)
    for keys in (StreamKeys(1, 0, 3), StreamKeys(1, 0, 4), StreamKeys(2, 0, 4), StreamKeys(2, 5, 4, "init")):
        children = step.breed(keys, out, None)[0].copy()
        fresh = step.breed(keys.generator(), out, None)[0]    # keyed from a numpy stream's state
        np.testing.assert_array_equal(children, fresh)
