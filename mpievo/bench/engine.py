"""``mpievo bench engine``: island-engine throughput, weak scaling and migration cost.

Run under ``mpievo launch -n P -- mpievo bench engine [--json PATH]``. Three
measurements in one run (rank 0 prints them; every rank returns the same dict):

1. One island against pygmo's ``sade``, like for like (same fitness callable, dtype,
   dim and evaluation count), plus mpievo's overhead per evaluation:
   :func:`mpievo.bench.engine_vs_pygmo.compare`, on rank 0 while the other ranks sleep;
   then, algorithm for algorithm, one jDE island against pygmo's jDE (``sade`` variant 7,
   adaptation 1, both with a population of 20) with the same budget:
   :func:`mpievo.bench.de_vs_pygmo.compare`, also on rank 0.
2. Weak scaling with a 5 ms and a 0.5 ms fitness (a sleep-free CPU burn per genome):
   one island per rank, a fixed number of evaluations per island, the full run loop
   (migration along a ring every 3 generations, logging, stop votes), on the first
   P = 1, 2, 4, ... ranks (and all of them) while the others sleep. Efficiency
   ``T(1) / T(P)``; the engine's share ``1 - (time inside the fitness) / T(P)``
   shows what the engine costs once the burn no longer hides it.
3. Time and bytes per migration (one island per rank, ring, default policy, float32
   genomes) for 1000 and 10**6 genes; with one rank, two islands migrate in memory.

Each rank limits BLAS to one thread, as ``mpievo run`` does. The numbers depend on
the machine's load and core count (more ranks than cores share them), reported with
them.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from . import de_vs_pygmo as de_bench
from . import engine_vs_pygmo as engine_bench
from ..evo.engine_config import EngineConfig
from ..evo.migration_policy import MigrationPolicy
from ..evo.problems import Problem, make_problem
from ..parallel.migrator import IslandShape, Migrator
from ..parallel.runner import RunLoop, RunSettings
from ..parallel.scheme import IslandScheme
from ..rules.schedule import MigrationSchedule
from ..parallel.threads import limit_blas_threads
from ..plan.workloads import sleep_until_all_arrive
from ..rules.topology import build_topology, ring

BURN_MS = (5.0, 0.5)
BURN_SECONDS = 1.0   # fitness time per island per weak-scaling run
SCALING = dict(dim=100, capacity=8, batch=8, interval=3)


class BurnFitness:
    """Sphere values after burning ``ms`` milliseconds of this thread's CPU per genome;
    ``seconds`` adds up the wall time spent inside."""

    def __init__(self, ms: float):
        self.burn = ms / 1000.0
        self.seconds = 0.0

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        for _ in range(len(genomes)):
            end = time.thread_time() + self.burn
            while time.thread_time() < end:
                pass
        values = np.einsum("ij,ij->i", genomes, genomes, dtype=np.float64)
        self.seconds += time.perf_counter() - start
        return values


class _NoStop:
    """A stop flag that is never raised (keeps the stop votes in the measured loop)."""

    requested = False


def _on_first(comm, ranks: int, work):
    """Run ``work(sub)`` on a Communicator of the first ``ranks`` ranks while the others
    sleep; every rank gets rank 0's result."""
    from mpi4py import MPI

    from ..comm import Communicator

    part = comm.mpi_comm.Split(0 if comm.rank < ranks else MPI.UNDEFINED, comm.rank)
    result = None
    if comm.rank < ranks:
        sub = Communicator(part, timeout=comm.timeout)
        try:
            result = work(sub)
        finally:
            sub.free()
            part.Free()
    sleep_until_all_arrive(comm.mpi_comm)
    with comm.purpose("control"):
        return comm.bcast_object(result)


# ---------------------------------------------------------------- 1. throughput
def single_island_throughput(comm, dim: int = 1000, evaluations: int = 128_000, repeats: int = 3) -> dict:
    """:func:`mpievo.bench.engine_vs_pygmo.compare` on rank 0 (see the module docstring)."""
    return _on_first(comm, 1, lambda _: engine_bench.compare(dim, evaluations, repeats))


def de_throughput(comm, dim: int = 1000, evaluations: int = 128_000, repeats: int = 3) -> dict:
    """:func:`mpievo.bench.de_vs_pygmo.compare` (jDE vs pygmo's jDE) on rank 0."""
    return _on_first(comm, 1, lambda _: de_bench.compare(dim, evaluations, repeats))


