"""run.finish_diversity / run.finish_reserve: the leader switches, once, to a local CMA-ES
from its best at a split of the budget (mpievo.rules.budget.finisher)."""

import math

import numpy as np
import pytest
from mpi4py import MPI
from parallel_helpers import StopAt, small_job

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError
from mpievo.io import Checkpointer, load_latest
from mpievo.parallel import RunLoop, RunSettings, best_genome_bytes, build_scheme, run_job
from mpievo.rules.budget import finish_step, finisher

BUDGET = 4000      # two islands; four get twice as much


def sphere_job(nranks: int, islands: int = 2, **run):
    """SHADE and DE on a rotated 8-D sphere: at 4000 evaluations they stop near 1e-6."""
    algorithms = ["shade", "de", "shade", "de"][:islands]
    return small_job(nranks, run={"budget": BUDGET * islands // 2, "generations": None, "leader_rate": 3, "islands": islands,
                                  **run},
                     problem={"name": "sphere", "dim": 8, "shift": True, "rotate": True},
                     engine={"algorithm": algorithms, "shade_population": 20, "dtype": "float64",
                             "capacity": 20, "batch_size": 20},
                     migration={"interval": 5, "emigrants": 1})


def test_the_finisher_is_the_converged_island_holding_the_best():
    kinds = ["cmaes", "shade", "de"]
    assert finisher([3.0, 1e-6, 2.0], [0.2, 1e-4, 0.1], kinds, [], 1e-3, False) == 1
    assert finisher([3.0, 1e-6, 2.0], [0.2, 1e-2, 0.1], kinds, [], 1e-3, False) is None   # not converged
    assert finisher([3.0, 1e-6, 2.0], [0.2, 1e-2, 0.1], kinds, [], 1e-3, True) == 1       # the reserve
    assert finisher([3.0, 1e-6, 2.0], [0.2, 1e-4, 0.1], kinds, [1], 1e-3, True) is None   # only once
    assert finisher([1e-6, 3.0, 2.0], [1e-4, 0.2, 0.1], kinds, [], 1e-3, False) is None   # CMA-ES finishes itself
    assert finisher([1e-6, 3.0, 2.0], [1e-4, 0.2, 0.1], kinds, [], 0.0, True) == 0
    assert finisher([float("nan"), 1.0, 1.0], [0.0] * 3, kinds, [], 1e-3, False) == 1      # lowest index of a tie
    assert finisher([math.inf, math.inf], [0.0] * 2, kinds[1:], [], 1e-3, True) is None
    # given the leader (its margin applied), a copy polished by a hair does not finish
    assert finisher([1e-6, 1e-6 - 1e-12, 2.0], [1e-4, 1e-4, 0.1], kinds, [], 1e-3, False, lead=0) is None
    assert finisher([3.0, 1e-6, 2.0], [0.2, 1e-4, 0.1], kinds, [], 1e-3, False, lead=1) == 1
    assert finish_step(1e-4, 0.3) == 1e-4 and finish_step(0.5, 0.3) == 0.3 and finish_step(0.0, 0.3) == 1e-12


def test_finishing_reaches_1e_8_where_the_run_without_it_stops_short():
    plain = run_job(sphere_job(1), SelfComm())
    finished = run_job(sphere_job(1, finish_diversity=1e-2), SelfComm())
    assert plain.best_fitness > 1e-7 and finished.best_fitness < 1e-8, (plain.best_fitness, finished.best_fitness)
    assert plain.evaluations == finished.evaluations == BUDGET      # never exceeded, all spent
    scheme = build_scheme(SelfComm(), sphere_job(1, finish_diversity=1e-2))
    scheme.initialize()
    while scheme.generation < scheme.budget_generation:
        scheme.step()
    (island,) = scheme.finished
    assert scheme.islands[island].algorithm.name == "cmaes" and scheme.leader == island
    assert sum(i.evaluations for i in scheme.islands.values()) == BUDGET


