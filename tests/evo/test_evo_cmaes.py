"""The own CMA-ES: parameters, the told points, box, termination criteria, IPOP/BIPOP
restarts, immigrants, plain-array checkpoints and optimisation quality."""

from __future__ import annotations

import importlib.util
import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from mpievo.evo import CMAES, EngineConfig, Island, Problem, make_problem, stream
from mpievo.evo.algorithms import cmaes_restarts as rs
from mpievo.evo.algorithms.cmaes_core import Strategy, default_popsize, parameters
from state_trees import through_hdf5


def cma_island(problem="sphere", dim=6, seed=3, dtype="float32", algorithm=None, **settings) -> Island:
    problem = problem if isinstance(problem, Problem) else make_problem(problem, dim=dim, shift=True)
    config = EngineConfig(algorithm="cmaes", dtype=dtype, **settings)
    return Island(0, problem, config, seed=seed, algorithm=algorithm)


def flat_problem(dim=4) -> Problem:
    return Problem(lambda X: np.ones(len(X)), dim, -1.0, 1.0, name="flat")


def run_to(island: Island, evaluations: int) -> Island:
    """Step until ``evaluations`` (beyond the initial population) are spent."""
    if not island.initialized:
        island.initialize()
    start = island.archive.limit
    while island.evaluations - start < evaluations:
        island.step(island.generation + 1)
    return island


# --- parameters -----------------------------------------------------------------------

def test_parameters_follow_hansens_tutorial():
    p = parameters(10, 10)
    assert default_popsize(10) == 10 and default_popsize(40) == 15 and p.mu == 5
    assert p.mueff == pytest.approx(3.1672992814107)
    assert (p.cs, p.damps, p.cc) == pytest.approx((0.2844285879463675, 1.2844285879463675, 0.29499038303562225))
    assert (p.c1, p.cmu) == pytest.approx((0.015283824524751714, 0.023551776650417))
    assert p.weights[:5].sum() == pytest.approx(1.0) and np.all(np.diff(p.weights) < 0)
    assert (p.weights[0], p.weights[-1], p.weights.sum()) == pytest.approx((0.45627265, -0.54974992, -0.6489457144))
    assert p.eigen_gap == 1 and parameters(200, 8).eigen_gap > 1


# --- ask and tell -----------------------------------------------------------------------

def test_ask_gives_the_archive_dtype_inside_the_box():
    # float32(-0.3) < -0.3 and float32(0.1) > 0.1: the box must be rounded inwards.
    problem = Problem(lambda X: np.sum((X.astype(np.float64) + 0.2) ** 2, axis=1), 8, -0.3, 0.1, name="box")
    isl = cma_island(problem, cma_sigma0=1.0)
    isl.initialize()
    for g in range(1, 6):
        x = isl.ask(g)
        assert x.dtype == np.float32 and isl.algorithm._repaired.any()
        assert np.all(x.astype(np.float64) >= -0.3) and np.all(x.astype(np.float64) <= 0.1)
        isl.tell(isl.problem.evaluate(x))


def reference_tell(run: Strategy, x, f, injected) -> dict:
    """Hansen's update written row by row, with C^-1/2 as a matrix (tutorial, Table 1;
    injected steps shortened to Mahalanobis length sqrt(n) + 2n/(n+2), Hansen 2011)."""
    p, n = run.p, run.p.dim
    inv_sqrt = run.basis @ np.diag(1.0 / run.axes) @ run.basis.T
    steps = []
    for i in np.argsort(f, kind="stable"):
        y = (x[i] - run.mean) / (run.sigma * run.scale)
        if injected[i]:
            y = y * min(1.0, p.injection_norm / np.linalg.norm(inv_sqrt @ y))
        steps.append(y)
    y_w = sum(p.weights[k] * steps[k] for k in range(p.mu))
    ps = (1 - p.cs) * run.path_sigma + math.sqrt(p.cs * (2 - p.cs) * p.mueff) * (inv_sqrt @ y_w)
    hsig = np.linalg.norm(ps) / math.sqrt(1 - (1 - p.cs) ** (2 * (run.generation + 1))) \
        < (1.4 + 2 / (n + 1)) * p.chi_n
    pc = (1 - p.cc) * run.path_c + hsig * math.sqrt(p.cc * (2 - p.cc) * p.mueff) * y_w
    rank_mu = np.zeros((n, n))
    for w, y in zip(p.weights, steps):
        w = w if w >= 0 else w * n / np.linalg.norm(inv_sqrt @ y) ** 2
        rank_mu += w * np.outer(y, y)
    cov = (1 + p.c1 * (1 - hsig) * p.cc * (2 - p.cc) - p.c1 - p.cmu * p.weights.sum()) * run.cov \
        + p.c1 * np.outer(pc, pc) + p.cmu * rank_mu
    sigma = run.sigma * math.exp(min(1.0, p.cs / p.damps * (np.linalg.norm(ps) / p.chi_n - 1)))
    return {"mean": run.mean + run.sigma * run.scale * y_w, "path_sigma": ps, "path_c": pc, "cov": cov,
            "sigma": sigma}


