"""``mpievo bench engine``: island-engine throughput, weak scaling and migration cost.

Run under ``mpiexec -n 2 mpievo bench engine [--json PATH]``. Three measurements,
side by side in one run (rank 0 prints them and returns the same dict everywhere):

1. Evaluations per second of one island with default settings on the 1000-D sphere,
   and of pygmo's ``sade`` (population 20) on the same function, interleaved
   (:func:`mpievo.evo.bench.compare`; rank 0 only, the other ranks sleep).
2. Weak-scaling efficiency ``T(1 rank) / T(P ranks)``: one island per rank, a fixed
   number of evaluations per island, a fitness that burns 5 ms of CPU per genome, the
   full run loop (migration, logging, stop votes). T(1 rank) runs on rank 0 alone
   while the others sleep (not spinning in MPI, which would take a core).
3. Time and bytes per migration (one island per rank, ring, default policy, float32
   genomes) for 1000 and 10**6 genes; with one rank, two islands migrate in memory.

Each rank limits BLAS to one thread, as ``mpievo run`` does. The numbers depend on
the machine's load, which is reported with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from ..evo.config import EngineConfig
from ..evo.problems import Problem, make_problem
from .migration import IslandShape, MigrationPolicy, Migrator
from .runner import RunLoop, RunSettings
from .scheme import IslandScheme, MigrationSchedule
from .threads import limit_blas_threads
from .topology import ring

BURN_MS = 5.0


class BurnFitness:
    """Sphere values after burning ``ms`` milliseconds of this thread's CPU per genome."""

    def __init__(self, ms: float = BURN_MS):
        self.seconds = ms / 1000.0

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        for _ in range(len(genomes)):
            end = time.thread_time() + self.seconds
            while time.thread_time() < end:
                pass
        return np.einsum("ij,ij->i", genomes, genomes, dtype=np.float64)


class _NoStop:
    """A stop flag that is never raised (keeps the stop votes in the measured loop)."""

    requested = False


@contextlib.contextmanager
def _self_comm(comm):
    """A one-rank Communicator for this process (freed afterwards)."""
    from mpi4py import MPI

    from ..comm import Communicator

    alone = Communicator(MPI.COMM_SELF, timeout=comm.timeout)
    try:
        yield alone
    finally:
        alone.free()


def _on_root(comm, work):
    """Run ``work()`` on rank 0 while the other ranks sleep; every rank gets its result."""
    result = work() if comm.rank == 0 else None
    _sleep_until_all_arrive(comm)
    with comm.purpose("control"):
        return comm.bcast_object(result)


def _sleep_until_all_arrive(comm) -> None:
    # MPI's blocking barrier spins and would steal the core rank 0 is measuring on
    request = comm.mpi_comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)


# ---------------------------------------------------------------- 1. throughput
def single_island_throughput(comm, dim: int = 1000, seconds: float = 2.0, repeats: int = 3) -> dict:
    """Default engine vs pygmo sade on the sphere, on rank 0 (see the module docstring)."""
    from ..evo.bench import compare

    return _on_root(comm, lambda: compare(dim=dim, seconds=seconds, repeats=repeats))


# ---------------------------------------------------------------- 2. weak scaling
def _burn_scheme(comm, n_islands: int, *, dim: int, capacity: int, batch: int, ms: float) -> IslandScheme:
    problem = Problem(BurnFitness(ms), dim, -5.0, 5.0, name=f"burn{ms:g}ms")
    engine = EngineConfig(capacity=capacity, batch_size=batch)
    return IslandScheme(comm, problem, engine, n_islands=n_islands, seed=1,
                        policy=MigrationPolicy(), schedule=MigrationSchedule("ring", 3))


def timed_run(comm, *, generations: int, dim: int = 100, capacity: int = 8, batch: int = 8,
              ms: float = BURN_MS) -> dict:
    """One island per rank of ``comm`` through the full run loop; wall time and evaluations."""
    scheme = _burn_scheme(comm, comm.size, dim=dim, capacity=capacity, batch=batch, ms=ms)
    comm.barrier()
    start = time.perf_counter()
    result = RunLoop(comm, scheme, RunSettings(generations, log_every=4), stop=_NoStop()).run()
    elapsed = time.perf_counter() - start
    with comm.purpose("control"):
        elapsed = max(comm.allgather_object(elapsed))
    return {"seconds": elapsed, "evaluations_per_island": result.evaluations // comm.size,
            "migrations": result.migrations}


