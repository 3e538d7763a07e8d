"""run.leader_rate: the budget left split again at each migration, the leader at a higher rate."""

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
from mpievo.parallel.budget import leader, leader_rates, rounds_to_spend, split_left

# GA 16 children, CMA-ES 9 (dim 6), DE 32, GA 16: batches that do not divide each other
LEADING = {"engine": {"algorithm": ["ga", "cmaes", "de", "ga"]},
           "migration": {"interval": 3, "emigrants": 2}}
BUDGET = 3001


def leading_job(nranks: int, rate: int = 5, **run):
    return small_job(nranks, run={"budget": BUDGET, "generations": None, "leader_rate": rate, **run}, **LEADING)


def test_the_leader_is_the_best_and_a_tie_keeps_the_current_one():
    assert leader([3.0, 1.0, 2.0], None) == 1
    assert leader([1.0, 1.0, 2.0], None) == 0            # a tie without a leader: the lowest index
    assert leader([1.0, 1.0, 2.0], 1) == 1               # an immigrant's copy does not take the lead
    assert leader([1.0, 1.0, 0.5], 1) == 2
    assert leader([float("nan"), 2.0], 0) == 1           # NaN never leads
    assert leader_rates(4, 2, 7) == [1, 1, 7, 1]


def test_the_budget_left_is_split_by_rate_and_adds_up():
    shares = split_left(1000, [100, 120, 90, 110], [1, 7, 1, 1])
    assert sum(shares) == 1000 and [s - e for s, e in zip(shares, [100, 120, 90, 110])] == [58, 406, 58, 58]
    assert split_left(1003, [0, 0, 0], [1, 1, 1]) == [335, 334, 334]
    assert split_left(100, [60, 60], [1, 3]) == [60, 60]       # spent already: nothing left to split
    # rounds of 10 children per rate unit: island 1 needs 41 rounds for its 406, the others 6
    assert rounds_to_spend(shares, [100, 120, 90, 110], 10, [1, 7, 1, 1]) == 6
    assert rounds_to_spend([100, 200], [100, 100], 10, [1, 1]) == 10


def test_a_split_run_spends_its_budget_exactly_and_the_leader_most():
    result = run_job(leading_job(1), SelfComm())
    spent = [i["evaluations"] for i in result.islands]
    assert result.stop_reason == "budget" and result.evaluations == BUDGET == sum(spent)
    # the equal split gives each about 750; a leader at 5x takes most of what is left
    assert max(spent) > 2 * min(spent), spent
    # the leader's rounds are 5x larger: the budget is spent rounds earlier than planned
    scheme = build_scheme(SelfComm(), leading_job(1))
    planned = scheme.budget_generation
    scheme.initialize()
    while scheme.generation < scheme.budget_generation:
        scheme.step()
    assert result.generations == scheme.budget_generation < planned, (result.generations, planned)
    equal = run_job(leading_job(1, rate=1), SelfComm())
    assert [i["evaluations"] for i in equal.islands] == [751, 750, 750, 750]


def test_a_rate_of_one_is_the_plain_run():
    plain = run_job(small_job(1, run={"budget": BUDGET, "generations": None}, **LEADING), SelfComm())
    same = run_job(leading_job(1, rate=1), SelfComm())
    assert best_genome_bytes(plain) == best_genome_bytes(same) and plain.islands == same.islands


def test_the_split_is_saved_and_restored():
    first = build_scheme(SelfComm(), leading_job(1))
    first.initialize()
    for _ in range(7):                      # past the migrations at 3 and 6: two splits
        first.step()
    state = first.run_state()
    assert state["split_generation"] == 6 and state["leader"] >= 0 and sorted(state["rates"])[-1] == 5
    second = build_scheme(SelfComm(), leading_job(1))
    second.restore(first.island_states(), state)
    assert second.budget_generation == first.budget_generation
    while first.generation < first.budget_generation:
        first.step()
        second.step()
    assert [i.evaluations for i in first.islands.values()] == [i.evaluations for i in second.islands.values()]
    assert sum(i.evaluations for i in second.islands.values()) == BUDGET
    del state["split_generation"]
    with pytest.raises(ValueError, match="expected the budget's split in the saved run state"):
        build_scheme(SelfComm(), leading_job(1)).restore(first.island_states(), state)


def test_leader_rate_needs_a_budget_and_the_island_scheme():
    with pytest.raises(ConfigError, match="run.leader_rate: expected a run.budget to split"):
        small_job(1, run={"leader_rate": 3})
    with pytest.raises(ConfigError, match="run.leader_rate: expected 1 with run.scheme = 'replicated'"):
        small_job(1, run={"leader_rate": 3, "budget": BUDGET, "scheme": "replicated", "islands": 4})
    with pytest.raises(ConfigError, match="run.leader_rate"):
        small_job(1, run={"leader_rate": 0})


@pytest.mark.mpi(min_size=1)
def test_a_split_run_matches_the_serial_run_bit_for_bit(world):
    comm = Communicator(world)
    distributed = run_job(leading_job(comm.size), comm)
    serial = run_job(leading_job(1), SelfComm())
    same = (distributed.generations, distributed.evaluations, distributed.best_fitness) == \
        (serial.generations, serial.evaluations, serial.best_fitness)
    if comm.rank == 0:
        same = same and best_genome_bytes(distributed) == best_genome_bytes(serial) \
            and distributed.islands == serial.islands
    all_ranks_agree(world, same and distributed.evaluations == BUDGET,
                    f"{comm.size} ranks: {distributed.generations} generations, {distributed.evaluations} "
                    f"evaluations; serial {serial.generations}, {serial.evaluations}")


@pytest.mark.mpi(min_size=1)
def test_a_split_run_resumes_from_its_checkpoint_on_one_rank(world, tmp_path_factory):
    comm = Communicator(world)
    job = leading_job(comm.size)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("split")) if comm.rank == 0 else None)
    scheme = build_scheme(comm, job)
    loop = RunLoop(comm, scheme, RunSettings(job.run.generations, 5), config=job.config,
                   checkpointer=Checkpointer(directory, comm=comm), stop=StopAt(scheme, 8, comm.rank))
    stopped = loop.run()
    all_ranks_agree(world, stopped.stopped, f"expected a stop, got {stopped.stop_reason}")
    comm.barrier()
    same = True
    if comm.rank == 0:
        one = Communicator(MPI.COMM_SELF)
        resumed = run_job(leading_job(1), one, restored=load_latest(directory))
        straight = run_job(leading_job(1), one)
        same = best_genome_bytes(resumed) == best_genome_bytes(straight) and \
            resumed.evaluations == straight.evaluations == BUDGET and \
            np.array_equal([i["evaluations"] for i in resumed.islands], [i["evaluations"] for i in straight.islands])
    all_ranks_agree(world, same, "the resumed split run differs from the uninterrupted one")


def test_a_resume_with_another_budget_splits_that_one():
    late = build_scheme(SelfComm(), leading_job(1))
    late.initialize()
    while late.generation < late.budget_generation - 1:
        late.step()
    assert late.next_migration > late.budget_generation     # no split left to set the new budget
    larger = build_scheme(SelfComm(), leading_job(1, budget=BUDGET + 500))
    larger.restore(late.island_states(), late.run_state())
    while larger.generation < larger.budget_generation:
        larger.step()
    assert sum(i.evaluations for i in larger.islands.values()) == BUDGET + 500