# a long path_sigma stalls path_c (hsig = 0) and caps the step-size change at e
@pytest.mark.parametrize("injected_row, path_length", [(None, 1.0), (0, 1.0), (5, 1.0), (None, 10.0)])
def test_one_update_matches_the_tutorial_row_by_row(injected_row, path_length):
    rng = np.random.default_rng(1)
    dim, popsize = 5, 9
    run = Strategy(rng.uniform(-1, 1, dim), 0.2, popsize, np.linspace(1.0, 3.0, dim))
    a = rng.standard_normal((dim, dim))
    run.cov = a @ a.T / dim + np.eye(dim)
    run._decompose()
    run.path_c, run.generation = rng.standard_normal(dim) * 0.3, 3
    run.path_sigma = rng.standard_normal(dim) * path_length
    x = run.ask(rng)
    f = np.arange(popsize, dtype=np.float64)
    injected = np.zeros(popsize, bool)
    if injected_row is not None:     # a far point, shortened when injected
        x[injected_row] = run.mean + 40.0 * run.sigma * run.scale
        injected[injected_row] = True
    expected = reference_tell(run, x, f, injected)
    run.tell(x, f, injected)
    for key, value in expected.items():
        assert np.allclose(getattr(run, key), value, rtol=1e-10, atol=1e-14), key


def test_tell_learns_from_the_rounded_points_that_were_scored():
    isl = cma_island(dim=8, cma_sigma0=0.02)
    isl.initialize()
    run = isl.algorithm.strategy
    p = run.p
    # the float64 samples of generation 1 (B = I, D = 1 at the start)
    raw = run.mean + run.sigma * isl.algorithm.scale * stream(3, 0, 1, "breed").standard_normal((p.popsize, 8))
    x = isl.ask(1)
    assert not isl.algorithm._repaired.any() and np.abs(raw - x).max() > 1e-8   # float32 rounding
    fitness = isl.problem.evaluate(x)
    isl.tell(fitness)
    best = np.argsort(fitness, kind="stable")[:p.mu]
    # the new mean recombines the scored points, not the samples they were rounded from
    assert np.allclose(run.mean, p.weights[:p.mu] @ x.astype(np.float64)[best], rtol=0, atol=1e-13)
    assert not np.allclose(run.mean, p.weights[:p.mu] @ raw[best], rtol=0, atol=1e-9)


def test_randomness_comes_only_from_the_generator_of_ask():
    np.random.seed(12)
    before = np.random.random()
    np.random.seed(12)
    a, b = cma_island(seed=4), cma_island(seed=4)
    for isl in (a, b):
        run_to(isl, 200)
    assert np.random.random() == before
    assert np.array_equal(a.archive.genomes, b.archive.genomes)
    algo = a.algorithm
    first = algo.ask(stream(1, 2, 3, "breed")).copy()
    assert np.array_equal(first, algo.ask(stream(1, 2, 3, "breed")))
    assert not np.array_equal(first, algo.ask(stream(1, 2, 4, "breed")))


def test_tell_refuses_a_batch_that_was_not_asked():
    isl = cma_island()
    isl.initialize()
    with pytest.raises(RuntimeError, match="expected ask\\(\\) before tell\\(\\), got no pending batch"):
        isl.algorithm.tell(np.zeros((3, 6), np.float32), np.zeros(3))
    isl.algorithm.ask(stream(3, 0, 1))
    with pytest.raises(ValueError, match="expected the 9 genomes of the last ask, got 3"):
        isl.algorithm.tell(np.zeros((3, 6), np.float32), np.zeros(3))