# ---------------------------------------------------------------- 2. weak scaling
def timed_run(comm, *, generations: int, ms: float, dim: int = 100, capacity: int = 8,
              batch: int = 8, interval: int = 3) -> dict:
    """One island per rank of ``comm`` through the full run loop.

    Returns:
        dict with seconds (slowest rank), fitness_seconds (mean over ranks of the time
        inside the fitness), evaluations_per_island, migrations.
    """
    fitness = BurnFitness(ms)
    problem = Problem(fitness, dim, -5.0, 5.0, name=f"burn{ms:g}ms")
    engines = EngineConfig(capacity=capacity, batch_size=batch).resolve_all(comm.size)
    schedule = MigrationSchedule(build_topology("ring", comm.size), interval)
    scheme = IslandScheme(comm, problem, engines, seed=1, policy=MigrationPolicy(), schedule=schedule)
    comm.barrier()
    start = time.perf_counter()
    result = RunLoop(comm, scheme, RunSettings(generations, log_every=4), stop=_NoStop()).run()
    elapsed = time.perf_counter() - start
    with comm.purpose("control"):
        gathered = comm.allgather_object((elapsed, fitness.seconds))
    return {"seconds": max(e for e, _ in gathered),
            "fitness_seconds": sum(f for _, f in gathered) / len(gathered),
            "evaluations_per_island": result.evaluations // comm.size, "migrations": result.migrations}


def rank_counts(size: int) -> list[int]:
    """1, 2, 4, ... below ``size``, and ``size``."""
    counts = [1 << k for k in range(size.bit_length()) if 1 << k < size]
    return counts + [size]


def scaling_summary(ms: float, runs: dict[int, list[dict]]) -> dict:
    """Medians per rank count of :func:`timed_run` results (``runs[P]``, P = 1 included).

    Per P: ``seconds`` (median T(P)), ``efficiency`` ``T(1) / T(P)`` (None for P = 1),
    ``engine_share`` the median over runs of ``1 - fitness_seconds / seconds``.
    """
    t1 = statistics.median(r["seconds"] for r in runs[1])
    rows = []
    for ranks in sorted(runs):
        tp = statistics.median(r["seconds"] for r in runs[ranks])
        rows.append({
            "ranks": ranks, "seconds": tp, "runs_s": [r["seconds"] for r in runs[ranks]],
            "efficiency": t1 / tp if ranks > 1 else None,
            "engine_share": statistics.median(1.0 - r["fitness_seconds"] / r["seconds"] for r in runs[ranks]),
            "migrations": runs[ranks][0]["migrations"],
        })
    first = runs[1][0]
    return {"fitness_ms": ms, "evaluations_per_island": first["evaluations_per_island"], "rows": rows}


def weak_scaling(comm, ms: float, *, generations: int, repeats: int = 3) -> dict:
    """:func:`scaling_summary` for one fitness cost at every :func:`rank_counts` (collective)."""
    runs = {p: [] for p in rank_counts(comm.size)}
    for _ in range(repeats):   # interleaved, so that machine noise hits every P alike
        for ranks in runs:
            runs[ranks].append(_on_first(comm, ranks, lambda sub: timed_run(
                sub, generations=generations, ms=ms, **SCALING)))
    return scaling_summary(ms, runs)


# ---------------------------------------------------------------- 3. migration cost
def migration_cost(comm, dim: int, *, repeats: int = 10, k: int = 2) -> dict:
    """Seconds and bytes per migration along a ring, one island per rank (two on one rank)."""
    n_islands = max(comm.size, 2)
    problem = make_problem("sphere", dim)
    engine = EngineConfig(capacity=max(4, k + 2), batch_size=2)
    scheme = IslandScheme(comm, problem, engine.resolve_all(n_islands), seed=1)
    scheme.initialize()
    shapes = [IslandShape(dim, np.dtype(engine.dtype), engine.capacity)] * n_islands
    migrator = Migrator(comm, scheme.islands, shapes, MigrationPolicy(k), seed=1)
    destinations = ring(n_islands)
    migrator.migrate(0, destinations)   # first-touch of the buffers outside the timing
    before = comm.traffic.get("migration", 0)
    comm.barrier()
    start = time.perf_counter()
    for g in range(1, repeats + 1):
        migrator.migrate(g, destinations)
    elapsed = time.perf_counter() - start
    sent = comm.traffic.get("migration", 0) - before
    with comm.purpose("control"):
        gathered = comm.allgather_object((elapsed, sent))
    return {
        "dim": dim, "islands": n_islands, "emigrants_per_edge": k, "dtype": engine.dtype,
        "seconds_per_migration": max(e for e, _ in gathered) / repeats,
        "bytes_per_migration_per_rank": max(s for _, s in gathered) // repeats,
        "bytes_per_migration_total": sum(s for _, s in gathered) // repeats,
        "genome_bytes": dim * np.dtype(engine.dtype).itemsize,
    }


# ---------------------------------------------------------------- the whole benchmark
def bench_engine(comm, json_path: str | os.PathLike | None = None, *, quick: bool = False) -> dict:
    """Run the three measurements (collective) and return them; rank 0 prints a summary.

    Args:
        comm: an mpievo Communicator.
        json_path: where rank 0 writes the result as JSON (None: nowhere).
        quick: much shorter runs (for tests), same keys.

    Returns:
        dict with ``throughput`` (:func:`mpievo.bench.engine_vs_pygmo.compare`), ``de_throughput``
        (:func:`mpievo.bench.de_vs_pygmo.compare`, the same budget and repeats), ``weak_scaling``
        (one :func:`scaling_summary` per fitness cost of :data:`BURN_MS`),
        ``migration`` (one entry per dimension), ``ranks``, ``cores``, ``loadavg``.
    """
    burn_s = 0.05 if quick else BURN_SECONDS
    with contextlib.ExitStack() as stack:
        threads = limit_blas_threads(1, stack)
        budget = (1280, 1) if quick else (128_000, 3)   # evaluations per run, repeats
        throughput = single_island_throughput(comm, 1000, *budget)
        de = de_throughput(comm, 1000, *budget)
        timed_run(comm, generations=1, ms=0.0, **SCALING)   # load kernels, warm MPI
        scaling = [weak_scaling(comm, ms, repeats=1 if quick else 3,
                                generations=max(1, round(burn_s / (SCALING["batch"] * ms / 1e3))))
                   for ms in BURN_MS]
        dims = (1000, 10**5) if quick else (1000, 10**6)
        migrations = [migration_cost(comm, d, repeats=2 if quick else (20 if d <= 1000 else 5)) for d in dims]
    result = {
        "ranks": comm.size, "cores": len(os.sched_getaffinity(0)), "loadavg": list(os.getloadavg()),
        "blas_threads": threads, "throughput": throughput, "de_throughput": de, "weak_scaling": scaling,
        "migration": migrations,
    }
    if comm.rank == 0:
        print(format_report(result), flush=True)
        if json_path is not None:
            Path(json_path).write_text(json.dumps(result, indent=1) + "\n")
    return result


def format_report(result: dict) -> str:
    """Human-readable lines for a :func:`bench_engine` result."""
    lines = [f"mpievo bench engine: {result['ranks']} ranks on {result['cores']} cores, "
             f"load average {result['loadavg'][0]:.2f}",
             "  one island vs pygmo, like for like:"]
    lines += engine_bench.format_lines(result["throughput"])
    lines.append("  one jDE island vs pygmo's jDE, algorithm for algorithm:")
    lines += de_bench.format_lines(result["de_throughput"])
    s = SCALING
    lines.append(f"  weak scaling, one island per rank ({s['dim']}-D, {s['batch']} children per generation, "
                 f"ring migration every {s['interval']} generations; engine = time outside the fitness):")
    for summary in result["weak_scaling"]:
        cells = [f"P={row['ranks']} {row['seconds']:.3f} s"
                 + ("" if row["efficiency"] is None else f" efficiency {row['efficiency']:.3f}")
                 + f" engine {100 * row['engine_share']:.1f}%" for row in summary["rows"]]
        lines.append(f"    {summary['fitness_ms']:g} ms fitness, {summary['evaluations_per_island']:,} "
                     f"evaluations per island: " + "; ".join(cells))
    for m in result["migration"]:
        lines.append(f"  migration, dim {m['dim']:,} ({m['islands']} islands, ring, k={m['emigrants_per_edge']}): "
                     f"{m['seconds_per_migration'] * 1e3:.3f} ms, {m['bytes_per_migration_per_rank']:,} "
                     f"bytes per rank")
    return "\n".join(lines)
