"""GA restarts on stagnation: the monitor, the archive limit, the fresh pool,
checkpoint round trips across restarts, determinism, and the merge kernel."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from mpievo.evo import Archive, EngineConfig, Island, Problem, StagnationMonitor, make_problem, stream
from mpievo.evo.operators import box_arrays
from mpievo.evo.stagnation import UNKNOWN
from mpievo.schema import ConfigError
from mpievo.kernels import operators as kernels
from state_trees import leaves, trees_equal


def flat_island(**settings) -> Island:
    """An island on a constant fitness: it never progresses, so it restarts on schedule."""
    problem = Problem(lambda X: np.ones(len(X)), 4, -1.0, 1.0, name="flat")
    config = dict(capacity=32, population=8, batch_size=8, stagnation_patience=5)
    config.update(settings)
    return Island(0, problem, EngineConfig(**config), seed=7)


def restarting_island(index=0, seed=3) -> Island:
    """Rastrigin with a harsh monitor: several restarts within a hundred generations."""
    config = EngineConfig(capacity=64, population=8, batch_size=8, stagnation_patience=5,
                          stagnation_tol=0.2, mutation_sigma=0.3, unique=True)
    return Island(index, make_problem("rastrigin", dim=6, shift=True), config, seed=seed, n_islands=2)


def archives_equal(a: Island, b: Island) -> bool:
    return a.archive.limit == b.archive.limit and all(
        np.array_equal(getattr(a.archive, k), getattr(b.archive, k))
        for k in ("genomes", "fitness", "ids", "births", "origins"))


# --- the monitor ---------------------------------------------------------------------

def test_monitor_counts_generations_without_progress():
    monitor = StagnationMonitor(patience=3, tol=0.1)
    assert monitor.update(10.0, 20.0) and monitor.stalled == 0
    assert (monitor.scale, monitor.step) == (10.0, 1.0)  # the first spread median - best, times tol
    for expected in (1, 2):
        assert not monitor.update(9.5, 20.0)  # 0.5: below the step
        assert monitor.stalled == expected and not monitor.stagnated
    assert not monitor.update(9.2, 20.0)
    assert monitor.stagnated
    assert monitor.update(8.9, 20.0)  # 1.1 below the reference 10: small steps add up
    assert (monitor.best, monitor.stalled, monitor.scale) == (8.9, 0, 10.0)  # the scale stays


def test_monitor_progress_of_the_median_alone_counts():
    monitor = StagnationMonitor(patience=2, tol=1e-3)
    monitor.update(1.0, 50.0)
    assert monitor.update(1.0, 40.0) and monitor.update(1.0, 30.0)
    assert not monitor.update(1.0, 30.0) and not monitor.update(1.0, 30.0)
    assert monitor.stagnated


def progress_flags(best, median, shift=0.0, factor=1.0) -> list[bool]:
    monitor = StagnationMonitor(patience=4, tol=0.01)
    return [monitor.update(factor * b + shift, factor * m + shift) for b, m in zip(best, median)]


def test_monitor_ignores_shifts_and_scales_of_the_fitness():
    # values on a 2**-20 grid below 2**10: adding 2**20 and scaling by 4 are exact
    rng = np.random.default_rng(4)
    steps = rng.choice([0.0, 2.0 ** -20, 2.0 ** -8, 2.0 ** -2, 4.0], 300, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    best = 600.0 - np.cumsum(steps)
    median = best + np.round(rng.uniform(0, 100, 300) * 2 ** 20) / 2 ** 20
    flags = progress_flags(best, median)
    assert 50 < sum(flags) < 250                      # progress and stalls both happen
    assert progress_flags(best, median, shift=2.0 ** 20) == flags
    assert progress_flags(best, median, shift=-2.0 ** 20, factor=4.0) == flags


def test_monitor_scale_waits_for_a_finite_spread():
    monitor = StagnationMonitor(patience=2, tol=0.5)
    assert not monitor.update(math.inf, math.inf) and monitor.scale == UNKNOWN
    assert monitor.update(3.0, math.inf)              # the first finite best
    assert monitor.update(2.99, math.inf) and monitor.step == 0.0  # no scale yet: any improvement
    assert monitor.update(2.9, 5.0)                   # the median's first finite value
    assert monitor.scale == pytest.approx(2.1) and monitor.step == pytest.approx(1.05)
    assert not monitor.update(2.0, 4.0)               # 0.9 and 1.0: below the step


def test_monitor_off_state_and_validation():
    off = StagnationMonitor(patience=0, tol=0.0)
    for _ in range(10):
        off.update(1.0, 1.0)
    assert off.stalled == 9 and not off.stagnated
    monitor = StagnationMonitor(4, 0.5)
    monitor.update(-3.0, 2.0)
    monitor.update(-3.0, 2.0)
    other = StagnationMonitor(4, 0.5)
    other.load_state_dict(monitor.state_dict())
    assert other.state_dict() == {"best": -3.0, "median": 2.0, "scale": 5.0, "stalled": 1}
    assert not other.update(-5.0, 2.0) and other.update(-5.6, 2.0)  # 2 < 0.5 * 5 < 2.6
    legacy = StagnationMonitor(4, 0.5)
    legacy.load_state_dict({"best": -3.0, "median": 2.0, "stalled": 1})  # saved before the scale
    assert legacy.scale == UNKNOWN
    assert not legacy.update(-3.5, 1.0) and legacy.scale == 4.5  # this spread sets it: 0.5, 1 < 2.25
    with pytest.raises(ValueError, match="expected patience to be an int >= 0, got -1"):
        StagnationMonitor(-1, 0.1)
    with pytest.raises(ValueError, match="expected tol >= 0, got -0.1"):
        StagnationMonitor(1, -0.1)


# --- the archive limit -----------------------------------------------------------------

def test_archive_limit_truncate_and_retain():
    archive = Archive(8, 2, "float64", unique=True, limit=4)
    genomes = np.arange(12.0).reshape(6, 2)
    archive.insert(genomes, [5.0, 1.0, 4.0, 2.0, 3.0, 0.5], np.arange(6), 0, 0)
    assert list(archive.fitness) == [1.0, 2.0, 3.0, 0.5]  # the limit, not the capacity
    archive.truncate(2)
    assert list(archive.fitness) == [0.5, 1.0] and list(archive.ids) == [5, 1]
    assert archive.duplicate_mask(genomes[[5, 2]]).tolist() == [True, False]  # hashes moved along
    archive.set_limit(8)
    archive.insert(genomes[[2, 0]], [4.0, 5.0], [2, 0], 0, 1)
    assert archive.size == 4 and list(archive.ids) == [5, 1, 2, 0]  # free slots take anything
    archive.retain(np.array([3, 0]))
    assert list(archive.ids) == [0, 5] and archive.size == 2
    archive.set_limit(1)
    assert list(archive.ids) == [5]
    with pytest.raises(ValueError, match=r"expected an archive limit in \[1, 8\], got 9"):
        archive.set_limit(9)
    with pytest.raises(ValueError, match="expected distinct member slots"):
        archive.retain([0, 0])


def test_archive_state_keeps_the_limit_and_old_states_load():
    archive = Archive(8, 2, "float32", limit=3)
    archive.insert(np.ones((2, 2)), [1.0, 2.0], [0, 1], 0, 0)
    state = archive.state_dict()
    restored = Archive(8, 2, "float32")
    restored.load_state_dict(state)
    assert restored.limit == 3 and np.array_equal(restored.fitness, archive.fitness)
    legacy = {k: v for k, v in state.items() if k != "limit"}
    restored.load_state_dict(legacy)
    assert restored.limit == 8


def test_population_sets_the_initial_archive_size():
    isl = Island(0, make_problem("sphere", dim=3), EngineConfig(capacity=32, population=8), seed=0)
    isl.initialize()
    assert (isl.archive.size, isl.archive.limit, isl.archive.capacity, isl.evaluations) == (8, 8, 32, 8)
    capped = Island(0, make_problem("sphere", dim=3), EngineConfig(capacity=8, population=256), seed=0)
    assert capped.archive.limit == 8  # a smaller capacity caps a job's population


@pytest.mark.parametrize("seed", range(4))
def test_survivors_kernel_matches_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    for _ in range(500):
        size, n = rng.integers(0, 12, 2)
        limit = int(rng.integers(max(1, size), 16))
        values = rng.integers(0, 4, size + n).astype(float)  # many ties
        values[rng.random(size + n) < 0.2] = np.inf
        entered, slots = kernels.survivors(values[:size], values[size:], limit)
        order = np.argsort(values, kind="stable")[:limit]
        keep = np.zeros(size + n, bool)
        keep[order] = True
        assert entered.tolist() == (np.flatnonzero(keep[size:])).tolist()
        free = list(range(size, limit)) + np.flatnonzero(~keep[:size]).tolist()
        assert slots.tolist() == free[:len(entered)]


# --- the GA's response -----------------------------------------------------------------

def test_stagnation_triggers_a_restart_with_a_larger_population():
    isl = flat_island(restart_elite=2, mutation_sigma=0.2)
    isl.run(6)
    ga = isl.algorithm
    assert ga.restarts == 0 and ga.monitor.stalled == 5
    ga.sigma = 1e-9  # as after a long collapse
    elite_ids = isl.archive.ids[isl.archive.ranking()[:2]].copy()
    batch = isl.ask(7)
    assert ga.restarts == 1 and ga.refilling and ga.sigma == 0.2
    assert ga.monitor.scale == UNKNOWN  # the fresh population's first spread sets the next scale
    assert isl.archive.limit == 16 and isl.archive.size == 2
    assert np.array_equal(isl.archive.ids, elite_ids)
    lower, upper = box_arrays(isl.problem.lower, isl.problem.upper, np.float32)
    uniform = stream(7, 0, 7, "breed").uniform(lower, upper, (8, 4)).astype(np.float32)
    assert np.array_equal(batch, uniform)  # the refill: documented draws, nothing bred
    isl.tell(isl.problem.evaluate(batch))
    isl.step(8)
    assert isl.archive.size == 16 and ga.refilling and ga.monitor.stalled == 0
    isl.step(9)
    assert not ga.refilling and ga.restarts == 1
    isl.run(60)
    assert ga.restarts > 2 and isl.archive.limit == 32  # grown to the capacity, no further


def test_restarts_off_and_equal_size_restarts():
    off = flat_island(stagnation_patience=0)
    off.run(40)
    assert off.algorithm.restarts == 0 and off.archive.limit == 8
    same = flat_island(restart_growth=1.0)
    same.run(40)
    assert same.algorithm.restarts > 1 and same.archive.limit == 8


def test_long_refills_are_not_judged():
    # restart at 5 to a population of 512: refilling it takes 64 generations > patience
    isl = flat_island(capacity=512, population=256, stagnation_patience=3)
    isl.run(5)
    assert isl.algorithm.restarts == 1 and isl.archive.limit == 512
    isl.run(60)
    assert isl.algorithm.restarts == 1 and isl.algorithm.refilling
    isl.run(5)
    assert isl.algorithm.restarts == 1 and not isl.algorithm.refilling and isl.archive.size == 512


def test_restarts_keep_the_best_and_grow_the_population():
    isl = restarting_island()
    isl.initialize()
    best = [isl.best()[1]]
    limits = [isl.archive.limit]
    for g in range(1, 121):
        isl.step(g)
        best.append(isl.best()[1])
        limits.append(isl.archive.limit)
    assert isl.algorithm.restarts >= 5
    assert all(b <= a for a, b in zip(best, best[1:]))
    assert limits[-1] == 64 and all(b >= a for a, b in zip(limits, limits[1:]))


# a statistical claim: with the compiled GA step's draws it holds for 7 of seeds 0..9
# (on 3, 6 and 8 the stuck population happens to sit in the same minimum)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_restarts_find_better_minima_than_a_stuck_population(seed):
    problem = make_problem("rastrigin", dim=6, shift=True)
    settings = dict(batch_size=8, mutation_sigma=0.3)
    restarting = Island(0, problem, EngineConfig(capacity=64, population=8, stagnation_patience=20,
                                                 **settings), seed=seed).run(600)
    stuck = Island(0, problem, EngineConfig(capacity=8, stagnation_patience=0, **settings),
                   seed=seed).run(600)
    assert restarting.algorithm.restarts >= 2
    assert restarting.best()[1] < stuck.best()[1] - 0.5  # at least one rastrigin minimum lower


def restarted_plateau_island() -> Island:
    """Fitness 1 where the first gene is below -0.5, else 2: the first generation's
    spread is 1, the population then settles on the plateau 1 and restarts."""
    problem = Problem(lambda X: np.where(X[:, 0] < -0.5, 1.0, 2.0), 4, -1.0, 1.0, name="plateau")
    config = EngineConfig(capacity=16, population=8, batch_size=8, stagnation_patience=5)
    isl = Island(0, problem, config, seed=7).run(1)
    assert isl.algorithm.monitor.scale == 1.0
    while not isl.algorithm.restarts or isl.algorithm.refilling:
        isl.step(isl.generation + 1)
        assert isl.generation < 60
    assert isl.algorithm.restarts == 1
    return isl


def test_stale_members_stay_out_of_breeding_and_new_minima_join():
    isl = restarted_plateau_island()
    ga = isl.algorithm
    assert ga.restart_best == 1.0 and ga.restart_bar == 1.0 - 1e-3  # restart_margin times the scale 1
    elite = isl.archive.ids[~np.isin(np.arange(isl.archive.size), ga.breeding_pool())]
    assert len(elite) == 1  # the kept elite is the one member outside the pool
    g = isl.archive.genomes
    # better than the best at the restart, but within the margin: the old minimum
    stale = isl.immigrate(g[:1] * 0.5, [1.0 - 1e-4], [10**6], [1], [3])
    new = isl.immigrate(g[:1] * 0.25, [0.5], [10**6 + 1], [1], [3])
    assert stale == new == 1
    pool_ids = isl.archive.ids[ga.breeding_pool()]
    assert 10**6 + 1 in pool_ids and 10**6 not in pool_ids
    isl.step(isl.generation + 1)
    # outside the pool only the best restart_elite remain: the stale immigrant beat the old elite
    outside = isl.archive.ids[~np.isin(np.arange(isl.archive.size), ga.breeding_pool())]
    assert outside.tolist() == [10**6] and elite[0] not in isl.archive.ids


# --- checkpoints and determinism --------------------------------------------------------

def migrate(islands, generation):
    """Exchange each island's best two members along a ring of two (as the parallel layer does)."""
    outgoing = [isl.emigrants(2, "best", stream(isl.seed, isl.index, generation, "emigrate")) for isl in islands]
    for isl, migrants in zip(islands, reversed(outgoing)):
        isl.immigrate(*migrants)


