"""engine.immigration_patience: an island takes immigrants only once its best stalled."""

import pytest
from parallel_helpers import small_job

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError
from mpievo.parallel import best_genome_bytes, run_job

# the portfolio's shape: CMA-ES islands always take immigrants, DE islands only when stalled
MIXED = {"algorithm": ["cmaes", "de", "cmaes", "de"], "immigration_patience": [0, 4, 0, 4]}


def patient_job(nranks: int, **engine):
    return small_job(nranks, run={"generations": 30}, engine={**MIXED, **engine},
                     migration={"interval": 2, "emigrants": 2})


def test_patient_islands_refuse_immigrants_that_the_others_take():
    patient = run_job(patient_job(1), SelfComm())
    eager = run_job(patient_job(1, immigration_patience=0), SelfComm())
    taken = [i["immigrants"] for i in patient.islands]
    always = [i["immigrants"] for i in eager.islands]
    assert taken[1] < always[1] and taken[3] < always[3], (taken, always)
    assert taken[0] > 0 and taken[2] > 0, taken


def test_patience_is_a_count_of_generations():
    with pytest.raises(ConfigError, match="engine.immigration_patience"):
        small_job(1, engine={"immigration_patience": -1})


@pytest.mark.mpi(min_size=1)
def test_a_patient_run_matches_the_serial_run_bit_for_bit(world):
    comm = Communicator(world)
    distributed = run_job(patient_job(comm.size), comm)
    serial = run_job(patient_job(1), SelfComm())
    same = distributed.best_fitness == serial.best_fitness
    if comm.rank == 0:
        same = same and best_genome_bytes(distributed) == best_genome_bytes(serial) \
            and distributed.islands == serial.islands
    all_ranks_agree(world, same, f"{comm.size} ranks: best {distributed.best_fitness}, serial {serial.best_fitness}")