# --- termination criteria ---------------------------------------------------------------------

def strategy(dim=4, **fields) -> Strategy:
    """A strategy one generation old with a varied history (no criterion holds)."""
    run = Strategy(np.full(dim, 4.0), 0.3, 8, np.ones(dim))
    run.generation, run.best_history, run.median_history, run.last_range = 1, [2.0], [3.0], 1.0
    for key, value in fields.items():
        setattr(run, key, value)
    return run


def rotated(dim: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(0).standard_normal((dim, dim)))[0]


def test_no_criterion_holds_for_a_fresh_or_healthy_run():
    assert Strategy(np.zeros(4), 0.3, 8, np.ones(4)).stop_reason("float64") == ""
    assert strategy().stop_reason("float64") == ""


@pytest.mark.parametrize("reason, fields", [
    ("tolfun", dict(generation=2, best_history=[1.0, 1.0], median_history=[1.0, 1.0], last_range=0.0)),
    ("tolfunhist", dict(generation=50, best_history=[1.0] * 50, median_history=[2.0] * 50)),
    ("tolx", dict(sigma=1e-13)),
    ("conditioncov", dict(axes=np.array([1e-8, 1.0, 1.0, 1.0]))),
    # the newest 30% of both histories are no better than the oldest (and not flat)
    ("stagnation", dict(generation=300, best_history=[1.0] * 150 + list(1.0 + 0.01 * (np.arange(150) % 3)),
                        median_history=list(3.0 + 0.1 * (np.arange(300) % 2)))),
])
def test_each_criterion_stops_the_run(reason, fields):
    assert strategy(**fields).stop_reason("float64") == reason


@pytest.mark.parametrize("best, median", [(np.linspace(2.0, 1.0, 300), 3.0 + 0.1 * (np.arange(300) % 2)),
                                          (1.0 + 0.01 * (np.arange(300) % 3), np.linspace(5.0, 4.0, 300))])
def test_one_improving_history_is_no_stagnation(best, median):
    run = strategy(generation=300, best_history=list(best), median_history=list(median))
    assert run.stop_reason("float64") == ""


def test_noeffect_criteria_test_in_the_archive_dtype():
    # Steps of 2e-10 change a float64 genome near 4 but not a float32 one (one coordinate
    # of a wide box still moves: any coordinate without effect stops the run).
    tiny = strategy(sigma=1e-9, scale=np.array([1.0, 1.0, 1.0, 1e6]))
    assert tiny.stop_reason("float64") == ""
    assert tiny.stop_reason("float32") == "noeffectcoord"
    # Every coordinate moves, but not along the shortest axis (axis generation % dim = 0).
    basis = rotated(4)
    axes = np.array([1.5e-7, 1.0, 1.0, 1.0])
    run = strategy(sigma=1e-8, generation=4, best_history=[1.0, 2.0], basis=basis, axes=axes,
                   cov=(basis * axes ** 2) @ basis.T)
    assert run.stop_reason("float64") == "noeffectaxis"
    run.generation = 5
    assert run.stop_reason("float64") == ""


def test_a_flat_best_quarter_enlarges_the_step():
    runs = [Strategy(np.zeros(4), 0.3, 8, np.ones(4)) for _ in range(2)]
    x = runs[0].ask(np.random.default_rng(0))
    graded = np.arange(8.0)
    flat = np.where(graded <= 3, 0.0, graded)    # the best ceil(0.1 + 8/4) + 1 = 4 tie
    for run, f in zip(runs, (graded, flat)):
        run.tell(x, f, np.zeros(8, bool))
    p = runs[0].p
    assert runs[1].sigma == pytest.approx(runs[0].sigma * math.exp(0.2 + p.cs / p.damps))


def test_a_stopped_run_restarts_from_a_random_point():
    isl = run_to(cma_island(flat_problem(), cma_popsize=6), 12)
    algo = isl.algorithm
    assert algo.strategy.stop_reason(isl.archive.dtype) == "tolfun" and algo.restarts == 0
    algo.ask(stream(5, 0, 9, "breed"))
    start = stream(5, 0, 9, "breed").uniform(-1.0, 1.0, 4)   # ipop draws nothing before the start
    assert algo.restarts == 1 and algo.strategy.generation == 0
    assert np.array_equal(algo.strategy.mean, start) and algo.strategy.sigma == algo.sigma0


