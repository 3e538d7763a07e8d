"""SHADE / L-SHADE islands: the success-history memory, sampling, partners, bound
handling, the external archive, linear population reduction, plain-array
checkpoints, determinism, configuration and optimisation quality."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpievo.config import parse_toml, validate
from mpievo.evo import EngineConfig, Island, Problem, make_problem, stream
from mpievo.evo.algorithms import SHADE
from mpievo.evo.algorithms import shade as sh
from mpievo.kernels import de_step
from mpievo.schema import ConfigError
from de_reference import shade_reference
from state_trees import through_hdf5, trees_equal


def shade_island(problem="sphere", dim=6, seed=3, rotate=False, dtype="float64", **settings) -> Island:
    problem = problem if isinstance(problem, Problem) else make_problem(problem, dim=dim, shift=True, rotate=rotate)
    return Island(0, problem, EngineConfig(algorithm="shade", dtype=dtype, **settings), seed=seed)


def run_to(island: Island, evaluations: int) -> Island:
    if not island.initialized:
        island.initialize()
    while island.evaluations < evaluations:
        island.step(island.generation + 1)
    return island


# --- the memory update ---------------------------------------------------------------

def test_memory_update_is_the_weighted_lehmer_and_arithmetic_mean():
    f = np.array([0.2, 0.6, 1.0])
    cr = np.array([0.1, 0.5, 0.9])
    gains = np.array([1.0, 2.0, 1.0])                       # weights 1/4, 1/2, 1/4
    new_f, new_cr = de_step.memory_update(f, cr, gains, 3)
    assert new_f == pytest.approx(0.44 / 0.6)               # (.01 + .18 + .25) / (.05 + .3 + .25)
    assert new_cr == pytest.approx(0.5)                     # .025 + .25 + .225
    assert de_step.memory_update(np.array([0.5, 0.5]), cr, np.array([0.3, 0.7]), 2)[0] == pytest.approx(0.5)
    # scaling the gains changes nothing: only their proportions weigh
    assert de_step.memory_update(f, cr, gains * 1e-9, 3) == pytest.approx((new_f, new_cr))
    assert de_step.memory_update(f, cr, gains, 1) == pytest.approx((0.2, 0.1))   # only the first count


def controlled_tell(algo: SHADE, rng_seed: int, better: np.ndarray):
    """ask, then tell fitness that makes exactly the members in ``better`` improve
    (by 1, 2, 3, ...), the others fail; returns the (F, CR) the ask drew."""
    trial = algo.ask(np.random.default_rng(rng_seed)).copy()
    f, cr, _ = algo._pending
    fitness = algo.fitness + 1.0
    gains = np.arange(1.0, len(better) + 1)
    fitness[better] = algo.fitness[better] - gains
    algo.tell(trial, fitness)
    return f, cr, gains


def test_tell_writes_the_memory_slot_in_turn_and_skips_generations_without_success():
    isl = shade_island(shade_population=10, shade_memory=2, capacity=10).run(0)
    algo = isl.algorithm
    f, cr, gains = controlled_tell(algo, 1, np.array([1, 4, 7]))
    expected = de_step.memory_update(f[[1, 4, 7]], cr[[1, 4, 7]], gains, 3)
    assert (algo.memory_f[0], algo.memory_cr[0]) == pytest.approx(expected)
    assert algo.memory_f[1] == algo.memory_cr[1] == 0.5 and algo.memory_index == 1
    controlled_tell(algo, 2, np.array([], int))                # nothing improved: no update
    assert algo.memory_index == 1 and algo.memory_f[1] == 0.5
    controlled_tell(algo, 3, np.array([0]))
    assert algo.memory_index == 0 and algo.memory_f[1] != 0.5  # wrapped around


def test_filler_parents_without_fitness_stay_out_of_the_memory():
    # a population larger than the evaluated archive: the rest are +inf fillers
    isl = shade_island(shade_population=12, capacity=8).run(0)
    algo = isl.algorithm
    assert np.isinf(algo.fitness).sum() == 4
    trial = algo.ask(np.random.default_rng(0)).copy()
    f, cr, _ = algo._pending
    fitness = np.where(np.isinf(algo.fitness), 5.0, algo.fitness + 1.0)
    fitness[0] = algo.fitness[0] - 2.0
    algo.tell(trial, fitness)
    assert (algo.memory_f[0], algo.memory_cr[0]) == pytest.approx((f[0], cr[0]))  # the one finite gain
    assert np.all(np.isfinite(algo.fitness))                                       # fillers replaced


def test_equal_trials_replace_their_parents_without_counting_as_success():
    isl = shade_island(shade_population=8, capacity=8).run(1)
    algo = isl.algorithm
    memory, archived = algo.memory_f.copy(), len(algo.external)
    trial = algo.ask(np.random.default_rng(9)).copy()
    algo.tell(trial, algo.fitness.copy())
    assert np.array_equal(algo.x, trial)
    assert np.array_equal(algo.memory_f, memory) and len(algo.external) == archived


def test_trials_are_current_to_pbest_1_with_the_archive_crossed_binomially():
    isl = shade_island(shade_population=20, capacity=20, dim=8).run(6)
    algo = isl.algorithm
    assert len(algo.external) > 0
    x, external = algo.x.copy(), algo.external.copy()
    trial = algo.ask(np.random.default_rng(21)).copy()
    f, cr, keys = algo._pending
    # replay the documented mapping: the key and first block a Generator gives
    from mpievo.evo.streams import counter_blocks
    key, base = counter_blocks(np.random.default_rng(21), 1)
    expected = shade_reference(x, external, algo.fitness, algo.memory_f, algo.memory_cr, 0.11,
                               algo.lower, algo.upper, key, base)
    assert np.array_equal(f, expected["f"]) and np.array_equal(cr, expected["cr"])
    assert np.array_equal(keys, expected["keys"])
    assert np.any(expected["r2"] >= len(x)) and np.any(~expected["cross"])
    assert np.array_equal(trial, expected["trial"])


# --- sampling, partners, bounds ---------------------------------------------------------

def shade_draws(n: int, memory_f: float, memory_cr: float, archived: int = 0, seed: int = 5):
    """F and CR of ``n`` trials from the compiled step (both memories one value)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 2))
    f, cr, trial = np.empty(n), np.empty(n), np.empty_like(x)
    key = tuple(np.uint64(k) for k in rng.integers(0, 2**32, 4))
    de_step.shade_trials(x, np.zeros((archived, 2)), archived, np.array([0, 1]), np.array([memory_f]),
                         np.array([memory_cr]), np.full(2, -1.0), np.full(2, 1.0), key, np.uint64(3),
                         trial, f, cr, np.empty(archived + n))
    return f, cr