def test_only_the_leader_finishes(monkeypatch):
    import mpievo.parallel.scheme as scheme_module

    # the lead forced onto the island with the worse best: the converged island holding
    # the best (a copy polished by a hair, under a margin) must not finish and take it
    monkeypatch.setattr(scheme_module, "leader", lambda best, current, margin=0.0: int(np.argmax(best)))
    chosen = []

    def recorded(best, *args):
        chosen.append((finisher(best, *args), int(np.argmax(best))))
        return chosen[-1][0]

    monkeypatch.setattr(scheme_module, "finisher", recorded)
    scheme = build_scheme(SelfComm(), sphere_job(1, finish_diversity=1e-2))
    scheme.initialize()
    while scheme.generation < scheme.budget_generation:
        scheme.step()
    picked = [(island, lead) for island, lead in chosen if island is not None]
    assert picked and all(island == lead for island, lead in picked), picked
    assert scheme.finished == [island for island, _ in picked]


def test_the_reserve_finishes_the_leader_late_and_within_the_budget():
    scheme = build_scheme(SelfComm(), sphere_job(1, finish_reserve=0.25))
    scheme.initialize()
    switched_at = None
    while scheme.generation < scheme.budget_generation:
        scheme.step()
        if scheme.finished and switched_at is None:
            switched_at = sum(i.evaluations for i in scheme.islands.values())
    assert switched_at is not None and switched_at >= 0.75 * BUDGET, switched_at
    assert sum(i.evaluations for i in scheme.islands.values()) == BUDGET


def test_finishing_needs_the_leaders_share():
    with pytest.raises(ConfigError, match="run.finish_diversity: expected run.leader_rate > 1"):
        sphere_job(1, leader_rate=1, finish_diversity=1e-3)
    with pytest.raises(ConfigError, match=r"run.finish_reserve: expected a number in \[0.0, 0.999\]"):
        sphere_job(1, finish_reserve=1.5)


def test_a_switched_island_is_saved_and_restored_as_cmaes():
    first = build_scheme(SelfComm(), sphere_job(1, finish_diversity=1e-2))
    first.initialize()
    while not first.finished:
        first.step()
    first.step()
    state = first.run_state()
    assert state["finished"].tolist() == [int(i in first.finished) for i in range(2)]
    second = build_scheme(SelfComm(), sphere_job(1, finish_diversity=1e-2))
    second.restore(first.island_states(), state)
    assert second.finished == first.finished
    assert [i.algorithm.name for i in second.islands.values()] == [i.algorithm.name for i in first.islands.values()]
    while first.generation < first.budget_generation:
        first.step()
        second.step()
    assert [i.best_internal() for i in first.islands.values()] == [i.best_internal() for i in second.islands.values()]
    assert sum(i.evaluations for i in second.islands.values()) == BUDGET


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("run", [{"finish_diversity": 1e-2, "finish_reserve": 0.2},
                                 {"progress_rate": 3, "restart_after": 1, "finish_diversity": 1e-2}])
def test_the_portfolio_rules_match_the_serial_run_bit_for_bit(world, run):
    comm = Communicator(world)
    distributed = run_job(sphere_job(comm.size, islands=4, **run), comm)
    serial = run_job(sphere_job(1, islands=4, **run), SelfComm())
    same = (distributed.generations, distributed.evaluations, distributed.best_fitness) == \
        (serial.generations, serial.evaluations, serial.best_fitness)
    if comm.rank == 0:
        same = same and best_genome_bytes(distributed) == best_genome_bytes(serial) \
            and distributed.islands == serial.islands
    all_ranks_agree(world, same and distributed.evaluations == 2 * BUDGET and serial.best_fitness < 1e-8,
                    f"{comm.size} ranks: {distributed.best_fitness}, {distributed.evaluations} evaluations; "
                    f"serial {serial.best_fitness}, {serial.evaluations}")


