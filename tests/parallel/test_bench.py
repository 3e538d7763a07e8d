"""The engine benchmark's keys and its exact byte accounting (a smoke run, not a timing)."""

import pytest

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.parallel.bench import bench_engine, migration_cost


@pytest.mark.mpi(min_size=2)
def test_bench_engine_quick_run_reports_every_key(world, tmp_path_factory):
    comm = Communicator(world)
    path = comm.bcast_object(str(tmp_path_factory.mktemp("bench") / "engine.json") if comm.rank == 0 else None)
    result = bench_engine(comm, path if comm.rank == 0 else None, quick=True)
    keys = {"evals_per_s", "pygmo_evals_per_s", "weak_scaling_efficiency", "migration", "ranks"}
    ok = keys <= set(result) and result["evals_per_s"] > 0 and result["weak_scaling_efficiency"] > 0
    if comm.rank == 0:
        import json

        ok = ok and json.loads(open(path).read())["ranks"] == comm.size
    all_ranks_agree(world, ok, f"{sorted(result)}")


@pytest.mark.mpi(min_size=1)
def test_migration_bytes_are_exact(world):
    comm = Communicator(world)
    cost = migration_cost(comm, 1000, repeats=2, k=2)
    # one migrant block (count, 4 records x k, k float32 genomes) and one block of the
    # receiver's 4 member hashes (elite-unique) per rank per migration
    expected = (8 + 32 * 2 + 2 * 1000 * 4) + 8 * (4 + 1) if comm.size > 1 else 0
    all_ranks_agree(world, cost["bytes_per_migration_per_rank"] == expected, f"{cost}")