def test_f_is_cauchy_redrawn_while_not_positive_and_truncated_at_1():
    def cauchy_cdf(x, loc=0.3):
        return 0.5 + math.atan((x - loc) / 0.1) / math.pi

    f, _ = shade_draws(20000, 0.3, 0.5)
    assert f.min() > 0.0 and f.max() == 1.0
    positive = 1.0 - cauchy_cdf(0.0)          # redrawn while <= 0: the law given > 0
    for q in (0.01, 0.2, 0.3, 0.5, 0.9):
        expected = (cauchy_cdf(q) - cauchy_cdf(0.0)) / positive
        assert np.mean(f < q) == pytest.approx(expected, abs=0.012), q
    assert np.mean(f == 1.0) == pytest.approx((1.0 - cauchy_cdf(1.0)) / positive, abs=0.006)
    # the extreme words: still in (0, 1]
    for loc in (1e-3, 0.3, 1.0):
        assert 0.0 < de_step.truncated_cauchy(loc, np.uint64(0)) < 1e-6
        assert de_step.truncated_cauchy(loc, np.uint64(2**32 - 1)) == 1.0


def test_cr_is_normal_clipped_to_0_1():
    _, cr = shade_draws(20000, 0.5, 0.5)
    assert (np.mean(cr), np.std(cr)) == pytest.approx((0.5, 0.1), abs=0.003)
    _, high = shade_draws(20000, 0.5, 0.95, seed=6)
    assert high.max() == 1.0 and np.mean(high == 1.0) == pytest.approx(0.3085, abs=0.012)  # P(N > 0.5 sd)
    assert shade_draws(100, 0.5, 0.02)[1].min() == 0.0


