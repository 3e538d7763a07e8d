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
from mpievo.rules.budget import lead_scale, leader, leader_rates, rate_at, rounds_to_spend, split_left

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


def test_a_lead_changes_hands_only_beyond_the_margin():
    assert leader([1.0, 0.99, 2.0], 0, margin=0.02) == 0   # a copy polished by 0.01 < 0.02
    assert leader([1.0, 0.97, 2.0], 0, margin=0.02) == 1   # better by 0.03: the lead moves
    assert leader([1.0, 0.98, 2.0], 0, margin=0.02) == 0   # exactly the margin keeps it
    assert leader([1.0, 0.99, 2.0], None, margin=0.5) == 1  # no leader yet: the best
    assert leader([float("nan"), 2.0], 0, margin=1e9) == 1  # NaN never keeps the lead
    assert leader([float("inf"), float("inf")], 1) == 1
    assert lead_scale([3.0, 1.0, float("inf"), float("nan"), 2.0]) == 2.0
    assert lead_scale([5.0, float("inf")]) == 0.0


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


def test_the_rate_grows_geometrically_over_the_second_half_of_the_budget():
    assert [rate_at(s, 1000, 7, 700) for s in (0, 300, 500)] == [7, 7, 7]
    assert rate_at(750, 1000, 7, 700) == 70                 # halfway: the geometric mean
    assert rate_at(1000, 1000, 7, 700) == rate_at(1200, 1000, 7, 700) == 700
    assert rate_at(900, 1000, 7, 7) == 7                   # final = rate: a constant rate
    rates = [rate_at(s, 1000, 3, 50) for s in range(0, 1001, 50)]
    assert rates == sorted(rates) and rates[0] == 3 and rates[-1] == 50


def test_a_late_commitment_gives_the_leader_more_of_the_second_half():
    runs = {}
    for final in (None, 200):
        scheme = build_scheme(SelfComm(), leading_job(1, leader_rate_final=final))
        scheme.initialize()
        splits = []          # (share of the budget spent, the leader's rate) at each split
        while scheme.generation < scheme.budget_generation:
            if scheme.step().migration is not None:
                spent = sum(i.evaluations for i in scheme.islands.values())
                splits.append((round(spent / BUDGET, 2), max(scheme.rates)))
        assert sum(i.evaluations for i in scheme.islands.values()) == BUDGET
        runs[final] = scheme, splits
    (constant, fixed), (growing, grown) = runs[None], runs[200]
    assert [r for _, r in fixed] == [5, 5, 5, 5]
    # splits before half the budget keep the rate; at 66 % it is 5 * 40 ** 0.32 = 16
    assert grown == [(0.14, 5), (0.4, 5), (0.66, 16)], grown
    assert growing.leader == constant.leader == 1
    assert growing.islands[1].evaluations > constant.islands[1].evaluations + 200


def test_a_margin_of_the_first_splits_spread_keeps_the_lead_and_is_saved():
    def leaders(margin, script):
        scheme = build_scheme(SelfComm(), leading_job(1, leader_margin=margin))
        scheme.initialize()
        seen = []
        for generation, best in enumerate(script, start=1):
            for i, island in scheme.islands.items():
                island.best_internal = lambda i=i, best=best: best[i]
            scheme._split(generation)
            seen.append(scheme.leader)
        return scheme, seen
    # the first split's spread is 30: a margin of 1e-3 is 0.03 of fitness
    script = [[10.0, 20.0, 30.0, 40.0], [1.0, 0.99, 30.0, 40.0], [1.0, 0.98, 3.0, 4.0], [1.0, 0.9, 3.0, 4.0]]
    assert leaders(0.0, script)[1] == [0, 1, 1, 1]
    scheme, seen = leaders(1e-3, script)
    assert seen == [0, 0, 0, 1] and scheme.lead_scale == 30.0
    assert scheme.rates == [1, 5, 1, 1]
    state = scheme.run_state()
    assert state["lead_scale"] == 30.0
    resumed = build_scheme(SelfComm(), leading_job(1, leader_margin=1e-3))
    resumed.restore(scheme.island_states(), state)
    assert resumed.lead_scale == 30.0 and resumed.leader == 1
    del state["lead_scale"]                 # a checkpoint from before the margin
    resumed.restore(scheme.island_states(), state)
    assert resumed.lead_scale is None       # the next split takes the scale


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
    with pytest.raises(ConfigError, match="run.leader_rate_final: expected >= run.leader_rate = 5"):
        small_job(1, run={"leader_rate": 5, "leader_rate_final": 3, "budget": BUDGET})
    with pytest.raises(ConfigError, match="run.leader_rate_final: expected run.leader_rate > 1"):
        small_job(1, run={"leader_rate_final": 30, "budget": BUDGET})
    with pytest.raises(ConfigError, match="run.leader_margin: expected run.leader_rate > 1"):
        small_job(1, run={"leader_margin": 1e-6, "budget": BUDGET})


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("run", [{}, {"leader_rate_final": 100, "leader_margin": 1e-3}])
def test_a_split_run_matches_the_serial_run_bit_for_bit(world, run):
    comm = Communicator(world)
    distributed = run_job(leading_job(comm.size, **run), comm)
    serial = run_job(leading_job(1, **run), SelfComm())
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