def weak_scaling(comm, *, generations: int = 24, repeats: int = 3, ms: float = BURN_MS) -> dict:
    """``T(1 rank) / T(P ranks)`` with a fixed number of evaluations per island (medians)."""
    def alone():
        with _self_comm(comm) as one:
            return timed_run(one, generations=generations, ms=ms)

    singles, alls = [], []
    timed_run(comm, generations=1, ms=0.0)   # load kernels and warm MPI outside the timing
    for _ in range(repeats):
        singles.append(_on_root(comm, alone))
        alls.append(timed_run(comm, generations=generations, ms=ms))
    t1 = statistics.median(r["seconds"] for r in singles)
    tp = statistics.median(r["seconds"] for r in alls)
    return {
        "ranks": comm.size, "fitness_ms": ms, "generations": generations,
        "evaluations_per_island": alls[0]["evaluations_per_island"],
        "migrations": alls[0]["migrations"],
        "t1_s": t1, "tp_s": tp, "t1_runs_s": [r["seconds"] for r in singles],
        "tp_runs_s": [r["seconds"] for r in alls],
        "efficiency": t1 / tp if comm.size > 1 else None,
    }


# ---------------------------------------------------------------- 3. migration cost
def migration_cost(comm, dim: int, *, repeats: int = 10, k: int = 2) -> dict:
    """Seconds and bytes per migration along a ring, one island per rank (two on one rank)."""
    n_islands = max(comm.size, 2)
    problem = make_problem("sphere", dim)
    engine = EngineConfig(capacity=max(4, k + 2), batch_size=2)
    scheme = IslandScheme(comm, problem, engine, n_islands=n_islands, seed=1)
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
        quick: shorter runs (for tests), same keys.

    Returns:
        dict with at least ``evals_per_s``, ``pygmo_evals_per_s``,
        ``weak_scaling_efficiency`` and ``migration`` (one entry per dimension).
    """
    with contextlib.ExitStack() as stack:
        threads = limit_blas_threads(1, stack)
        seconds, repeats = (0.3, 1) if quick else (2.0, 3)
        throughput = single_island_throughput(comm, 1000, seconds, repeats)
        scaling = weak_scaling(comm, generations=3 if quick else 24, repeats=1 if quick else 3,
                               ms=1.0 if quick else BURN_MS)
        dims = (1000, 10**5) if quick else (1000, 10**6)
        migrations = [migration_cost(comm, d, repeats=2 if quick else (20 if d <= 1000 else 5)) for d in dims]
    result = {
        "ranks": comm.size,
        "loadavg": list(os.getloadavg()),
        "blas_threads": threads,
        "evals_per_s": throughput["engine_evals_per_s"],
        "pygmo_evals_per_s": throughput["sade_evals_per_s"],
        "engine_vs_pygmo": throughput["ratio"],
        "evals_per_cpu_s": throughput["engine_evals_per_cpu_s"],
        "pygmo_evals_per_cpu_s": throughput["sade_evals_per_cpu_s"],
        "throughput": throughput,
        "weak_scaling_efficiency": scaling["efficiency"],
        "weak_scaling": scaling,
        "migration": migrations,
    }
    if comm.rank == 0:
        print(format_report(result), flush=True)
        if json_path is not None:
            Path(json_path).write_text(json.dumps(result, indent=1, default=float) + "\n")
    return result


def format_report(result: dict) -> str:
    """Human-readable lines for a :func:`bench_engine` result."""
    def rate(value):
        return "n/a" if value is None else f"{value:,.0f}"

    scaling = result["weak_scaling"]
    efficiency = result["weak_scaling_efficiency"]
    lines = [
        f"mpievo bench engine: {result['ranks']} ranks, load average {result['loadavg'][0]:.2f}",
        f"  sphere 1000-D, one island: mpievo {rate(result['evals_per_s'])} evals/s, "
        f"pygmo sade (pop 20) {rate(result['pygmo_evals_per_s'])} evals/s"
        + ("" if result["engine_vs_pygmo"] is None else f" (ratio {result['engine_vs_pygmo']:.2f})"),
        f"  weak scaling ({scaling['fitness_ms']:g} ms fitness, {scaling['evaluations_per_island']} "
        f"evaluations per island): T1 {scaling['t1_s']:.3f} s, T{result['ranks']} {scaling['tp_s']:.3f} s, "
        f"efficiency {'n/a (one rank)' if efficiency is None else f'{efficiency:.3f}'}",
    ]
    for m in result["migration"]:
        lines.append(f"  migration, dim {m['dim']:,} ({m['islands']} islands, ring, k={m['emigrants_per_edge']}): "
                     f"{m['seconds_per_migration'] * 1e3:.3f} ms, {m['bytes_per_migration_per_rank']:,} "
                     f"bytes per rank")
    return "\n".join(lines)
