"""The replicated scheme: every rank holds every island, evaluates a row block of each
batch and all-gathers the fitness; bit-identical to the island model, resumable."""

import pytest
from mpi4py import MPI
from parallel_helpers import small_job, stop_and_checkpoint
from test_hybrid import FEATURES

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.io import load_latest
from mpievo.parallel import best_genome_bytes, build_scheme, run_job
from mpievo.parallel.groups import islands_to_load
from mpievo.parallel.replicated import ReplicatedScheme

REPLICATED = {"scheme": "replicated", "islands": 4}


def test_replicated_islands_default_to_one_and_load_every_island():
    run = validate({"run": {"scheme": "replicated"}}, 4).run
    assert run.islands == 1
    assert islands_to_load(SelfComm(), run, 3) == [0, 1, 2]


@pytest.mark.mpi(min_size=1)
def test_replicas_give_the_serial_result_and_resume_on_another_scheme(world, tmp_path_factory):
    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    job = small_job(comm.size, run=REPLICATED, **FEATURES)
    scheme = build_scheme(comm, job)
    replicated = comm.size == 1 or isinstance(scheme, ReplicatedScheme)
    whole = run_job(job, comm)
    stopped = stop_and_checkpoint(comm, job, directory)
    # every rank loads every island and continues to the same result
    restored = load_latest(directory, islands=islands_to_load(comm, job.run, 4), comm=comm)
    resumed = run_job(job, comm, restored=restored)
    serial = run_job(small_job(1, **FEATURES), SelfComm())
    ok = replicated and stopped.stopped and whole.evaluations == serial.evaluations == resumed.evaluations
    if comm.rank == 0:   # and as 4 islands in one process
        as_islands = run_job(small_job(1, **FEATURES), SelfComm(), restored=load_latest(directory))
        ok = ok and best_genome_bytes(whole) == best_genome_bytes(serial) == best_genome_bytes(resumed) \
            == best_genome_bytes(as_islands) and whole.islands == serial.islands
    all_ranks_agree(world, ok, "replicated differs from serial")
