"""The compiled DE steps (mpievo.kernels.de_step): jDE's trials against a numpy replay of
the documented mapping, the laws of their draws, and both selections against numpy models."""

from __future__ import annotations

import numpy as np
import pytest

from de_reference import cross_mask, jde_reference
from mpievo.evo import EngineConfig, Island, make_problem
from mpievo.evo.streams import StreamKeys, stream
from mpievo.kernels import de_step
from mpievo.kernels.operators import BOUND_CLIP, BOUND_RESAMPLE

KEY = (7, 11, 13, 17)


def key_words(key=KEY) -> tuple:
    return tuple(np.uint64(k) for k in key)


def population(n, dim, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, (n, dim)).astype(dtype), rng.uniform(0.1, 1.0, n), rng.random(n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", [BOUND_CLIP, BOUND_RESAMPLE])
@pytest.mark.parametrize("n, dim", [(4, 1), (9, 13), (30, 64)])
def test_jde_trials_follow_the_documented_mapping(dtype, mode, n, dim):
    x, f_scale, cr = population(n, dim, dtype)
    lower, upper = np.full(dim, -1.0, dtype), np.full(dim, 1.0, dtype)
    trial, trial_f, trial_cr = np.empty_like(x), np.empty(n), np.empty(n)
    base = 5
    de_step.jde_trials(x, f_scale, cr, 0.3, 0.3, lower, upper, mode, key_words(), np.uint64(base),
                       trial, trial_f, trial_cr)
    expected = jde_reference(x, f_scale, cr, 0.3, 0.3, lower, upper, KEY, base, resample=mode == BOUND_RESAMPLE)
    assert np.array_equal(trial_f, expected["f"]) and np.array_equal(trial_cr, expected["cr"])
    assert np.array_equal(trial, expected["trial"])
    assert np.all((trial >= lower) & (trial <= upper))
    if n * dim > 100:   # both branches of each draw are exercised
        assert np.any(expected["outside"]) and np.any(~expected["cross"])
        assert np.any(trial_f != f_scale) and np.any(trial_f == f_scale)


def test_jde_partners_are_distinct_others_and_uniform():
    n, draws = 6, 3000
    counts = np.zeros((n, n), int)
    x = np.zeros((n, 1))
    for b in range(draws):
        partners = jde_reference(x, np.full(n, 0.5), np.full(n, 0.5), 0.0, 0.0, -1.0, 1.0, KEY, 4 * b)["partners"]
        rows = np.arange(n)[:, None]
        assert np.all(partners != rows)
        assert np.all(np.diff(np.sort(partners, axis=1), axis=1) > 0)       # distinct
        np.add.at(counts, (np.repeat(np.arange(n), 3), partners.ravel()), 1)
    expected = 3 * draws / (n - 1)
    off = ~np.eye(n, dtype=bool)
    assert np.all(counts[~off] == 0) and np.all(np.abs(counts[off] - expected) < 0.1 * expected)


@pytest.mark.parametrize("cr", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_crossover_takes_the_mutant_with_probability_cr_and_always_at_j_rand(cr):
    n, dim = 200, 301
    j_rand = np.arange(n) % dim
    mask = cross_mask(KEY, 3, n, dim, np.full(n, cr), j_rand)
    assert np.all(mask[np.arange(n), j_rand])
    rest = np.ones_like(mask)
    rest[np.arange(n), j_rand] = False
    assert np.mean(mask[rest]) == pytest.approx(cr, abs=0.005)


def test_jde_select_keeps_trials_that_are_not_worse_with_their_f_and_cr():
    x, f_scale, cr = population(5, 3, np.float64)
    fitness = np.array([1.0, 2.0, 3.0, np.inf, 5.0])
    trial = x + 1.0
    trial_fitness = np.array([0.5, 2.0, 4.0, np.inf, np.nan])
    trial_f, trial_cr = np.full(5, 0.7), np.full(5, 0.2)
    x0, f0, cr0 = x.copy(), f_scale.copy(), cr.copy()
    de_step.jde_select(trial, trial_fitness, trial_f, trial_cr, x, fitness, f_scale, cr)
    took = np.array([True, True, False, True, False])
    assert np.array_equal(x, np.where(took[:, None], trial, x0))
    assert np.array_equal(f_scale, np.where(took, 0.7, f0)) and np.array_equal(cr, np.where(took, 0.2, cr0))
    assert fitness.tolist()[:3] == [0.5, 2.0, 3.0]


def select_model(trial, trial_fitness, keys, x, fitness, external, capacity):
    """What SHADE's selection must do, in numpy: (rows of A afterwards as a set, the
    successes' indices, the new population)."""
    archived = len(external)
    strict = trial_fitness < fitness
    candidates = np.concatenate([external, x[strict]])
    candidate_keys = np.concatenate([keys[:archived], keys[archived:][strict]])
    if len(candidates) > capacity:
        candidates = candidates[np.argsort(candidate_keys, kind="stable")[:capacity]]
    keep = trial_fitness <= fitness
    new_x = np.where(keep[:, None], trial, x)
    with np.errstate(invalid="ignore"):   # inf - inf: the filler's gain
        gains = fitness - trial_fitness
    return ({row.tobytes() for row in candidates}, np.flatnonzero(strict & np.isfinite(gains)), new_x)


@pytest.mark.parametrize("archived, capacity, ties", [(0, 10, False), (6, 10, False), (9, 10, False),
                                                      (9, 4, False), (9, 0, False), (8, 6, True), (3, 5, True),
                                                      (8, 9, True)])
@pytest.mark.parametrize("seed", range(3))
def test_shade_select_keeps_the_smallest_keys_in_a_and_reports_the_successes(archived, capacity, ties, seed):
    rng = np.random.default_rng([archived, capacity, seed])
    n, dim = 8, 3
    x = rng.random((n, dim))
    fitness = rng.random(n)
    fitness[0] = np.inf                                         # a filler: success without a finite gain
    trial = rng.random((n, dim))
    trial_fitness = np.where(rng.random(n) < 0.6, fitness - rng.random(n), fitness + 1.0)
    trial_fitness[1] = fitness[1]                               # equal: replaces, no success
    keys = rng.random(archived + n)
    if ties:
        keys = np.round(keys * 2) / 2     # many keys equal to the cut
    external = np.zeros((max(archived, min(capacity, archived + n)) + 2, dim))
    external[:archived] = rng.random((archived, dim))
    model_rows, successes, model_x = select_model(trial, trial_fitness, keys, x, fitness, external[:archived],
                                                  capacity)
    trial_f, trial_cr = rng.random(n), rng.random(n)
    success_f, success_cr, gains = np.empty(n), np.empty(n), np.empty(n)
    old_fitness = fitness.copy()
    count, used = de_step.shade_select(trial, trial_fitness, trial_f, trial_cr, keys, x, fitness, external,
                                       archived, capacity, success_f, success_cr, gains)
    assert np.array_equal(x, model_x)
    assert np.array_equal(fitness, np.minimum(old_fitness, trial_fitness))
    assert used == len(model_rows) and {row.tobytes() for row in external[:used]} == model_rows
    assert count == len(successes)
    assert np.array_equal(success_f[:count], trial_f[successes])
    assert np.array_equal(success_cr[:count], trial_cr[successes])
    assert np.array_equal(gains[:count], old_fitness[successes] - trial_fitness[successes])


@pytest.mark.parametrize("algorithm", ["de", "shade"])
def test_stream_keys_and_the_generation_stream_give_the_same_trials(algorithm):
    a, b = (Island(0, make_problem("rastrigin", 12), EngineConfig(algorithm=algorithm), seed=4).run(3)
            for _ in range(2))
    keys = StreamKeys(4, 0, 4)
    assert np.array_equal(a.algorithm.ask(keys), b.algorithm.ask(stream(4, 0, 4, "breed")))
    later = StreamKeys(4, 0, 9)           # the cached key words follow the generation
    assert not np.array_equal(a.algorithm.ask(later), b.algorithm.ask(stream(4, 0, 4, "breed")))
    assert np.array_equal(a.algorithm.ask(later), b.algorithm.ask(stream(4, 0, 9, "breed")))
