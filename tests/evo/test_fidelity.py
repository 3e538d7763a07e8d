"""Cheaper fitness (mpievo.evo.fidelity): a child that would enter the archive under full
scoring is always fully scored (against brute force), the archive ends as with full
scoring, the race reads each row once per child, the archive's worst as a control variate
cancels what every genome shares, budgets count cost and are never exceeded, resume is
exact, bad input refused."""

import copy

import numpy as np
import pytest

import mpievo
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError, validate
from mpievo.evo import EngineConfig, Island, Problem
from mpievo.evo.fidelity import Fidelity, check_fidelity, with_fidelity

NOISE = 0.05      # a row's value is the sphere plus at most NOISE: a sample errs by at most 2 * NOISE,
MARGIN = 4 * NOISE    # a paired difference (child minus the archive's worst) by at most 4 * NOISE


def rows_problem(dim: int = 4, rows: int = 64, seed: int = 7, shared: float = 0.0) -> Problem:
    """Sphere plus a bounded per-row wobble (plus ``shared`` times a per-row offset of mean 0
    that every genome has); logs the genomes scored fully and cheaply (and the rows)."""
    generator = np.random.default_rng(seed)
    weights = generator.standard_normal((rows, dim))
    offset = generator.standard_normal(rows)
    offset -= offset.mean()

    def row_values(genomes, subset):
        genomes = np.asarray(genomes, dtype=np.float64)
        return ((genomes ** 2).sum(axis=1)[:, None] + NOISE * np.sin(3.0 * genomes @ weights[subset].T)
                + shared * offset[subset])

    def full(genomes):
        problem.full_log.append(np.array(genomes, dtype=np.float64))
        return row_values(genomes, np.arange(rows)).mean(axis=1)

    def cheap(genomes, subset):
        problem.cheap_log.append(np.array(genomes, dtype=np.float64))
        problem.rows_log.append(np.array(subset))
        return row_values(genomes, subset).mean(axis=1)

    problem = Problem(full, dim, -2.0, 2.0, batched=True, name="rows sphere")
    problem.fidelity_rows, problem.evaluate_rows = rows, cheap
    problem.full_log, problem.cheap_log, problem.rows_log = [], [], []
    problem.full = lambda g: row_values(g, np.arange(rows)).mean(axis=1)
    return problem


def island_of(algorithm: str, seed: int, sample: float = 0.125, margin: float = MARGIN, **kw) -> Island:
    config = EngineConfig(algorithm=algorithm, capacity=8, batch_size=12, cma_popsize=8)
    return Island(0, with_fidelity(rows_problem(**kw), sample, margin), config, seed=seed)


def fully_scored(problem, rows: int = 64) -> dict[bytes, int]:
    """The genomes of the logged calls, each with the rows it was scored on (all calls)."""
    read: dict[bytes, list] = {}
    for batch, subset in zip(problem.cheap_log, problem.rows_log):
        for row in batch:
            read.setdefault(row.tobytes(), []).extend(subset.tolist())
    return {key: sorted(value) for key, value in read.items()}


def raced(island, generations: int = 30):
    """Step ``island`` (initialized here); per generation (the archive before it, its
    children, the rows each genome read) after checking the archive's worst came first."""
    problem = island.problem
    island.initialize()
    for generation in range(1, generations + 1):
        before = copy.deepcopy(island.archive)
        problem.cheap_log.clear(), problem.rows_log.clear()
        rows_before = island.fidelity_rows
        island.step(generation)
        assert np.array_equal(problem.cheap_log[0][0], before.genomes[np.argmax(before.fitness)])
        read = fully_scored(problem)
        assert all(len(set(rows)) == len(rows) for rows in read.values()), generation    # each row once
        assert island.fidelity_rows - rows_before == sum(len(rows) for rows in read.values())   # with the worst's
        yield generation, before, problem.cheap_log[0][1:], read


