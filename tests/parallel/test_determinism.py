"""Same seed, same island count: bit-identical results on 1, 2 and 4 ranks.

The serial references run on :class:`mpievo.comm.protocol.SelfComm` (the one-rank
implementation of the engine protocol, no MPI), so these tests also check that the
parallel layer needs nothing beyond the protocol.
"""

import pytest
from mpi4py import MPI
from parallel_helpers import small_job

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.parallel import best_genome_bytes, build_scheme, run_job

# every feature that draws random numbers or depends on timing, in one job
FEATURES = {
    "migration": {"topology": "random", "degree": 2, "selection": "random", "replacement": "fair",
                  "unique": True, "interval": 2,
                  "adaptive": {"enabled": True, "minimum": 1, "maximum": 6, "collapse_below": 0.01,
                               "diverse_above": 0.2, "emigrants": True}},
    "engine": {"mutation_sigma": "0.05 + 0.05*i", "crossover": ["interpolate", "sbx", "blend", "uniform"],
               "algorithm": ["ga", "cmaes", "de", "ga"], "dtype": ["float32", "float64", "float64", "float32"]},
}


def test_island_scheme_follows_the_scheme_protocol():
    from mpievo.parallel import Scheme

    assert isinstance(build_scheme(SelfComm(), small_job(1)), Scheme)


def _run(comm, nranks, **tables):
    job = small_job(nranks, **tables)
    result = run_job(job, comm)
    return result


def test_same_seed_same_result_in_one_process():
    comm = SelfComm()
    first, second = _run(comm, 1, **FEATURES), _run(comm, 1, **FEATURES)
    assert best_genome_bytes(first) == best_genome_bytes(second) != b""
    over_mpi = _run(Communicator(MPI.COMM_SELF), 1, **FEATURES)   # the protocol's two implementations
    assert best_genome_bytes(over_mpi) == best_genome_bytes(first)
    other_seed = _run(comm, 1, run={"seed": 8}, **FEATURES)
    assert best_genome_bytes(other_seed) != best_genome_bytes(first)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("tables", [{}, FEATURES], ids=["default", "all-features"])
def test_ranks_give_the_serial_result_bit_for_bit(world, tables):
    comm = Communicator(world)
    distributed = _run(comm, comm.size, **tables)
    serial = _run(SelfComm(), 1, **tables)   # all 4 islands in this process, no MPI
    if comm.rank == 0:
        same = best_genome_bytes(distributed) == best_genome_bytes(serial) \
            and distributed.best_fitness == serial.best_fitness \
            and distributed.evaluations == serial.evaluations \
            and distributed.migrations == serial.migrations
    else:
        same = distributed.best_fitness == serial.best_fitness
    all_ranks_agree(world, same, f"distributed best {distributed.best_fitness} (island {distributed.best_island}) "
                                 f"vs serial {serial.best_fitness} (island {serial.best_island})")


@pytest.mark.mpi(min_size=1)
def test_every_island_state_matches_the_serial_run(world):
    comm = Communicator(world)
    job = small_job(comm.size, **FEATURES)
    distributed, serial = build_scheme(comm, job), build_scheme(SelfComm(), job)
    for scheme in (distributed, serial):
        scheme.initialize()
        for _ in range(job.run.generations):
            scheme.step()
    mine = distributed.island_states()
    reference = serial.island_states()
    same = all(_same_state(mine[i], reference[i]) for i in mine)
    all_ranks_agree(world, same and distributed.run_state() == serial.run_state(),
                    f"islands {sorted(mine)}: {distributed.run_state()} vs {serial.run_state()}")


def _same_state(a, b) -> bool:
    import numpy as np

    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return a == b