@pytest.mark.parametrize("n, pool", [(4, 4), (5, 12), (30, 40)])
def test_partners_are_distinct_and_cover_the_archive(n, pool):
    from de_reference import partner_draws
    seen = np.zeros((n, pool), int)
    for s in range(400):
        r1, r2 = partner_draws(n, pool, np.uint64(s))
        i = np.arange(n)
        assert np.all(r1 != i) and np.all(r2 != i) and np.all(r2 != r1)
        assert r1.max() < n and r2.max() < pool and r1.min() >= 0 and r2.min() >= 0
        np.add.at(seen, (i, r2), 1)
    allowed = seen[:, n:] if pool > n else seen[:, :0]
    assert np.all(allowed > 0)                                  # archived genomes are drawn too


def test_out_of_box_genes_go_halfway_to_the_bound():
    # F = 1 (memory 1, the Cauchy truncated at 1 almost always), CR = 1: every gene is the mutant
    x = np.array([[0.5, -0.5, 1.0], [0.9, -0.9, 1.9], [-0.9, 0.9, 0.1], [0.0, 0.0, 1.0]])
    lower, upper = np.array([-1.0, -1.0, 0.0]), np.array([1.0, 1.0, 2.0])
    key = (np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4))
    trial, f, cr = np.empty_like(x), np.empty(4), np.empty(4)
    de_step.shade_trials(x, np.zeros((0, 3)), 0, np.array([1, 2]), np.array([5.0]), np.array([5.0]),
                         lower, upper, key, np.uint64(0), trial, f, cr, np.empty(4))
    assert np.all(cr == 1.0)
    from de_reference import shade_reference
    fitness = np.array([1.0, 0.0, 0.5, 2.0])     # ranks: 1, 2 are the p-best candidates
    expected = shade_reference(x, np.zeros((0, 3)), fitness, np.array([5.0]), np.array([5.0]), 0.11,
                               lower, upper, key, 0)
    raw = expected["mutant"]
    assert np.any((raw < lower) | (raw > upper))                # the rule is exercised
    halfway = np.where(raw < lower, (lower + x) / 2, np.where(raw > upper, (upper + x) / 2, raw))
    assert np.array_equal(trial, halfway)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trials_stay_in_the_box_and_keep_the_dtype(dtype):
    # the optimum at a corner drives many trials across the bounds
    problem = Problem(lambda X: np.sum((X.astype(np.float64) - 0.3) ** 2, axis=1), 5, -0.3, 0.3, name="corner")
    isl = shade_island(problem, dtype=dtype, shade_population=20)
    isl.run(30)
    batch = isl.ask(31)
    lower, upper = isl.algorithm.lower, isl.algorithm.upper
    assert batch.dtype == np.dtype(dtype) and np.all((batch >= lower) & (batch <= upper))
    assert isl.best()[1] < 1e-4                                 # the corner is approached


# --- the external archive and the population size -------------------------------------

def test_replaced_parents_enter_the_archive_up_to_its_size():
    isl = shade_island(shade_population=10, shade_archive_rate=0.5, capacity=10).run(0)
    algo = isl.algorithm
    before = algo.x.copy()
    controlled_tell(algo, 4, np.array([2, 3]))
    assert np.array_equal(algo.external, before[[2, 3]])
    second = algo.x.copy()
    controlled_tell(algo, 5, np.array([0, 1, 5, 6, 8]))
    assert len(algo.external) == 5                              # round(0.5 * 10) of 7 candidates
    candidates = {row.tobytes() for row in np.vstack([before[[2, 3]], second[[0, 1, 5, 6, 8]]])}
    assert len({row.tobytes() for row in algo.external} & candidates) == 5
    none = shade_island(shade_population=10, shade_archive_rate=0.0, capacity=10).run(5)
    assert len(none.algorithm.external) == 0


