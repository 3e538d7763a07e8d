"""Encoded genomes (engine.genome = delta / seeded) through the schemes: the same
result on any rank count and layout, only recipes travel, resumable elsewhere."""

from pathlib import Path

import numpy as np
import pytest
from genome_helpers import BASES, DIM, MERGE, genome_job
from parallel_helpers import stop_and_checkpoint

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.io import load_latest
from mpievo.parallel import best_genome_bytes, build_scheme, run_job
from mpievo.plan.workloads import scheme_traffic
from mpievo.parallel.runner import RunLoop, RunSettings


def _serial(genome, **tables):
    return run_job(genome_job(1, genome, **tables), SelfComm())


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("genome", ["delta", "seeded"])
def test_encoded_runs_repeat_the_serial_run_bit_for_bit(world, genome):
    comm = Communicator(world)
    result = run_job(genome_job(comm.size, genome), comm)
    serial = _serial(genome)
    same = result.evaluations == serial.evaluations and (
        comm.rank != 0 or best_genome_bytes(result) == best_genome_bytes(serial))
    whole = comm.rank != 0 or (result.best_genome.shape == (DIM,) and result.best_genome.dtype == np.float32)
    value = comm.rank != 0 or np.isclose(MERGE(result.best_genome[None])[0], result.best_fitness, rtol=1e-6)
    all_ranks_agree(world, same and whole and value)


@pytest.mark.mpi(min_size=2)
def test_seeded_groups_ship_recipes_not_genomes(world):
    comm = Communicator(world)
    if comm.size % 2:
        pytest.skip("groups of 2 ranks need an even rank count")
    job = genome_job(comm.size, "seeded", run={"scheme": "hybrid", "ranks_per_island": 2})
    scheme = build_scheme(comm, job)
    try:
        result = RunLoop(comm, scheme, RunSettings(job.run.generations, 6)).run()
        traffic = comm.allgather_object(scheme_traffic(comm, scheme))
    finally:
        scheme.close()
    serial = _serial("seeded")
    same = (result.best_fitness, result.evaluations) == (serial.best_fitness, serial.evaluations)
    # each evaluated child and each migrant moved as a recipe row of 8 * (3 + 3 * 32)
    # bytes (a 1/40 of one float32 genome of DIM genes), plus its fitness
    moved = sum(t.get("evaluation", 0) + t.get("migration", 0) for t in traffic)
    small = 0 < moved < result.evaluations * (8 * (3 + 3 * 32) + 64)
    all_ranks_agree(world, same and small, f"bytes sent {traffic}, {result.evaluations} evaluations")


@pytest.mark.mpi(min_size=1)
def test_seeded_checkpoints_resume_on_another_rank_count(world, tmp_path_factory):
    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("seeded")) if comm.rank == 0 else None)
    job = genome_job(comm.size, "seeded")
    stopped = stop_and_checkpoint(comm, job, directory)
    resumed = None
    if comm.rank == 0:
        restored = load_latest(directory, islands=list(range(4)))
        resumed = run_job(genome_job(1, "seeded"), SelfComm(), restored=restored)
    straight = _serial("seeded")
    ok = stopped.stopped and (comm.rank != 0 or best_genome_bytes(resumed) == best_genome_bytes(straight))
    all_ranks_agree(world, ok)


@pytest.mark.mpi(min_size=1)
def test_checkpoints_hold_recipes_and_the_bases_by_checksum(world, tmp_path_factory):
    import h5py

    from mpievo.evo.genomes import checksum

    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("h5")) if comm.rank == 0 else None)
    stop_and_checkpoint(comm, genome_job(comm.size, "seeded"), directory)
    found, big = [], []
    if comm.rank == 0:
        for path in sorted(Path(directory).rglob("*.h5")):
            with h5py.File(path, "r") as f:       # plain h5py: no mpievo needed to read it
                datasets = []
                f.visititems(lambda name, obj: datasets.append((name, obj)) if isinstance(obj, h5py.Dataset)
                             else None)
                for name, dataset in datasets:
                    if name.endswith("archive/genomes"):
                        genome = f[name.rsplit("/archive/", 1)[0] + "/genome"]
                        found.append((dataset.shape[1], dataset.dtype == np.float64,
                                      _text(genome["encoding"][()]), _text(genome["bases_checksum"][()])))
                    if dataset.size >= DIM:                 # never the bases, nor a genome
                        big.append(name)
    expected = (3 + 3 * 32, True, "seeded", checksum(BASES))
    ok = comm.rank != 0 or (len(found) == 4 and all(row == expected for row in found) and not big)
    all_ranks_agree(world, ok, f"{found}, large datasets {big}")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_a_job_table_gives_any_problem_its_bases(tmp_path):
    from mpievo.config import validate
    from mpievo.schema import ConfigError

    path = tmp_path / "bases.npy"
    np.save(path, BASES[:2, :50])
    table = {"run": {"islands": 2, "generations": 5},
             "problem": {"name": "sphere", "dim": 50, "bases": str(path)},
             "engine": {"genome": "seeded", "capacity": 4, "batch_size": 4}}
    result = run_job(validate(table, 1), SelfComm())
    assert result.best_genome.shape == (50,) and result.best_fitness < float((BASES[1, :50] ** 2).sum())
    table["problem"]["dim"] = 60
    with pytest.raises(ConfigError, match=r"problem.bases: expected float32/float64 bases of shape \(count, 60\)"):
        validate(table, 1)
    table["problem"]["bases"] = str(tmp_path / "missing.npy")
    with pytest.raises(ConfigError, match="problem.bases: expected a readable .npy file"):
        validate(table, 1)
