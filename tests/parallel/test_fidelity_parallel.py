"""Cheaper fitness on several ranks: bit-identical to the one-process run (the sample of a
generation comes from the island's stream), across a resume, and refused by schemes whose
workers score children (master_worker)."""

import sys
from pathlib import Path

import pytest
from mpi4py import MPI

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.evo.fidelity import with_fidelity
from mpievo.parallel import best_genome_bytes, build_scheme, run_job

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evo"))
from test_fidelity import MARGIN, rows_problem  # noqa: E402

CONFIG = {"run": {"islands": 4, "generations": 12, "log_every": 4, "seed": 3},
          "engine": {"algorithm": ["ga", "cmaes", "de", "ga"], "capacity": 8, "batch_size": 12, "cma_popsize": 8},
          "migration": {"interval": 3, "emigrants": 2}}


def _run(comm, nranks, budget=None, scheme="island"):
    problem = with_fidelity(rows_problem(), 0.125, MARGIN)
    run = {**CONFIG["run"], "budget": budget, "scheme": scheme}
    job = validate({**CONFIG, "run": run}, nranks, problem=problem)
    return run_job(job, comm)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("budget", [None, 200], ids=["generations", "budget"])
def test_fidelity_runs_are_bit_identical_on_any_rank_count(world, budget):
    comm = Communicator(world)
    distributed = _run(comm, comm.size, budget)
    serial = _run(SelfComm(), 1, budget)
    same = distributed.best_fitness == serial.best_fitness
    if comm.rank == 0:
        same = same and best_genome_bytes(distributed) == best_genome_bytes(serial) \
            and distributed.evaluations == serial.evaluations
        same = same and (budget is None or distributed.evaluations <= budget)
    all_ranks_agree(world, same, f"{distributed.best_fitness} vs {serial.best_fitness}, "
                                 f"evaluations {distributed.evaluations} vs {serial.evaluations}")


@pytest.mark.mpi(min_size=1)
def test_a_resumed_fidelity_scheme_matches_the_uninterrupted_one(world):
    comm = Communicator(world)
    problem = with_fidelity(rows_problem(), 0.125, MARGIN)
    job = validate(CONFIG, comm.size, problem=problem)
    whole, first = build_scheme(comm, job), build_scheme(comm, job)
    whole.initialize(), first.initialize()
    for _ in range(12):
        whole.step()
    for _ in range(6):
        first.step()
    resumed = build_scheme(comm, job)
    resumed.restore(first.island_states(), first.run_state())
    for _ in range(6):
        resumed.step()
    mine, reference = resumed.island_states(), whole.island_states()
    same = all(mine[i]["island"] == reference[i]["island"] and
               (mine[i]["archive"]["fitness"] == reference[i]["archive"]["fitness"]).all() for i in mine)
    all_ranks_agree(world, same, f"islands {sorted(mine)}")


@pytest.mark.mpi(min_size=2)
def test_master_worker_refuses_fidelity(world):
    try:
        _run(Communicator(world), world.size, scheme="master_worker")
        failed = "no error"
    except ValueError as err:
        failed = "" if "expected run.scheme 'island', got 'master_worker'" in str(err) else str(err)
    all_ranks_agree(world, not failed, failed)