@pytest.mark.parametrize("algorithm,seed", [("ga", 0), ("ga", 1), ("cmaes", 2), ("de", 3)])
def test_a_child_that_would_enter_the_archive_is_always_fully_scored(algorithm, seed):
    island = island_of(algorithm, seed)
    screened_out = 0
    for generation, before, children, read in raced(island):
        scored = {key for key, rows in read.items() if rows == list(range(64))}
        screened_out += sum(len(read[c.tobytes()]) == 8 for c in children)
        # brute force: every child scored fully, offered to the archive as it was
        entered = before.insert_rows(children.astype(before.dtype), island.problem.full(children),
                                     np.arange(len(children)) + 10**6, 0, generation).entered
        missed = [i for i in entered if children[i].tobytes() not in scored]
        assert not missed, f"generation {generation}: children {missed} would enter but were screened out"
        assert np.allclose(np.sort(before.fitness), np.sort(island.archive.fitness), rtol=1e-12, atol=0), generation
    assert screened_out > 20        # the race did work: children that cost a first stage only


def test_the_worst_members_score_cancels_what_every_genome_shares():
    """A per-row offset shared by all genomes (100x the wobble) misleads a child's own
    sample mean; the paired difference with the archive's worst cancels it, so with margin
    0 a child is raced to the end where its full score is at most the worst's, up to the
    wobble's error of a paired difference."""
    island = island_of("cmaes", 2, margin=0.0, shared=10.0)
    dropped_late = 0
    for generation, before, children, read in raced(island):
        full = island.problem.full(children)
        scored = np.array([len(read[c.tobytes()]) == 64 for c in children])
        # raced to the end: a full score at most the worst's, give or take the wobble (the
        # offset's sample mean alone errs by about 3 on 8 rows)
        assert not scored[full > before.fitness.max() + MARGIN].any(), generation
        assert scored[full <= before.fitness.max() - MARGIN].all(), generation
        dropped_late += sum(len(read[c.tobytes()]) == 32 for c in children)
    assert dropped_late > 0, "no child was dropped at the second stage"


def test_a_generation_all_screened_out_costs_its_first_stage_only():
    island = island_of("ga", 6)
    island.initialize()
    before = island.archive.fitness.copy()
    members, inner = {row.tobytes() for row in island.archive.genomes}, island.problem.evaluate_rows
    island.problem.evaluate_rows = lambda genomes, rows: inner(genomes, rows) + 1e9 * np.array(
        [row.tobytes() not in members for row in genomes])                # every child hopeless
    island.problem.full_log.clear()
    island.step(1)
    assert not island.problem.full_log                      # no full score, not even an empty call
    assert np.array_equal(island.archive.fitness, before)
    assert island.fidelity_rows == 8 * 64 + (12 + 1) * 8    # 8 initial full scores, 12 children and the worst on 8 rows


def test_the_budget_counts_cost_and_is_never_exceeded():
    budget, rows = 120, 64
    problem = with_fidelity(rows_problem(rows=rows), 0.125, MARGIN)
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


def test_the_order_is_fixed_per_generation_and_island_and_stages_grow():
    fidelity = Fidelity(0.25, 0.0, 100)
    rows = fidelity.order(1, 2, 3)
    assert sorted(rows) == list(range(100)) and np.array_equal(rows, fidelity.order(1, 2, 3))
    assert not np.array_equal(rows, fidelity.order(1, 2, 4))
    assert not np.array_equal(rows, fidelity.order(1, 3, 3))
    assert fidelity.stages == (25, 100) and Fidelity(1 / 16, 0.0, 256).stages == (16, 64, 256)
    assert Fidelity(0.01, 0.0, 100, growth=3).stages == (1, 3, 9, 27, 81, 100)
    with pytest.raises(ValueError, match="fidelity growth: expected an int >= 2, got 1"):
        Fidelity(0.5, 0.0, 10, growth=1)


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