def run_pair(islands, start, stop):
    for g in range(start, stop):
        for isl in islands:
            isl.step(g)
        if g % 4 == 0:
            migrate(islands, g)


def new_pair(seed=3):
    pair = [restarting_island(i, seed=seed) for i in range(2)]
    for isl in pair:
        isl.initialize()
    return pair


def first_generation_in_phase(refilling: bool, after: int = 20) -> int:
    pair = new_pair()
    for g in range(1, 121):
        run_pair(pair, g, g + 1)
        ga = pair[0].algorithm
        if g > after and ga.restarts and ga.refilling == refilling:
            return g
    raise AssertionError(f"island 0 never refilling={refilling} after a restart")


@pytest.mark.parametrize("refilling", [True, False], ids=["refilling", "fresh-pool"])
def test_state_round_trip_across_restarts_continues_exactly(refilling):
    cut = first_generation_in_phase(refilling)
    a = new_pair()
    run_pair(a, 1, cut + 1)
    states = [isl.state_dict() for isl in a]
    assert states[0]["algorithm"]["state"]["refilling"] == refilling
    for key, value in leaves(states[0]):
        assert isinstance(value, (np.ndarray, int, float, str, bool)), (key, type(value))
    b = [restarting_island(i) for i in range(2)]
    for isl, state in zip(b, states):
        isl.load_state_dict(copy.deepcopy(state))
        assert trees_equal(isl.state_dict(), state)
    assert [isl.algorithm.restart_bar for isl in b] == [isl.algorithm.restart_bar for isl in a]
    run_pair(a, cut + 1, 121)
    run_pair(b, cut + 1, 121)
    assert a[0].algorithm.restarts > states[0]["algorithm"]["state"]["restarts"]  # restarted after the cut
    assert all(archives_equal(x, y) for x, y in zip(a, b))
    assert all(trees_equal(x.state_dict(), y.state_dict()) for x, y in zip(a, b))


