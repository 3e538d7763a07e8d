"""Cheaper fitness (mpievo.evo.fidelity): a child that would enter the archive under full
scoring is always fully scored (against brute force), the archive ends as with full
scoring, budgets count cost and are never exceeded, resume is exact, bad input refused."""

import copy

import numpy as np
import pytest

import mpievo
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError, validate
from mpievo.evo import EngineConfig, Island, Problem
from mpievo.evo.fidelity import Fidelity, check_fidelity, with_fidelity

NOISE = 0.05      # a row's value is the sphere plus at most NOISE: a sample errs by at most 2 * NOISE


def rows_problem(dim: int = 4, rows: int = 64, seed: int = 7) -> Problem:
    """Sphere plus a bounded per-row wobble; logs the genomes scored fully and cheaply."""
    weights = np.random.default_rng(seed).standard_normal((rows, dim))

    def row_values(genomes, subset):
        genomes = np.asarray(genomes, dtype=np.float64)
        return (genomes ** 2).sum(axis=1)[:, None] + NOISE * np.sin(3.0 * genomes @ weights[subset].T)

    def full(genomes):
        problem.full_log.append(np.array(genomes, dtype=np.float64))
        return row_values(genomes, np.arange(rows)).mean(axis=1)

    def cheap(genomes, subset):
        problem.cheap_log.append(np.array(genomes, dtype=np.float64))
        return row_values(genomes, subset).mean(axis=1)

    problem = Problem(full, dim, -2.0, 2.0, batched=True, name="rows sphere")
    problem.fidelity_rows, problem.evaluate_rows = rows, cheap
    problem.full_log, problem.cheap_log, problem.full = [], [], lambda g: row_values(g, np.arange(rows)).mean(axis=1)
    return problem


def island_of(algorithm: str, seed: int, sample: float = 0.125, margin: float = 2 * NOISE) -> Island:
    config = EngineConfig(algorithm=algorithm, capacity=8, batch_size=12, cma_popsize=8)
    return Island(0, with_fidelity(rows_problem(), sample, margin), config, seed=seed)


@pytest.mark.parametrize("algorithm,seed", [("ga", 0), ("ga", 1), ("cmaes", 2), ("de", 3)])
def test_a_child_that_would_enter_the_archive_is_always_fully_scored(algorithm, seed):
    island = island_of(algorithm, seed)
    problem = island.problem
    island.initialize()
    screened_out = 0
    for generation in range(1, 31):
        before = copy.deepcopy(island.archive)
        problem.full_log.clear(), problem.cheap_log.clear()
        island.step(generation)
        children = problem.cheap_log[0]
        scored = {row.tobytes() for batch in problem.full_log for row in batch}
        screened_out += len(children) - len(scored)
        # brute force: every child scored fully, offered to the archive as it was
        entered = before.insert_rows(children.astype(before.dtype), problem.full(children),
                                     np.arange(len(children)) + 10**6, 0, generation).entered
        missed = [i for i in entered if children[i].tobytes() not in scored]
        assert not missed, f"generation {generation}: children {missed} would enter but were screened out"
        assert np.allclose(np.sort(before.fitness), np.sort(island.archive.fitness), rtol=1e-12, atol=0), generation
    assert screened_out > 20        # the screen did work: children that cost a sample only


def test_a_generation_all_screened_out_costs_its_samples_only():
    island = island_of("ga", 6)
    island.initialize()
    before = island.archive.fitness.copy()
    island.problem.evaluate_rows = lambda genomes, rows: np.full(len(genomes), 1e9)   # every child hopeless
    island.problem.full_log.clear()
    island.step(1)
    assert not island.problem.full_log                      # no full score, not even an empty call
    assert np.array_equal(island.archive.fitness, before)
    assert island.fidelity_rows == 8 * 64 + 12 * 8          # 8 initial full scores, 12 samples of 8 rows


def test_the_budget_counts_cost_and_is_never_exceeded():
    budget, rows = 120, 64
    problem = with_fidelity(rows_problem(rows=rows), 0.125, 2 * NOISE)
    result = mpievo.minimize(problem, budget=budget, islands=2, seed=4, comm=SelfComm(),
                             config={"engine": {"capacity": 8, "batch_size": 12}, "run": {"log_every": 100}})
    children = sum(len(batch) for batch in problem.cheap_log)
    assert result.nfev <= budget and result.nfev >= budget - 4, result.nfev
    assert children > 1.5 * budget          # cheap scores: more children than cost units
    plain = mpievo.minimize(rows_problem(rows=rows), budget=budget, islands=2, seed=4, comm=SelfComm(),
                            config={"engine": {"capacity": 8, "batch_size": 12}, "run": {"log_every": 100}})
    assert plain.nfev == budget             # without fidelity: calls, as before


def test_island_state_keeps_the_rows_and_a_resume_is_exact():
    whole = island_of("ga", 5)
    whole.run(20)
    first = island_of("ga", 5)
    first.run(10)
    resumed = island_of("ga", 5)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    for generation in range(11, 21):
        resumed.step(generation)
    assert resumed.fidelity_rows == whole.fidelity_rows > 0
    assert resumed.evaluations == whole.evaluations == -(-whole.fidelity_rows // 64)
    assert np.array_equal(resumed.archive.genomes, whole.archive.genomes)
    assert np.array_equal(resumed.archive.fitness, whole.archive.fitness)


def test_the_sample_is_fixed_per_generation_and_island():
    fidelity = Fidelity(0.25, 0.0, 100)
    rows = fidelity.subset(1, 2, 3)
    assert len(rows) == 25 and len(set(rows)) == 25 and np.array_equal(rows, fidelity.subset(1, 2, 3))
    assert not np.array_equal(rows, fidelity.subset(1, 2, 4))
    assert not np.array_equal(rows, fidelity.subset(1, 3, 3))


@pytest.mark.parametrize("sample,margin,message", [
    (0.0, 0.0, "problem.fidelity_sample: expected a fraction in (0, 1], got 0.0"),
    (1.5, 0.0, "problem.fidelity_sample: expected a fraction in (0, 1], got 1.5"),
    (0.5, -0.1, "problem.fidelity_margin: expected a finite number >= 0, got -0.1"),
])
def test_bad_fractions_and_margins_are_refused(sample, margin, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        check_fidelity(sample, margin)


def test_config_keys_are_checked_and_need_a_problem_with_rows():
    with pytest.raises(ConfigError, match=r"problem.fidelity_sample.*expected a number in \(0.0, 1.0\], got 0"):
        validate({"problem": {"name": "sphere", "dim": 3, "fidelity_sample": 0}}, 1)
    with pytest.raises(ConfigError, match=r"problem.fidelity_margin.*got -1"):
        validate({"problem": {"name": "sphere", "dim": 3, "fidelity_margin": -1}}, 1)
    with pytest.raises(ValueError, match="expected a problem with fidelity_rows and evaluate_rows"):
        mpievo.minimize(config={"problem": {"name": "sphere", "dim": 3, "fidelity_sample": 0.5}},
                        budget=1000, comm=SelfComm())
    assert with_fidelity(rows_problem(), 1.0).__class__ is Problem and not hasattr(with_fidelity(rows_problem(), 1.0),
                                                                                   "fidelity")
