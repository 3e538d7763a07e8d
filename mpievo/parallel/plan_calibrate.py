"""The cost model's constants measured on this machine (``mpievo plan --calibrate``, < 30 s).

* **Engine, per dim**: one GA island of the bench's shape (archive = batch = 8; 2 from
  1e6 genes) on the bench's fitness at cost 0 (:func:`.bench_schemes.workload_problem`),
  stepped in this process: ``row_s`` is the time inside the fitness per row, ``breed_s``
  the rest of a step per child (breeding, selection, archive update). Dims above the
  largest calibrated one scale per gene from it.
* **Links**: a ping-pong between 2 ranks (``mpievo launch -n 2``): the latency of an
  8-byte message and the bandwidth of a 16 MiB one, both one-way, over the intra-node
  link (this machine has no other node; the inter-node link is given by flags).
* ``cores``: the CPUs this process may run on (more ranks than cores share them).
* ``run_s``: a whole one-process bench run (smallest calibrated dim) minus the model's
  prediction of it: the run loop's fixed cost, added to every predicted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

CALIBRATION_DIMS = (100, 100_000)
PING_SIZES = (8, 16 << 20)


def engine_costs(dim: int, steps: int = 6) -> dict:
    """{"row_s", "breed_s"} of one bench-shaped island at ``dim`` genes (no MPI)."""
    from ..comm.protocol import SelfComm
    from ..evo.config import EngineConfig
    from .bench_schemes import SchemesOptions, Workload, workload_problem
    from .scheme import IslandScheme

    options = SchemesOptions()
    capacity = options.capacity_for(dim)
    problem, fitness = workload_problem(Workload(0.0, "none", dim), options.seed)
    engine = EngineConfig(capacity=capacity, batch_size=capacity).resolve_all(1)
    scheme = IslandScheme(SelfComm(), problem, engine, seed=options.seed)
    scheme.initialize()
    scheme.step()                                   # compiles, warms caches
    fitness.seconds = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        scheme.step()
    wall = time.perf_counter() - start
    children = steps * capacity
    return {"row_s": fitness.seconds / children, "breed_s": (wall - fitness.seconds) / children}


def run_overhead(dim: int, constants: dict) -> float:
    """Seconds a whole one-process run of the bench's shape (4 islands, budget 192, no
    MPI) takes beyond what the model predicts from the per-child costs: the run loop's
    start, initial populations, log lines and finish."""
    from ..comm.protocol import SelfComm
    from ..evo.config import EngineConfig
    from .bench_schemes import SchemesOptions, Workload, workload_problem
    from .plan import Layout
    from .plan_time import Constants, predict_seconds
    from .runner import RunLoop, RunSettings
    from .scheme import IslandScheme

    options = SchemesOptions()
    capacity, islands = options.capacity_for(dim), options.n_islands
    problem, _ = workload_problem(Workload(0.0, "none", dim), options.seed)
    engines = EngineConfig(capacity=capacity, batch_size=capacity).resolve_all(islands)
    scheme = IslandScheme(SelfComm(), problem, engines, seed=options.seed, budget=options.budget)
    wall = RunLoop(SelfComm(), scheme, RunSettings(None)).run().wall_s
    layout = Layout("island", 1, islands, dim, capacity, capacity, interval=options.interval,
                    budget=options.budget)
    return max(0.0, wall - predict_seconds(layout, Constants.from_dict(constants))["wall_s"])


def ping_pong() -> None:
    """The launched side: rank 0 prints {"latency_s", "bandwidth_Bps"} (one-way)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    times = {}
    for size in PING_SIZES:
        buf = np.zeros(size, np.uint8)
        repeats = 200 if size < 4096 else 10
        best = float("inf")
        for _ in range(3):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(repeats):
                if comm.rank == 0:
                    comm.Send(buf, 1)
                    comm.Recv(buf, 1)
                else:
                    comm.Recv(buf, 0)
                    comm.Send(buf, 0)
            best = min(best, (time.perf_counter() - start) / (2 * repeats))
        times[size] = best
    if comm.rank == 0:
        small, large = PING_SIZES
        latency = times[small]
        print(json.dumps({"latency_s": latency, "bandwidth_Bps": large / max(times[large] - latency, 1e-12)}))


def link_costs() -> dict:
    """Run :func:`ping_pong` on 2 ranks; its result."""
    from ..launch import launch_command, launch_env

    cmd = launch_command(2, ["python", "-m", "mpievo.parallel.plan_calibrate"])
    done = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"expected the 2-rank ping-pong to print its result, got exit code "
                           f"{done.returncode}: {done.stderr.strip()[-500:]}")
    return json.loads(lines[-1])


def calibrate(dims=CALIBRATION_DIMS) -> dict:
    """Every constant of :class:`mpievo.parallel.plan_time.Constants`, as a JSON-able dict."""
    from .threads import limit_blas_threads

    with contextlib.ExitStack() as stack:
        limit_blas_threads(1, stack)
        engine = {str(d): engine_costs(d) for d in dims}
        result = {"source": f"mpievo plan --calibrate, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC",
                  "cores": len(os.sched_getaffinity(0)), "engine": engine, "intra": link_costs(), "run_s": 0.0}
        result["run_s"] = run_overhead(min(dims), result)
    return result


def write(path: str | os.PathLike, result: dict) -> None:
    Path(path).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    ping_pong()
