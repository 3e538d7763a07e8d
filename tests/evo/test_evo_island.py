"""Island: stepping, migration policies, checkpoints, determinism, algorithms."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island, Migrants, Problem, make_problem, stream
from mpievo.evo.archive_records import ID_STRIDE
from state_trees import leaves, trees_equal


def island(algorithm="ga", dim=6, seed=3, index=0, problem="sphere", **settings):
    return Island(index, make_problem(problem, dim=dim, shift=True), EngineConfig(algorithm=algorithm, **settings),
                  seed=seed)


def archives_equal(a: Island, b: Island) -> bool:
    return all(np.array_equal(getattr(a.archive, k), getattr(b.archive, k))
               for k in ("genomes", "fitness", "ids", "births", "origins"))


# --- stepping and counters -----------------------------------------------------------

def test_initialize_step_counters_ids():
    isl = island(capacity=8, batch_size=5)
    with pytest.raises(RuntimeError, match="call initialize"):
        isl.step(1)
    isl.initialize()
    assert isl.archive.size == 8 and isl.evaluations == 8 and isl.generation == 0
    isl.step(1)
    isl.step(4)
    assert isl.evaluations == 18 and isl.generation == 4
    with pytest.raises(RuntimeError, match="expected a generation > 4, got 4"):
        isl.step(4)
    assert np.all(isl.archive.ids // ID_STRIDE == 0)
    assert np.all(np.isin(isl.archive.births, [0, 1, 4]))
    other = island(index=5, capacity=8)
    other.initialize()
    assert np.all(other.archive.ids // ID_STRIDE == 5) and np.all(other.archive.origins == 5)


def test_nonfinite_fitness_is_counted():
    def half_nan(X):
        f = (X ** 2).sum(axis=1)
        f[::2] = np.nan
        return f
    isl = Island(0, Problem(half_nan, 3, -1, 1), EngineConfig(capacity=4, batch_size=6), seed=1)
    isl.run(2)
    assert isl.nonfinite == 2 + 3 + 3 and isl.evaluations == 16
    assert np.all(np.isfinite(isl.archive.fitness))


def test_ask_tell_split_equals_step():
    a, b = island(), island()
    a.run(3)
    b.initialize()
    for g in (1, 2, 3):
        x = b.ask(g)
        b.tell(b.problem.evaluate(x))
    assert archives_equal(a, b)
    with pytest.raises(RuntimeError, match="expected ask\\(\\) before tell\\(\\)"):
        b.tell(np.zeros(3))


def test_best_in_user_sense_for_maximisation():
    problem = Problem(lambda X: -(X ** 2).sum(axis=1), 4, -1, 1, maximize=True)
    isl = Island(0, problem, EngineConfig(capacity=8), seed=0).run(30)
    genome, value = isl.best()
    assert value <= 0 and value == pytest.approx(problem(genome[None])[0])
    assert value > -1e-3


# --- migration ---------------------------------------------------------------------

def migrants_from(seed, k=3, **kw):
    src = island(seed=seed, index=1, capacity=8, **kw)
    src.run(5)
    return src.emigrants(k, "best")


def test_emigrants_best_and_random():
    isl = island(capacity=8).run(3)
    best = isl.emigrants(3, "best")
    assert np.array_equal(best.fitness, np.sort(isl.archive.fitness)[:3])
    assert best.genomes.shape == (3, 6) and best.ids.dtype == np.int64
    r1 = isl.emigrants(4, "random", stream(3, 0, 3, "emigrate"))
    r2 = isl.emigrants(4, "random", stream(3, 0, 3, "emigrate"))
    assert np.array_equal(r1.ids, r2.ids) and len(set(r1.ids.tolist())) == 4
    assert len(isl.emigrants(100, "best").ids) == 8
    with pytest.raises(ValueError, match="expected a Generator for selection policy 'random'"):
        isl.emigrants(2, "random")
    with pytest.raises(ValueError, match="expected selection policy among"):
        isl.emigrants(2, "worst")
    with pytest.raises(ValueError, match="expected k to be an int >= 0, got -1"):
        isl.emigrants(-1)


def test_emigrants_exclude_the_receivers_genomes():
    sender, receiver = island(capacity=8).run(2), island(index=1, capacity=8).run(2)
    receiver.immigrate(*sender.emigrants(2, "best"), policy="worst")
    chosen = sender.emigrants(2, "best", exclude=receiver.member_hashes())
    assert np.array_equal(chosen.ids, sender.archive.ids[sender.archive.ranking()[2:4]])
    randomly = sender.emigrants(8, "random", stream(3, 0, 2, "emigrate"), exclude=receiver.member_hashes())
    assert sorted(randomly.ids.tolist()) == sorted(sender.archive.ids[sender.archive.ranking()[2:]].tolist())


def test_immigrate_worst_is_unconditional():
    isl = island(capacity=8).run(2)
    worst_two = set(isl.archive.ids[np.argsort(isl.archive.fitness)[-2:]].tolist())
    bad = np.full((2, 6), 1.0, np.float32)
    n = isl.immigrate(bad, [1e9, 1e9], [7, 8], 1, policy="worst")
    assert n == 2 and {7, 8} <= set(isl.archive.ids.tolist()) and not worst_two & set(isl.archive.ids.tolist())
    assert np.all(isl.archive.origins[np.isin(isl.archive.ids, [7, 8])] == 1)
    assert isl.immigrants_accepted == 2


def test_immigrate_better_merges_migrants_like_children():
    good = migrants_from(seed=11, k=4)
    isl = island(capacity=8).run(1)
    before = isl.archive.fitness.copy()
    worse = np.full((1, 6), 0.5, np.float32), [before.max() + 1.0], [77], [2], [1]   # worse than every member
    m = Migrants(*(np.concatenate([a, np.asarray(b, dtype=a.dtype)]) for a, b in zip(good, worse)))
    n = isl.immigrate(*m, policy="better")
    entered = np.isin(m.ids, isl.archive.ids)
    assert 0 < n == entered.sum() < 5 and not entered[-1] and np.all(m.fitness[entered] < before.max())
    assert np.array_equal(np.sort(isl.archive.fitness), np.sort(np.concatenate([before, m.fitness]))[:8])
    kept = np.isin(isl.archive.ids, m.ids)
    assert np.array_equal(isl.archive.births[kept], m.births[np.isin(m.ids, isl.archive.ids[kept])])


def test_immigrants_enter_only_once_the_best_stalled_for_the_patience():
    isl = island(capacity=8, immigration_patience=3).run(1)
    good = np.zeros((1, 6), np.float32), [-1.0], [99], 1     # better than every member
    seen = []
    for generation in range(2, 200):
        before, stalled = isl.best()[1], isl.stalled
        entered = isl.immigrate(*good)
        seen.append((stalled, entered))
        if entered:
            break
        isl.step(generation)
        improved = isl.best()[1] < before
        assert isl.stalled == (0 if improved else stalled + 1), (isl.stalled, stalled, improved)
    # refused while the island improved within its last 3 generations, taken at 3
    assert seen[-1] == (3, 1) and len(seen) > 3 and all(s < 3 and e == 0 for s, e in seen[:-1]), seen
    assert isl.best()[1] == -1.0 and isl.immigrants_accepted == 1
    plain = island(capacity=8).run(1)
    assert plain.stalled == 0 and plain.immigrate(*good) == 1          # patience 0: always


def test_the_stall_count_is_saved_and_old_states_load():
    a = island("shade", immigration_patience=5).run(8)
    state = a.state_dict()
    assert state["island"]["stalled"] == a.stalled
    b = island("shade", immigration_patience=5)
    b.load_state_dict(dict(state))
    assert b.stalled == a.stalled
    del state["island"]["stalled"]
    c = island("shade", immigration_patience=5)
    c.load_state_dict(state)
    assert c.stalled == 0


@pytest.mark.parametrize("max_replace, expected", [(None, 1), (2, 2)])
def test_immigrate_fair_lets_in_the_best_max_replace(max_replace, expected):
    m = migrants_from(seed=11, k=4)
    isl = island(capacity=8).run(1)
    assert np.sum(m.fitness < isl.archive.fitness.max()) > expected   # more would enter under better
    n = isl.immigrate(*m, policy="fair", max_replace=max_replace)
    entered = np.isin(m.ids, isl.archive.ids)
    assert n == expected and np.array_equal(np.flatnonzero(entered), np.arange(n))  # m is best first
    with pytest.raises(ValueError, match="expected max_replace to be an int >= 0, got -1"):
        isl.immigrate(*m, policy="fair", max_replace=-1)
    with pytest.raises(ValueError, match=r"expected replacement policy among \('worst', 'better', 'fair'\)"):
        isl.immigrate(*m, policy="replace_if_better")


def test_immigrate_unique_skips_held_genomes():
    isl = island(capacity=8).run(2)
    own = isl.emigrants(2, "best")
    assert isl.immigrate(*own, policy="better", unique=True) == 0
    twin = island(capacity=8).run(2)
    assert twin.immigrate(*own, policy="better") == 2  # copies of its best: they enter
    better = own.genomes.copy()
    better[:, 0] += 1e-3
    fitness = own.fitness - 1.0  # pretend much better
    n = isl.immigrate(np.vstack([own.genomes, better, better]), np.concatenate([fitness, fitness, fitness]),
                      np.arange(6) + 100, 2, policy="better", unique=True)
    assert n == 2 and set(np.arange(102, 104)) <= set(isl.archive.ids.tolist())


def test_unique_archive_refuses_duplicate_immigrants():
    isl = island(capacity=8, unique=True).run(2)
    own = isl.emigrants(2, "best")
    assert isl.immigrate(own.genomes, own.fitness - 1.0, own.ids + 50, 0, policy="worst") == 0
    assert isl.immigrate(own.genomes, own.fitness - 1.0, own.ids + 50, 0, policy="better") == 0


@pytest.mark.parametrize("algorithm", ["de", "cmaes"])
def test_immigrants_reach_the_algorithm_population(algorithm):
    isl = island(algorithm, capacity=8).run(2)
    target = isl.problem.func.optimum.astype(np.float32)
    n = isl.immigrate(target[None], [0.0], [999], 3)
    assert n == 1
    isl.step(3)
    assert isl.archive.fitness.min() == 0.0
    if algorithm == "de":
        assert isl.algorithm.fitness.min() == 0.0


def test_diversity_shrinks_as_the_island_converges():
    isl = island(capacity=16)
    isl.initialize()
    start = isl.diversity()
    assert 0.15 < start < 0.45
    isl.run(100)
    assert isl.diversity() < start / 10


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_diversity_of_long_genomes_is_measured_on_every_kth_gene(monkeypatch, dtype):
    """Above MEASURED_GENES genes the same strided genes every time (exactly those), below
    every gene."""
    from mpievo.evo import diversity

    rng = np.random.default_rng(5)
    lower, upper = -rng.uniform(1, 3, 50), rng.uniform(1, 3, 50)
    config = EngineConfig(capacity=6, batch_size=6, dtype=dtype)
    isl = Island(0, Problem(lambda x: np.sum(np.asarray(x, np.float64) ** 2, axis=1), 50, lower, upper), config)
    isl.initialize()
    rows = isl.archive.genomes.astype(np.float64)

    def reference(genes):
        scaled = rows[:, genes] / (upper - lower)[genes]
        return np.mean(np.linalg.norm(scaled - scaled.mean(axis=0), axis=1)) / np.sqrt(len(genes))

    assert isl.diversity() == pytest.approx(reference(np.arange(50)), rel=1e-6)
    monkeypatch.setattr(diversity, "MEASURED_GENES", 16)          # 50 genes: every 4th, 13 of them
    assert isl.diversity() == pytest.approx(reference(np.arange(0, 50, 4)), rel=1e-6)
    assert abs(isl.diversity() - reference(np.arange(50))) > 1e-4


# --- checkpoints and determinism ----------------------------------------------------

@pytest.mark.parametrize("algorithm", ["ga", "de", "cmaes"])
def test_state_dict_round_trip_continues_exactly(algorithm):
    a = island(algorithm, unique=True)
    a.run(6)
    state = a.state_dict()
    for key, value in leaves(state):
        assert isinstance(value, (np.ndarray, int, float, str, bool)), (key, type(value))
    copied = copy.deepcopy(state)
    b = island(algorithm, unique=True)
    b.load_state_dict(copied)
    assert archives_equal(a, b) and a.counters() == b.counters()
    for g in range(7, 13):
        a.step(g)
        b.step(g)
    assert archives_equal(a, b) and a.counters() == b.counters()
    assert trees_equal(a.state_dict(), b.state_dict())


def test_load_state_dict_refuses_a_foreign_state():
    state = island().run(1).state_dict()
    with pytest.raises(ValueError, match="expected island/index = 2 in the island state, got 0"):
        island(index=2).load_state_dict(state)
    with pytest.raises(ValueError, match="expected algorithm/name = 'de'"):
        island("de").load_state_dict(state)


@pytest.mark.parametrize("algorithm", ["ga", "de", "cmaes"])
def test_same_seed_same_run_other_seed_differs(algorithm):
    a, b, c = island(algorithm, seed=5), island(algorithm, seed=5), island(algorithm, seed=6)
    for isl in (a, b, c):
        isl.run(5)
    assert archives_equal(a, b)
    assert not np.array_equal(a.archive.genomes, c.archive.genomes)


def test_interleaving_islands_does_not_change_results():
    solo = [island(index=i, seed=2) for i in range(2)]
    for isl in solo:
        isl.run(4)
    mixed = [island(index=i, seed=2) for i in range(2)]
    for isl in mixed:
        isl.initialize()
    for g in range(1, 5):
        for isl in reversed(mixed):
            isl.step(g)
    assert all(archives_equal(s, m) for s, m in zip(solo, mixed))


def test_heterogeneous_settings_resolve_per_island():
    cfg = EngineConfig(omega=lambda i: 0.3 + 0.1 * i, capacity=[8, 16], algorithm=["ga", "de"])
    islands = [Island(i, make_problem("sphere", 4), cfg, seed=0, n_islands=2) for i in range(2)]
    assert islands[0].algorithm.omega == pytest.approx(0.3) and islands[0].archive.capacity == 8
    assert islands[1].algorithm.name == "de" and islands[1].archive.capacity == 16
    with pytest.raises(ValueError, match="expected a list of 3 values"):
        Island(0, make_problem("sphere", 4), cfg, seed=0, n_islands=3)


# --- algorithms optimise ------------------------------------------------------------

@pytest.mark.parametrize("problem, settings, generations, factor", [
    ("sphere", {}, 200, 1e6),
    ("rastrigin", {}, 300, 10),
    ("sphere", {"crossover": "sbx", "bounds": "reflect", "selection": "rank"}, 200, 1e3),
    ("sphere", {"crossover": "blend", "step_adaptation": "self", "dtype": "float64"}, 200, 1e3),
    ("sphere", {"crossover": "uniform", "selection": "uniform", "bounds": "resample"}, 200, 1e3),
])
def test_ga_improves_by_orders_of_magnitude(problem, settings, generations, factor):
    isl = island("ga", dim=10, problem=problem, **settings)
    isl.initialize()
    start = isl.archive.fitness.min()
    isl.run(generations)
    assert isl.best()[1] < start / factor
    genomes = isl.archive.genomes.astype(np.float64)
    assert np.all((genomes >= isl.problem.lower) & (genomes <= isl.problem.upper))


@pytest.mark.parametrize("algorithm, generations", [("de", 400), ("cmaes", 200)])
def test_de_and_cmaes_solve_sphere_10d(algorithm, generations):
    isl = island(algorithm, dim=10, seed=1, dtype="float64")
    isl.run(generations)
    assert isl.best()[1] < 1e-6


# --- user algorithms ----------------------------------------------------------------

class RandomSearchAroundBest:
    """Minimal protocol implementation: Gaussian samples around the archive's best."""

    name = "around-best"

    def init(self, problem, archive, rng):
        self.archive, self.problem, self.radius = archive, problem, 0.5

    def ask(self, rng):
        best = self.archive.genomes[self.archive.best_index()]
        x = best + self.radius * rng.standard_normal((16, self.archive.dim))
        return np.clip(x, self.problem.lower, self.problem.upper)

    def tell(self, genomes, fitness):
        self.radius *= 0.97

    def state_dict(self):
        return {"radius": self.radius}

    def load_state_dict(self, state):
        self.radius = float(state["radius"])

    def best(self):
        i = self.archive.best_index()
        return self.archive.genomes[i], float(self.archive.fitness[i])