# --- restart policies -------------------------------------------------------------------------

@pytest.mark.parametrize("policy, expected", [("ipop", [6, 12, 24, 40, 40]), ("none", [6, 6, 6, 6, 6])])
def test_restarts_grow_the_population_up_to_the_cap(policy, expected):
    algo = CMAES(popsize=6, restarts=policy, max_popsize=40)
    isl = cma_island(flat_problem(), algorithm=algo)
    isl.initialize()
    sizes = [algo.strategy.popsize]
    while algo.restarts < 4:
        isl.step(isl.generation + 1)
        if algo.strategy.popsize != sizes[-1] or algo.restarts >= len(sizes):
            sizes.append(algo.strategy.popsize)
    assert sizes == expected


def test_bipop_gives_each_restart_to_the_regime_with_the_smaller_budget():
    schedule = rs.Schedule(base=10, growth=2.0, max_popsize=10 * 2 ** 9)
    rng = np.random.default_rng(0)
    schedule.count(1000)                         # the first run belongs to the large regime
    runs = []
    for _ in range(12):
        large, small = schedule.evaluations
        run = rs.restart(schedule, "bipop", rng)
        if runs:                                 # the first restart is always large
            assert run.regime == (rs.SMALL if small < large else rs.LARGE)
        runs.append(run)
        schedule.count(run.popsize * 100)
    assert runs[0] == rs.Run(20, 1.0, rs.LARGE) and schedule.restarts == 12
    smalls = [r for r in runs if r.regime == rs.SMALL]
    larges = [r for r in runs if r.regime == rs.LARGE]
    assert len(smalls) >= 4 and len(larges) >= 3
    assert [r.popsize for r in larges] == [20 * 2 ** i for i in range(len(larges))]
    assert all(10 <= r.popsize <= 10 * 2 ** (len(larges) - 1) and 0.01 <= r.sigma_factor <= 1.0 for r in smalls)
    assert len({r.sigma_factor for r in smalls}) == len(smalls)


def test_ipop_beats_plain_restarts_on_rastrigin():
    def best(policy):
        isl = cma_island(make_problem("rastrigin", dim=10), seed=0, dtype="float64", algorithm=CMAES(restarts=policy))
        return run_to(isl, 40000).best()[1], isl.algorithm.restarts
    plain, plain_restarts = best("none")
    grown, grown_restarts = best("ipop")
    assert plain_restarts > grown_restarts >= 3
    assert grown < 2.5 < plain


# --- immigrants ---------------------------------------------------------------------------------

def test_a_better_immigrant_pulls_the_mean_and_a_worse_one_is_ignored():
    a, b, c = (run_to(cma_island(dim=6, dtype="float64"), 100) for _ in range(3))
    target = a.problem.func.optimum
    assert a.immigrate(target[None], [0.0], [999], 1) == 1
    assert len(a.algorithm._immigrants) == 1
    worse = b.archive.genomes[b.archive.ranking()[-1]]
    c.algorithm.migrate_in(worse[None], [float(b.archive.fitness.max())])
    assert len(c.algorithm._immigrants) == 0
    g = a.generation + 1
    for isl in (a, b, c):
        isl.step(g)
    assert np.array_equal(b.algorithm.strategy.mean, c.algorithm.strategy.mean)
    distance = lambda isl: np.linalg.norm(isl.algorithm.strategy.mean - target)  # noqa: E731
    assert distance(a) < 0.9 * distance(b)
    assert np.all(np.abs(a.algorithm.strategy.mean) <= 5.12)


def test_at_most_half_mu_immigrants_wait_and_the_best_ones():
    isl = run_to(cma_island(dim=6, cma_popsize=12), 24)
    algo = isl.algorithm
    genomes = np.tile(isl.problem.func.optimum, (5, 1)) + np.arange(5)[:, None] * 1e-3
    algo.migrate_in(genomes, np.arange(5.0) * 1e-6 - 1.0)
    assert len(algo._immigrants) == 3 and np.array_equal(algo._immigrant_fitness, [-1.0, -1.0 + 1e-6, -1.0 + 2e-6])


# --- checkpoints --------------------------------------------------------------------------------