@pytest.mark.parametrize("budget", [3000, 4321])
def test_lshade_shrinks_the_population_linearly_to_the_minimum(budget):
    isl = shade_island(dim=5, shade_max_evaluations=budget, shade_min_population=6)
    isl.initialize()
    algo = isl.algorithm
    assert len(algo.x) == 18 * 5 and algo.evaluations == isl.archive.size
    sizes = []
    while isl.evaluations < budget + 200:
        isl.step(isl.generation + 1)
        planned = 90 + (6 - 90) * min(isl.evaluations, budget) / budget
        assert len(algo.x) == max(6, round(planned)), isl.evaluations
        assert len(algo.external) <= round(2.6 * len(algo.x))
        sizes.append(len(algo.x))
    assert sizes[-1] == 6 and all(b <= a for a, b in zip(sizes, sizes[1:]))
    assert sizes[len(sizes) // 4] < 90 and sizes.index(6) > len(sizes) // 2


def test_shade_without_a_budget_keeps_its_size():
    isl = run_to(shade_island(dim=4), 5000)
    assert len(isl.algorithm.x) == 100 and isl.algorithm.n_init == 100


def test_immigrants_replace_the_worst_members_they_beat():
    isl = shade_island(shade_population=8, capacity=8).run(3)
    algo = isl.algorithm
    worst = int(np.argmax(algo.fitness))
    optimum = isl.problem.func.optimum
    assert isl.immigrate(optimum[None], [0.0], [999], 4) == 1
    assert algo.fitness[worst] == 0.0 and np.array_equal(algo.x[worst], optimum)
    assert algo.best()[1] == 0.0


# --- checkpoints and determinism ----------------------------------------------------------

def lshade_pair() -> Island:
    return shade_island("rastrigin", dim=5, seed=11, dtype="float32", shade_max_evaluations=6000)


def test_checkpoint_and_resume_equal_the_uninterrupted_run_bit_for_bit():
    a = run_to(lshade_pair(), 2500)
    assert a.immigrate(a.problem.func.optimum[None] + 0.01, [0.5], [7], 1) == 1
    state = a.state_dict()
    assert 6 < len(a.algorithm.x) < 90 and len(a.algorithm.external) > 0   # mid-reduction
    stored = through_hdf5(state["algorithm"]["state"])
    for key, value in stored.items():
        assert isinstance(value, (int, float)) or isinstance(value, np.ndarray), key
    b = lshade_pair()
    b.load_state_dict({**state, "algorithm": {**state["algorithm"], "state": stored}})
    assert trees_equal(b.state_dict(), state)
    for isl in (a, b):
        run_to(isl, 7000)
    assert trees_equal(a.state_dict(), b.state_dict())
    assert len(a.algorithm.x) == 4


def test_load_state_dict_refuses_a_state_that_does_not_fit():
    state = shade_island(shade_population=8, capacity=8).run(2).algorithm.state_dict()
    other = shade_island(shade_population=8, capacity=8, shade_memory=3).run(0).algorithm
    with pytest.raises(ValueError, match=r"expected memory_f of shape \(3,\), got \(6,\)"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match=r"expected SHADE state keys \['archive'\]"):
        other.load_state_dict({k: v for k, v in state.items() if k != "archive"})
    wide = dict(state, x=np.zeros((8, 7)))
    with pytest.raises(ValueError, match="expected a SHADE population of 4..8 x 6 float64"):
        other.load_state_dict(wide)


def test_same_seed_same_run_other_seed_differs():
    runs = [run_to(shade_island("rastrigin", seed=s, shade_max_evaluations=3000), 3000) for s in (4, 4, 5)]
    assert trees_equal(runs[0].state_dict(), runs[1].state_dict())
    assert not np.array_equal(runs[0].algorithm.x, runs[2].algorithm.x)


def test_draws_come_only_from_the_generation_stream():
    a = shade_island(shade_population=9, capacity=9).run(2)
    b = shade_island(shade_population=9, capacity=9).run(2)
    np.random.seed(123)                                          # global state is never used
    x = a.algorithm.ask(stream(3, 0, 3, "breed"))
    np.random.seed(456)
    y = b.algorithm.ask(stream(3, 0, 3, "breed"))
    assert np.array_equal(x, y)


# --- configuration ----------------------------------------------------------------------

def test_a_toml_job_selects_shade_with_its_settings():
    job = validate(parse_toml('[run]\nislands = 2\n[engine]\nalgorithm = "shade"\nshade_memory = 3\n'
                              'shade_max_evaluations = 5000\nshade_pbest = [0.1, 0.2]\n'), 1)
    isl = Island(1, make_problem("sphere", dim=4), job.engines[1], seed=0)
    algo = isl.algorithm
    assert isinstance(algo, SHADE) and algo.name == "shade"
    assert (algo.memory, algo.max_evaluations, algo.pbest) == (3, 5000, 0.2)
    assert algo.start_size(4) == 72


@pytest.mark.parametrize("key, value, text", [
    ("shade_population", 3, "engine.shade_population: expected an int >= 4 and <= 10000000, got 3"),
    ("shade_memory", 0, "engine.shade_memory: expected an int >= 1, got 0"),
    ("shade_pbest", 0.0, r"engine.shade_pbest: expected a number in \(0.0, 1.0\], got 0.0"),
    ("shade_archive_rate", -1, r"engine.shade_archive_rate: expected a number in \[0.0, 100.0\], got -1.0"),
    ("shade_min_population", 2, "engine.shade_min_population: expected an int >= 4, got 2"),
    ("shade_max_evaluations", 0, "engine.shade_max_evaluations: expected an int >= 1, got 0"),
])
def test_settings_are_validated_and_documented(key, value, text):
    with pytest.raises(ConfigError, match=text):
        EngineConfig.from_dict({key: value})
    assert EngineConfig.describe()[key]


@pytest.mark.parametrize("kwargs, text", [
    (dict(population=3), "expected population to be None or an int >= 4, got 3"),
    (dict(memory=1.5), "expected memory to be an int >= 1, got 1.5"),
    (dict(pbest=1.5), r"expected pbest to be a number in \(0, 1\], got 1.5"),
    (dict(population=5, min_population=8), r"expected population >= min_population \(8\), got 5"),
])
def test_constructor_validation(kwargs, text):
    with pytest.raises(ValueError, match=text):
        SHADE(**kwargs)


# --- optimisation quality -------------------------------------------------------------------

@pytest.mark.parametrize("problem, rotate, shade_limit, lshade_limit", [
    ("sphere", False, 1e-10, 1e-20),
    ("ellipsoid", True, 1e-5, 1e-7),
    ("rastrigin", False, 0.5, 1e-8),    # < 0.5: the global basin (local minima are >= ~1)
])
def test_shade_and_lshade_reach_their_quality_in_30000_evaluations(problem, rotate, shade_limit, lshade_limit):
    budget = 30000
    plain = run_to(shade_island(problem, dim=10, seed=1, rotate=rotate), budget)
    reduced = run_to(shade_island(problem, dim=10, seed=1, rotate=rotate, shade_max_evaluations=budget), budget)
    assert plain.best()[1] < shade_limit
    assert reduced.best()[1] < lshade_limit


def test_shade_beats_jde_clearly_on_the_rotated_ellipsoid():
    # ill-conditioned and non-separable: jDE's rand/1/bin stalls where pbest and
    # the success memory keep descending (on the separable ellipsoid both solve it)
    problem = make_problem("ellipsoid", dim=10, shift=True, rotate=True)
    results = {}
    for algorithm in ("shade", "de"):
        config = EngineConfig(algorithm=algorithm, dtype="float64")
        results[algorithm] = run_to(Island(0, problem, config, seed=1), 30000).best()[1]
    assert results["shade"] < results["de"] * 1e-4, results