@pytest.mark.mpi(min_size=1)
def test_a_finishing_run_resumes_after_the_switch_on_one_rank(world, tmp_path_factory):
    comm = Communicator(world)
    run = {"finish_diversity": 1e-2, "progress_rate": 3, "restart_after": 1}
    job = sphere_job(comm.size, islands=4, **run)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("finish")) if comm.rank == 0 else None)
    scheme = build_scheme(comm, job)
    loop = RunLoop(comm, scheme, RunSettings(job.run.generations, 5), config=job.config,
                   checkpointer=Checkpointer(directory, comm=comm), stop=StopAt(scheme, 24, comm.rank))
    stopped = loop.run()
    all_ranks_agree(world, stopped.stopped and bool(scheme.finished) and bool(scheme.switched),
                    f"expected a stop after a switch, got {stopped.stop_reason}, finished {scheme.finished}, "
                    f"switched {scheme.switched}")
    comm.barrier()
    same = True
    if comm.rank == 0:
        one = Communicator(MPI.COMM_SELF)
        resumed = run_job(sphere_job(1, islands=4, **run), one, restored=load_latest(directory))
        straight = run_job(sphere_job(1, islands=4, **run), one)
        same = best_genome_bytes(resumed) == best_genome_bytes(straight) and \
            resumed.evaluations == straight.evaluations == 2 * BUDGET and \
            np.array_equal([i["evaluations"] for i in resumed.islands], [i["evaluations"] for i in straight.islands])
    all_ranks_agree(world, same, "the resumed finishing run differs from the uninterrupted one")


# ---------------------------------------------------------------- progress and restarts
def test_progress_is_orders_of_magnitude_of_the_gap_closed_per_evaluation():
    from mpievo.rules.budget import losers, progress, progress_rates

    gains = progress([10.0, 5.0, 1.0, math.inf], [1.0, 5.0, 0.5, 2.0], [1000, 1000, 500, 0], 10.0)
    # island 0 closed its gap to the best (0.5) from 9.5 to 0.5; island 1 none; island 2 leads
    # now (its gap from 0.5 to the floor 1e-11: 10.7 orders in 500); island 3 spent nothing
    assert gains[0] == pytest.approx(math.log10(9.5 / 0.5)) and gains[1] == 0.0 and gains[3] == 0.0
    assert gains[2] == pytest.approx(2 * math.log10(0.5 / 1e-11))
    assert progress([1.0], [math.nan], [10], 1.0) == [0.0]
    assert progress_rates([1, 1, 7, 1], 2, gains, 5) == [1 + round(4 * gains[0] / gains[2]), 1, 7, 1]
    assert progress_rates([1, 7], 1, [0.0, 0.0], 5) == [1, 7]                  # no progress: unchanged
    assert losers([3, 0, 5, 2], 2, 3, [True] * 4) == [0] and losers([3, 3], 0, 0, [True] * 2) == []
    assert losers([3, 4, 5, 2], 2, 3, [False, True, True, True]) == [1]      # CMA-ES restarts itself


def test_a_stalled_island_restarts_as_cmaes_and_is_saved_within_the_budget():
    run = {"leader_rate": 3, "progress_rate": 3, "restart_after": 1}
    scheme = build_scheme(SelfComm(), sphere_job(1, islands=4, **run))
    scheme.initialize()
    restarted_at = None
    while scheme.generation < scheme.budget_generation:
        scheme.step()
        if scheme.switched and restarted_at is None:
            restarted_at = scheme.generation
            state, islands = scheme.run_state(), scheme.island_states()
            resumed = build_scheme(SelfComm(), sphere_job(1, islands=4, **run))
            resumed.restore(islands, state)
    assert restarted_at is not None, "no island restarted"
    (index,) = sorted(resumed.switched)[:1]
    assert resumed.islands[index].algorithm.name == "cmaes" and state["switched"][index] == 1
    while resumed.generation < resumed.budget_generation:
        resumed.step()
    assert resumed.stalls == scheme.stalls and resumed.rates == scheme.rates
    assert [i.best_internal() for i in resumed.islands.values()] == [i.best_internal() for i in scheme.islands.values()]
    assert sum(i.evaluations for i in scheme.islands.values()) == 2 * BUDGET
