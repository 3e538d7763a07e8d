"""bfloat16 / float16 genomes in runs: checkpoints, resume, migration over MPI, rank counts."""

import dataclasses

import h5py
import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI
from parallel_helpers import StopAt, small_job

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.io import Checkpointer, load_latest
from mpievo.parallel import RunLoop, RunSettings, best_genome_bytes, build_scheme, run_job
from mpievo.parallel.packing import EdgeLayout

# every GA crossover, random topology and selection, elite-unique fair replacement
HALF_JOB = {
    "migration": {"topology": "random", "degree": 2, "selection": "random", "replacement": "fair",
                  "unique": True, "interval": 2},
    "engine": {"dtype": "bfloat16", "crossover": ["interpolate", "sbx", "blend", "uniform"],
               "bounds": ["clip", "reflect", "resample", "clip"], "mutation_sigma": "0.05 + 0.05*i"},
}


def _job(nranks, dtype="bfloat16", **tables):
    engine = {**HALF_JOB["engine"], "dtype": dtype}
    return small_job(nranks, migration=HALF_JOB["migration"], engine=engine, **tables)


def test_migrant_genomes_take_half_the_bytes_of_float32():
    for dtype in (ml_dtypes.bfloat16, np.float16):
        half, single = EdgeLayout(3, 100, dtype), EdgeLayout(3, 100, np.float32)
        assert half.empty_genomes().nbytes * 2 == single.empty_genomes().nbytes
        assert half.nbytes == single.nbytes    # the records (fitness, ids, ...) are the same


@pytest.mark.parametrize("dtype, stored", [("bfloat16", np.uint16), ("float16", np.float16)])
def test_a_half_run_stops_checkpoints_and_resumes_bit_for_bit(tmp_path, dtype, stored):
    comm = Communicator(MPI.COMM_SELF)
    job = _job(1, dtype)
    scheme = build_scheme(comm, job)
    stopped = RunLoop(comm, scheme, RunSettings(job.run.generations, 5), config=job.config,
                      checkpointer=Checkpointer(tmp_path, comm=comm), stop=StopAt(scheme, 7, 0)).run()
    assert stopped.stopped and stopped.generations == 7
    ckpt = load_latest(tmp_path)
    resumed = run_job(_job(1, dtype), comm, restored=ckpt)
    straight = run_job(_job(1, dtype), comm)
    assert resumed.best_genome.dtype == straight.best_genome.dtype == np.dtype(getattr(ml_dtypes, dtype, dtype))
    assert best_genome_bytes(resumed) == best_genome_bytes(straight)
    assert resumed.best_fitness == straight.best_fitness
    # HDF5 has no bfloat16: raw uint16 bits named by an attribute; float16 is native
    (rank_file,) = tmp_path.glob("*/rank-*.h5")
    with h5py.File(rank_file, "r") as f:
        genomes = f["islands/0/archive/genomes"]
        assert genomes.dtype == stored and genomes.dtype.itemsize == 2
        assert (genomes.attrs.get("mpievo_dtype"), genomes.attrs.get("mpievo_storage")) == (
            ("bfloat16", "raw-bits") if dtype == "bfloat16" else (None, None))


# half islands migrating to and from float32/float64 islands of other algorithms
MIXED = {"dtype": ["bfloat16", "float32", "float16", "float64"], "algorithm": ["ga", "de", "ga", "cmaes"]}


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("mixed", [False, True], ids=["bfloat16", "mixed-dtypes"])
def test_half_runs_give_the_serial_result_bit_for_bit(world, mixed):
    def job(nranks):
        return small_job(nranks, migration=HALF_JOB["migration"], engine=MIXED) if mixed else _job(nranks)

    comm = Communicator(world)
    distributed = run_job(job(comm.size), comm)
    serial = run_job(job(1), SelfComm())   # all 4 islands in this process, no MPI
    if comm.rank == 0:
        same = best_genome_bytes(distributed) == best_genome_bytes(serial) != b"" \
            and (mixed or distributed.best_genome.dtype == ml_dtypes.bfloat16) \
            and distributed.best_fitness == serial.best_fitness \
            and distributed.evaluations == serial.evaluations \
            and distributed.migrations == serial.migrations > 0
    else:
        same = distributed.best_fitness == serial.best_fitness
    all_ranks_agree(world, same, f"distributed best {distributed.best_fitness} vs serial {serial.best_fitness}")


@pytest.mark.mpi(min_size=1)
def test_half_island_states_match_the_serial_run(world):
    comm = Communicator(world)
    job = _job(comm.size, "float16")
    distributed, serial = build_scheme(comm, job), build_scheme(SelfComm(), job)
    for scheme in (distributed, serial):
        scheme.initialize()
        for _ in range(job.run.generations):
            scheme.step()
    mine, reference = distributed.island_states(), serial.island_states()
    same = all(mine[i]["archive"]["genomes"].dtype == np.float16
               and mine[i]["archive"]["genomes"].tobytes() == reference[i]["archive"]["genomes"].tobytes()
               and mine[i]["archive"]["ids"].tobytes() == reference[i]["archive"]["ids"].tobytes()
               for i in mine)
    all_ranks_agree(world, same and distributed.run_state() == serial.run_state(), f"islands {sorted(mine)}")


@pytest.mark.mpi(min_size=2)
def test_hybrid_groups_evaluate_bfloat16_blocks(world):
    """A group's leader hands each rank a block of bfloat16 rows (the dtype travels by name)."""
    if world.size % 2:
        pytest.skip("groups of 2 ranks need an even rank count")
    comm = Communicator(world)
    hybrid = run_job(_job(comm.size, run={"scheme": "hybrid", "ranks_per_island": 2}), comm)
    serial = run_job(_job(1), SelfComm())
    ok = hybrid.evaluations == serial.evaluations and hybrid.best_fitness == serial.best_fitness
    if comm.rank == 0:
        ok = ok and best_genome_bytes(hybrid) == best_genome_bytes(serial)
    all_ranks_agree(world, ok, f"hybrid best {hybrid.best_fitness} vs serial {serial.best_fitness}")


def test_a_long_bfloat16_best_genome_is_saved_as_its_float32_values(tmp_path):
    from mpievo.parallel.output import INLINE_GENOME_MAX, OutputWriter

    genome = np.linspace(-3, 3, INLINE_GENOME_MAX + 1).astype(ml_dtypes.bfloat16)
    result = dataclasses.replace(run_job(_job(1), SelfComm()), best_genome=genome)
    OutputWriter(tmp_path, {}, notice=lambda text: None).on_finish(result)
    saved = np.load(tmp_path / "best_genome.npy")
    assert saved.dtype == np.float32 and saved.tobytes() == genome.astype(np.float32).tobytes()
