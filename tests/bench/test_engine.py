"""The engine benchmark: its scaling arithmetic, a quick run's report, exact migration bytes."""

import json

import numpy as np
import pytest

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.bench.engine import (BURN_MS, BurnFitness, bench_engine, migration_cost, rank_counts,
                                   scaling_summary)


def _run(seconds, fitness_seconds):
    return {"seconds": seconds, "fitness_seconds": fitness_seconds, "evaluations_per_island": 16,
            "migrations": 2}


def test_scaling_summary_from_fixed_timings():
    runs = {1: [_run(3.0, 2.7), _run(2.0, 1.9), _run(4.0, 3.2)],    # median T(1) = 3.0
            2: [_run(4.0, 3.0), _run(5.0, 4.5), _run(3.5, 2.8)]}    # median T(2) = 4.0
    summary = scaling_summary(5.0, runs)
    one, two = summary["rows"]
    assert (one["ranks"], one["seconds"], one["efficiency"]) == (1, 3.0, None)
    assert (two["ranks"], two["seconds"]) == (2, 4.0)
    assert two["efficiency"] == pytest.approx(0.75)
    # engine share: median of 1 - fitness/seconds per run (0.1, 0.05, 0.2 and 0.25, 0.1, 0.2)
    assert one["engine_share"] == pytest.approx(0.1) and two["engine_share"] == pytest.approx(0.2)
    assert summary["fitness_ms"] == 5.0 and summary["evaluations_per_island"] == 16


def test_rank_counts_are_powers_of_two_and_the_size():
    assert rank_counts(1) == [1] and rank_counts(2) == [1, 2]
    assert rank_counts(4) == [1, 2, 4] and rank_counts(6) == [1, 2, 4, 6]


def test_burn_fitness_burns_and_accounts_its_time():
    fitness = BurnFitness(2.0)
    genomes = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(fitness(genomes), [1.0, 13.0, 41.0])
    assert fitness.seconds >= 3 * 2e-3


@pytest.mark.mpi(min_size=2)
def test_bench_engine_quick_run_reports_every_part(world, tmp_path_factory):
    comm = Communicator(world)
    path = comm.bcast_object(str(tmp_path_factory.mktemp("bench") / "engine.json") if comm.rank == 0 else None)
    result = bench_engine(comm, path if comm.rank == 0 else None, quick=True)
    throughput = result["throughput"]
    ok = result["ranks"] == comm.size and throughput["evaluations"] == 1280
    ok = ok and all(side["evaluations"] == 1280 for side in throughput["variants"].values())
    de = result["de_throughput"]    # jDE vs pygmo's jDE: the same budget, every side
    ok = ok and de["evaluations"] == 1280 and de["same_budget"] and de["population"] == 20
    ok = ok and [s["fitness_ms"] for s in result["weak_scaling"]] == list(BURN_MS)
    for summary in result["weak_scaling"]:
        rows = summary["rows"]
        ok = ok and [row["ranks"] for row in rows] == rank_counts(comm.size)
        ok = ok and all(0.0 <= row["engine_share"] <= 1.0 for row in rows)
        ok = ok and all(row["efficiency"] > 0 for row in rows[1:])
    if comm.rank == 0:
        ok = ok and json.loads(open(path).read())["ranks"] == comm.size
    all_ranks_agree(world, ok, f"{result}")


@pytest.mark.mpi(min_size=1)
def test_migration_bytes_are_exact(world):
    comm = Communicator(world)
    cost = migration_cost(comm, 1000, repeats=2, k=2)
    # one migrant block (count, 4 records x k, k float32 genomes) and one block of the
    # receiver's 4 member hashes (elite-unique) per rank per migration
    expected = (8 + 32 * 2 + 2 * 1000 * 4) + 8 * (4 + 1) if comm.size > 1 else 0
    all_ranks_agree(world, cost["bytes_per_migration_per_rank"] == expected, f"{cost}")