def test_user_algorithm_instance_class_and_reference():
    for spec in (RandomSearchAroundBest(), RandomSearchAroundBest,
                 f"{__name__}:RandomSearchAroundBest"):
        isl = Island(0, make_problem("sphere", 5), EngineConfig(capacity=8), seed=0, algorithm=spec)
        isl.initialize()
        start = isl.archive.fitness.min()
        isl.run(60)
        assert isl.best()[1] < start / 100
        assert isl.state_dict()["algorithm"]["state"]["radius"] == pytest.approx(0.5 * 0.97 ** 60)


def test_incomplete_user_algorithm_is_refused():
    class NoTell:
        def init(self, *a): ...
        def ask(self, rng): ...
    with pytest.raises(TypeError, match=r"lacking \['tell', 'state_dict', 'load_state_dict', 'best'\]"):
        Island(0, make_problem("sphere", 3), seed=0, algorithm=NoTell())


def test_bad_batch_from_user_algorithm_is_a_clear_error():
    class Wrong(RandomSearchAroundBest):
        def ask(self, rng):
            return np.zeros((4, 2))
    isl = Island(0, make_problem("sphere", 3), EngineConfig(capacity=4), seed=0, algorithm=Wrong())
    isl.initialize()
    with pytest.raises(ValueError, match=r"expected algorithm 'around-best' to ask for genomes of shape \(n >= 1, 3\)"):
        isl.step(1)
