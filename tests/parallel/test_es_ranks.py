"""ES islands over ranks: the replicated scheme (each rank evaluates its share of the
members, only the fitness travels) gives the one-process result bit for bit on any
rank count, resumes on another layout, and sends P float64 per generation whatever
the genome size."""

import pytest
from parallel_helpers import small_job, stop_and_checkpoint

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.io import load_latest
from mpievo.parallel import best_genome_bytes, run_job
from mpievo.parallel.groups import islands_to_load

ES_ENGINE = {"algorithm": "es", "population": 2, "es_popsize": 10, "es_sigma": 0.1, "dtype": "float64"}


def es_job(nranks, dim=6, generations=12, **run):
    return small_job(nranks, run={"scheme": "replicated", "islands": 2, "generations": generations, **run},
                     problem={"name": "sphere", "dim": dim, "shift": True, "rotate": False},
                     engine=ES_ENGINE, migration={"interval": 4, "emigrants": 1})


@pytest.mark.mpi(min_size=2)
def test_es_over_ranks_equals_one_process_and_resumes(world, tmp_path_factory):
    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("es")) if comm.rank == 0 else None)
    job = es_job(comm.size)
    whole = run_job(job, comm)
    stopped = stop_and_checkpoint(comm, job, directory)
    restored = load_latest(directory, islands=islands_to_load(comm, job.run, 2), comm=comm)
    resumed = run_job(job, comm, restored=restored)
    serial = run_job(es_job(1), SelfComm())
    ok = stopped.stopped and whole.evaluations == serial.evaluations == resumed.evaluations
    if comm.rank == 0:
        ok = ok and best_genome_bytes(whole) == best_genome_bytes(serial) == best_genome_bytes(resumed)
    all_ranks_agree(world, ok, f"es over {comm.size} ranks differs from one process")


def bytes_by_dim(world, dims, run, purpose: str) -> dict:
    """Bytes this rank sent under ``purpose`` while ``run(comm, dim)`` ran, per genome size."""
    sent = {}
    for dim in dims:
        comm = Communicator(world)
        run(comm, dim)
        sent[dim] = comm.traffic.get(purpose, 0)
    return sent


@pytest.mark.mpi(min_size=2)
def test_only_the_fitness_travels_whatever_the_genome_size(world):
    sent = bytes_by_dim(world, (8, 4096), lambda comm, dim: run_job(es_job(comm.size, dim=dim, generations=3), comm),
                        "evaluation")
    ok = sent[8] == sent[4096] and 0 < sent[8] <= 2 * 3 * 10 * 8 + 2 * 8   # <= P float64 per island-generation
    all_ranks_agree(world, ok, f"evaluation bytes by genome size: {sent}")