def test_restarting_runs_are_deterministic_and_seeded():
    runs = []
    for seed in (3, 3, 4):
        pair = new_pair(seed)
        run_pair(pair, 1, 101)
        runs.append(pair)
    assert all(archives_equal(x, y) for x, y in zip(runs[0], runs[1]))
    assert not np.array_equal(runs[0][0].archive.genomes, runs[2][0].archive.genomes)


def grid_rastrigin(offset: float) -> Problem:
    """Shifted 6-D rastrigin (values < 300) rounded to a 2**-32 grid, plus ``offset``:
    adding 1024 is then exact, so the fitness differences are the same bits."""
    base = make_problem("rastrigin", dim=6, shift=True)
    return Problem(lambda X: np.round(base.func(X) * 2.0 ** 32) / 2.0 ** 32 + offset, 6,
                   base.lower, base.upper, name="grid-rastrigin")


def shifted_pair_run(offset: float) -> tuple[list[Island], list[tuple[int, int]]]:
    config = EngineConfig(capacity=64, population=8, batch_size=8, stagnation_patience=5,
                          stagnation_tol=0.02, mutation_sigma=0.3, dtype="float64")
    pair = [Island(i, grid_rastrigin(offset), config, seed=3, n_islands=2).run(0) for i in range(2)]
    restarts = []
    for g in range(1, 161):
        run_pair(pair, g, g + 1)
        restarts.append(tuple(isl.algorithm.restarts for isl in pair))
    return pair, restarts


