"""Evaluation budget, target fitness and evaluation shares: exact, deterministic, rank-count free."""

import numpy as np
import pytest
from parallel_helpers import small_job

from mpi_support import all_ranks_agree
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError, validate
from mpievo.evo import EngineConfig, Island, make_problem
from mpievo.parallel import IslandScheme, best_genome_bytes, build_scheme, run_job
from mpievo.rules.budget import evaluation_shares, plan, smallest_budget

# islands whose batches differ: GA 16 children, CMA-ES 9 (dim 6), DE 32, GA 16
MIXED = {"engine": {"algorithm": ["ga", "cmaes", "de", "ga"]}}


def test_shares_add_up_and_the_smallest_budget_is_exact():
    assert evaluation_shares(10, 4) == [3, 3, 2, 2] and sum(evaluation_shares(12345, 7)) == 12345
    initial = [12, 40, 12, 40]
    least = smallest_budget(initial)
    assert all(s >= p for s, p in zip(evaluation_shares(least, 4), initial))
    assert any(s < p for s, p in zip(evaluation_shares(least - 1, 4), initial))
    small_job(1, run={"budget": least})
    with pytest.raises(ConfigError, match=rf"run.budget: expected at least {least} evaluations"):
        small_job(1, run={"budget": least - 1}, engine={"capacity": [12, 40, 12, 40]})


def test_the_last_step_evaluates_only_what_is_left():
    problem = make_problem("sphere", dim=3)
    island = Island(0, problem, EngineConfig(capacity=8, batch_size=16), seed=1)
    island.initialize()
    accepted = island.step(1, limit=5)
    assert island.evaluations == 8 + 5 and accepted <= 5
    assert island.archive.ids.max() < 8 + 5          # only evaluated children got ids
    island.step(2, limit=100)                       # a limit above the batch: the whole batch
    assert island.evaluations == 8 + 5 + 16
    island.ask(3)
    with pytest.raises(ValueError, match=r"expected evaluated to be an int in \[1, 16\], got 0"):
        island.tell(np.zeros(0), evaluated=0)


@pytest.mark.parametrize("budget", [1000, 1001, 1234])
def test_budget_is_spent_exactly_and_ends_the_run(budget):
    job = small_job(1, run={"budget": budget, "generations": None}, **MIXED)
    result = run_job(job, SelfComm())
    shares = evaluation_shares(budget, 4)
    assert result.evaluations == budget and [i["evaluations"] for i in result.islands] == shares
    assert result.stop_reason == "budget"
    assert result.generations == plan(job.engines, 6, budget).budget_generation


def test_generations_bound_a_run_before_its_budget():
    result = run_job(small_job(1, run={"budget": 10**6, "generations": 5}), SelfComm())
    assert result.stop_reason == "generations" and result.generations == 5 and result.evaluations < 10**6


def test_a_small_batch_island_steps_more_and_evaluates_as_much():
    # a GA island with batch 64 beside a CMA-ES island with 10 children per step
    problem = make_problem("sphere", dim=8)
    engines = (EngineConfig(batch_size=64), EngineConfig(algorithm="cmaes", cma_popsize=10))
    scheme = IslandScheme(SelfComm(), problem, engines, seed=3)
    scheme.initialize()
    for _ in range(30):
        scheme.step()
        ga, cma = (island.evaluations for island in scheme.islands.values())
        assert abs(ga - cma) < 64, (scheme.generation, ga, cma)
    assert scheme.islands[0].generation == 30 and scheme.islands[1].generation == -(-30 * 64 // 10)


def _first_generation_reaching(job, target: float, limit: int = 300) -> int:
    scheme = build_scheme(SelfComm(), job)
    scheme.initialize()
    while not scheme.reached(target):
        assert scheme.generation < limit, f"target {target} not reached in {limit} generations"
        scheme.step()
    return scheme.generation


def test_target_ends_the_run_one_generation_after_it_is_reached():
    job = small_job(1, **MIXED)
    target = 2.0
    reached = _first_generation_reaching(job, target)
    result = run_job(small_job(1, run={"target": target, "generations": 500}, **MIXED), SelfComm())
    assert result.stop_reason == "target" and result.generations == reached + 1
    assert result.best_fitness <= target


def test_a_maximised_target_is_reached_from_below():
    problem = make_problem(lambda x: -np.einsum("ij,ij->i", x, x), 4, lower=-2, upper=2, maximize=True)
    settings = {"run": {"islands": 2, "target": -0.01, "generations": 2000},
                "engine": {"capacity": 12, "batch_size": 16}}
    job = validate(settings, 1, problem=problem)
    reached = _first_generation_reaching(job, -0.01)
    result = run_job(job, SelfComm())
    assert result.stop_reason == "target" and result.generations == reached + 1
    assert -0.01 <= result.best_fitness <= 0


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("tables", [{"run": {"budget": 1234, "generations": None}, **MIXED},
                                    {"run": {"target": 2.0, "generations": 500}, **MIXED}],
                         ids=["budget", "target"])
def test_budget_and_target_runs_match_the_serial_run_bit_for_bit(world, tables):
    from mpievo.comm import Communicator

    comm = Communicator(world)
    distributed = run_job(small_job(comm.size, **tables), comm)
    serial = run_job(small_job(1, **tables), SelfComm())      # all 4 islands in this process
    same = (distributed.generations, distributed.evaluations, distributed.stop_reason, distributed.best_fitness) \
        == (serial.generations, serial.evaluations, serial.stop_reason, serial.best_fitness)
    if comm.rank == 0:
        same = same and best_genome_bytes(distributed) == best_genome_bytes(serial) \
            and distributed.islands == serial.islands
    budget = tables["run"].get("budget")
    all_ranks_agree(world, same and (budget is None or distributed.evaluations == budget),
                    f"{comm.size} ranks: {distributed.stop_reason} at {distributed.generations}, "
                    f"{distributed.evaluations} evaluations; serial: {serial.stop_reason} at "
                    f"{serial.generations}, {serial.evaluations}")