def test_checkpoint_resume_is_bit_identical_across_restarts_and_immigrants():
    def fresh():
        return cma_island("rastrigin", dim=5, seed=9, algorithm=CMAES(popsize=6, restarts="bipop"))
    a = run_to(fresh(), 3000)
    assert a.algorithm.restarts >= 2
    assert a.immigrate(a.problem.func.optimum[None], [0.0], [7], 1) == 1
    state = a.state_dict()
    algorithm_state = through_hdf5(state["algorithm"]["state"])
    for key, value in algorithm_state.items():
        assert isinstance(value, (int, float)) or (isinstance(value, np.ndarray) and value.dtype.kind == "f"), key
    b = fresh()
    b.load_state_dict({**state, "algorithm": {**state["algorithm"], "state": algorithm_state}})
    restarts = a.algorithm.restarts
    for isl in (a, b):
        run_to(isl, 6000)
    assert a.algorithm.restarts > restarts
    assert np.array_equal(a.archive.genomes, b.archive.genomes) and np.array_equal(a.archive.fitness, b.archive.fitness)
    sa, sb = a.algorithm.state_dict(), b.algorithm.state_dict()
    assert sa.keys() == sb.keys() and all(np.array_equal(sa[k], sb[k]) for k in sa)


class _Trap:
    """Unpickling this would flip ``sprung``."""

    sprung = False

    def __reduce__(self):
        return (_spring, ())


def _spring():
    _Trap.sprung = True


def test_a_pickled_state_is_refused_and_never_unpickled():
    isl = run_to(cma_island(), 30)
    blob = np.frombuffer(pickle.dumps(_Trap()), dtype=np.uint8).copy()
    with pytest.raises(ValueError, match=r"expected CMA-ES state keys \['popsize', 'mean'"):
        isl.algorithm.load_state_dict({"strategy": blob, "restarts": 0})
    assert not _Trap.sprung
    state = isl.algorithm.state_dict()
    state["cov"] = np.eye(5)
    with pytest.raises(ValueError, match=r"expected CMA-ES state 'cov' of shape \(6, 6\), got \(5, 5\)"):
        isl.algorithm.load_state_dict(state)


# --- configuration ------------------------------------------------------------------------------

def test_from_config_and_argument_checks():
    algo = CMAES.from_config(EngineConfig(cma_popsize=12, cma_sigma0=0.2))
    assert (algo.popsize, algo.sigma0, algo.restart_policy) == (12, 0.2, "ipop")
    for kwargs, message in [({"popsize": 1}, "expected popsize to be None or an int >= 2, got 1"),
                            ({"sigma0": 0.0}, r"expected sigma0 in \(0, 1\], got 0.0"),
                            ({"restarts": "lpop"}, "expected restarts among"),
                            ({"popsize_growth": 0.5}, "expected popsize_growth >= 1, got 0.5"),
                            ({"max_popsize": True}, "expected max_popsize to be None or an int >= 2")]:
        with pytest.raises(ValueError, match=message):
            CMAES(**kwargs)


# --- quality --------------------------------------------------------------------------------------

@pytest.mark.parametrize("problem, budget", [("sphere", 2500), ("ellipsoid", 6000), ("rosenbrock", 9000)])
def test_reaches_1e_minus_8_in_10d_within_a_pycma_like_budget(problem, budget):
    # pycma 4.5 (bounds, same start and step) needs about 1500, 3900 and 5500 evaluations.
    isl = cma_island(problem, dim=10, seed=1, dtype="float64")
    isl.initialize()
    start = isl.evaluations
    while isl.best()[1] >= 1e-8:
        isl.step(isl.generation + 1)
        assert isl.evaluations - start <= budget, isl.best()[1]


def test_the_pygmo_comparison_script_runs_both_on_the_same_budget():
    spec = importlib.util.spec_from_file_location(
        "bench_cmaes", Path(__file__).resolve().parents[2] / "examples" / "bench_cmaes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ours = bench.island_run("ellipsoid", 5, 400, 0)
    assert 400 <= ours["evaluations"] < 400 + default_popsize(5) and ours["best"] < 1e3
    result = bench.compare("sphere", dim=5, evaluations=200, repeats=1)
    assert result["island_seconds"] > 0 and result["dim"] == 5
    reference = bench.pygmo_run("sphere", 5, 200, 0)
    if reference is not None:   # pygmo is the optional bench extra
        assert reference["evaluations"] == 200 and result["ratio"] > 0