def test_restarts_are_invariant_to_a_constant_added_to_the_fitness():
    plain, plain_restarts = shifted_pair_run(0.0)
    shifted, shifted_restarts = shifted_pair_run(1024.0)
    assert min(plain_restarts[-1]) >= 3                     # restarts happen (and migrants cross)
    assert shifted_restarts == plain_restarts               # at the same generations
    for a, b in zip(plain, shifted):
        assert np.array_equal(a.archive.genomes, b.archive.genomes)
        assert np.array_equal(a.archive.fitness + 1024.0, b.archive.fitness)
        assert b.algorithm.restart_bar == a.algorithm.restart_bar + 1024.0


@pytest.mark.parametrize("key, value, text", [
    ("population", 1, "engine.population: expected an int >= 2 and <= 10000000, got 1"),
    ("stagnation_patience", -1, "engine.stagnation_patience: expected an int >= 0, got -1"),
    ("stagnation_tol", -0.1, r"engine.stagnation_tol: expected a number in \[0.0, 1.0\], got -0.1"),
    ("restart_elite", 0, "engine.restart_elite: expected an int >= 1, got 0"),
    ("restart_growth", 0.5, r"engine.restart_growth: expected a number in \[1.0, 1000.0\], got 0.5"),
    ("restart_margin", "big", r"engine.restart_margin: expected a number in \[0.0, 1.0\], got str 'big'"),
])
def test_restart_settings_are_validated_and_documented(key, value, text):
    with pytest.raises(ConfigError, match=text):
        EngineConfig.from_dict({key: value})
    assert EngineConfig.describe()[key]  # listed by `mpievo run --help-config`
