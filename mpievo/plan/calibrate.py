"""The cost model's constants measured on this machine (``mpievo plan --calibrate``, 3-4 minutes
at the default dims on an idle 2-core machine).

* **Engine, per dim** (default 1e2, 1e5, 1e7 genes; the model interpolates between
  them in log-log space): the bench's GA islands (4; archive = batch = 8, 2 from 1e6
  genes) on the bench's fitness at cost 0 (:func:`.workloads.workload_problem`),
  stepped in this process: ``row_s`` is the time inside the fitness per row,
  ``breed_s`` the rest of a step per child (breeding, selection, archive update),
  ``init_s`` the initial population's time outside the fitness per genome, and
  ``record_s`` one island record (what the run loop gathers at log lines). Above the
  smallest dim, ``row_s``, ``breed_s`` and ``init_s`` then come from the bench's own
  one-rank island runs at two lengths (:func:`run_engine_costs`): a run pays for fresh
  arrays and the run loop, which a stepping loop does not. That run is the bench's
  one-rank row at cost 0, so the model fits that row rather than predicts it; every
  other rank count and scheme is predicted. ``mpievo bench schemes`` fits it again to
  its own one-rank runs (:func:`anchor_engine_costs`): calibration is minutes older.
* **Links**: a ping-pong between 2 ranks (``mpievo launch -n 2``): the latency of an
  8-byte message and the bandwidth of a 16 MiB one, both one-way, over the intra-node
  link (this machine has no other node; the inter-node link is given by flags).
* ``cores``: the CPUs this process may run on (more busy ranks than cores share them).
* ``contention``, per rank count and dim: in each launched job of P > 1 ranks, rank 0
  makes the one-rank run of the bench's island job alone, then every rank makes it at
  once (:func:`concurrent_runs`); their wall time against rank 0's alone, seconds
  earlier, beyond P / cores where the ranks outnumber the cores, is what ranks side by
  side cost each other (shared caches, memory bandwidth and clock budget; time slices
  that evict each other's caches).
* **Run loop** (``loop``): real runs of the bench's job at cost 0 and the smallest
  dim, at two lengths (:func:`loop_lengths`: a short one and the bench's own, the
  fastest of :data:`LOOP_REPEATS` runs each, made in rounds over the schemes and
  lengths, like the bench's short runs, :func:`.workloads.measure_workload`), in
  launched jobs as the bench's: the
  island scheme on 1 rank, every bench scheme on 2 and on 4 ranks (the 2-rank job
  also runs the ping-pong; on 2 cores the 4-rank runs share them, as the bench's do).
  Each run's wall time minus the model's prediction without loop costs is its
  overhead; the overhead's growth per generation is ``step_s`` (Python and messages of
  a step beyond the model's per-child and per-byte terms), the rest ``run_s`` (start,
  log gathers, finish). The long runs are the bench's length, so its cost-0 rows at
  that dim are measured, not extrapolated (runs of 64 generations tripled the slope's
  noise out to the bench's 191); what the bench tests there is that the machine gives
  the same loop costs minutes later.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CALIBRATION_DIMS = (100, 100_000, 10_000_000)
PING_SIZES = (8, 16 << 20)
#: the short run length (generations after the initial one) of the loop-cost runs; the
#: long one is the bench's (:func:`loop_lengths`)
LOOP_SHORT_GENERATIONS = 8
#: runs of each loop-cost length, the fastest kept (as the bench keeps its short runs'
#: fastest): one 191-generation run at 2 ranks ranged 0.37-0.50 s over five runs of one
#: minute here
LOOP_REPEATS = 5
#: in-process measurements of the engine costs below ``large_dim`` genes, the fastest
#: kept: one of 6 steps at 100 genes is tens of milliseconds, and here one such
#: measurement put breeding at 54 us per child where the next put it at 33
STEPPING_REPEATS = 3
#: the two run lengths and the repeats of the engine-cost runs above the smallest dim
ENGINE_GENERATIONS = (8, 64)
ENGINE_REPEATS = 3
#: the run lengths of the engine-cost runs from ``large_dim`` genes (once each)
LARGE_GENERATIONS = (1, 3)
#: the rank counts the schemes' loop costs are measured at by default (``mpievo bench
#: schemes``' default sweep); 1 and 2 always (the 2-rank job also runs the ping-pong)
LOOP_RANKS = (1, 2, 4)


def engine_costs(dim: int) -> dict:
    """{"row_s", "breed_s", "init_s", "record_s"} of the bench's islands (all of them:
    at 1e7 genes a fitness row costs a third more amid 4 islands' genomes than amid one
    island's) at ``dim`` genes in this process (no MPI); one measured step from
    ``large_dim`` genes, where a child takes ~0.5 s."""
    from ..comm.protocol import SelfComm
    from ..evo.engine_config import EngineConfig
    from .workloads import SchemesOptions, Workload, workload_problem
    from ..parallel.scheme import IslandScheme

    options = SchemesOptions()
    capacity, islands = options.capacity_for(dim), options.n_islands
    steps = 1 if dim >= options.large_dim else 6
    problem, fitness = workload_problem(Workload(0.0, "none", dim), options.seed)
    engines = EngineConfig(capacity=capacity, batch_size=capacity).resolve_all(islands)
    scheme = IslandScheme(SelfComm(), problem, engines, seed=options.seed)
    start = time.perf_counter()
    scheme.initialize()
    init_s = (time.perf_counter() - start - fitness.seconds) / (capacity * islands)
    scheme.step()                                   # compiles, warms caches
    fitness.seconds = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        scheme.step()
    wall = time.perf_counter() - start
    children = steps * capacity * islands
    record_s = min(_seconds(scheme.records) for _ in range(3)) / islands
    return {"row_s": fitness.seconds / children, "breed_s": (wall - fitness.seconds) / children,
            "init_s": max(init_s, 0.0), "record_s": record_s}


def fastest_engine_costs(dim: int) -> dict:
    """:func:`engine_costs`, the fastest (least ``row_s + breed_s``) of
    :data:`STEPPING_REPEATS` measurements below ``large_dim`` genes, else of one."""
    from .workloads import SchemesOptions

    repeats = STEPPING_REPEATS if dim < SchemesOptions().large_dim else 1
    return min((engine_costs(dim) for _ in range(repeats)), key=lambda c: c["row_s"] + c["breed_s"])


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def loop_budget(generations: int, dim: int) -> int:
    """The bench job's budget that runs ``generations`` generations after the initial one."""
    from .workloads import SchemesOptions

    options = SchemesOptions()
    return options.n_islands * options.capacity_for(dim) * (generations + 1)


def loop_lengths(dim: int) -> tuple[int, int]:
    """The two lengths (generations after the initial one) of the loop-cost runs at
    ``dim`` genes: :data:`LOOP_SHORT_GENERATIONS` and the bench's cost-0 run's (191 at
    100 genes)."""
    from .workloads import SchemesOptions

    options = SchemesOptions()
    bench = options.budget_for(dim, 0.0) // (options.n_islands * options.capacity_for(dim)) - 1
    return LOOP_SHORT_GENERATIONS, max(bench, LOOP_SHORT_GENERATIONS + 1)


def scheme_rows(dims, size: int) -> list[dict]:
    """The launched side: every bench scheme's runs (one rank: the island scheme's, as
    the bench's) at both lengths on every rank (collective), at the smallest of ``dims``;
    on one rank also the island's at the others (:func:`run_lengths`, for
    :func:`run_engine_costs`). The bench's rows (:func:`.workloads.measure`)."""
    from .workloads import SCHEMES, SchemesOptions, Workload, measure, warm_up

    small = min(dims)
    options = SchemesOptions(dims=tuple(sorted(dims)))
    schemes = SCHEMES if size > 1 else ("island",)
    warm_up(options, schemes)
    rows = [measure(Workload(0.0, "none", small), scheme, options, loop_budget(generations, small))
            for _ in range(LOOP_REPEATS) for scheme in schemes for generations in loop_lengths(small)]
    if size == 1:
        for dim in sorted(dims)[1:]:
            lengths, repeats = run_lengths(dim)
            rows += [measure(Workload(0.0, "none", dim), "island", options, loop_budget(generations, dim))
                     for _ in range(repeats) for generations in lengths]
    return rows


def run_lengths(dim: int) -> tuple[tuple[int, int], int]:
    """(the two run lengths in generations, repeats of each) of the one-rank runs that
    give the engine costs at ``dim`` genes: shorter and once from ``large_dim`` genes,
    where a generation takes seconds."""
    from .workloads import SchemesOptions

    return (LARGE_GENERATIONS, 1) if dim >= SchemesOptions().large_dim else (ENGINE_GENERATIONS, ENGINE_REPEATS)


def loop_costs(rows: list[dict], constants: dict) -> dict:
    """{str(ranks): {scheme: {"run_s", "step_s"}}} from runs at two lengths (see the
    module docstring)."""
    from .traffic import bench_layout
    from .timing import Constants, predict_seconds

    model = Constants.from_dict(constants)
    overheads: dict = {}
    for row in rows:
        layout = bench_layout(row, interval=_interval())
        over = row["wall_s"] - predict_seconds(layout, model, loop=False)["wall_s"]
        key = (str(row["ranks"]), row["scheme"])
        overheads.setdefault(key, {}).setdefault(row["generations"], []).append(over)
    out: dict = {}
    for (ranks, scheme), by_length in overheads.items():
        (g1, o1), (g2, o2) = sorted((g, min(v)) for g, v in by_length.items())
        step = max(0.0, (o2 - o1) / (g2 - g1))
        out.setdefault(ranks, {})[scheme] = {"run_s": max(0.0, o1 - step * g1), "step_s": step}
    return out


def run_engine_costs(rows: list[dict], constants: dict) -> dict:
    """{str(dim): engine costs} from the one-rank island runs above the smallest dim:
    ``row_s`` is the time inside the fitness per evaluation of each length's fastest
    run; ``breed_s`` and ``init_s`` solve "wall = that run's" at both lengths (the model is linear in
    them; the run loop's costs and ``record_s`` as calibrated). A bench run pays what a
    stepping loop does not (fresh arrays every run, the run loop around the steps): at
    1e7 genes about a fifth more than :func:`engine_costs` measured."""
    from .traffic import bench_layout
    from .timing import Constants, predict_seconds

    small = min(int(d) for d in constants["engine"])
    by_dim: dict = {}
    for row in rows:
        if row["ranks"] == 1 and row["dim"] != small:
            by_dim.setdefault(row["dim"], {}).setdefault(row["generations"], []).append(row)
    out = {}
    for dim, by_length in sorted(by_dim.items()):
        fastest = {length: min(group, key=lambda r: r["wall_s"]) for length, group in by_length.items()}
        costs = dict(constants["engine"][str(dim)], row_s=_fitness_per_evaluation(list(fastest.values())))

        def wall(length, breed_s, init_s):
            trial = dict(constants, engine={**constants["engine"], str(dim): dict(costs, breed_s=breed_s,
                                                                                 init_s=init_s)})
            layout = bench_layout(by_length[length][0], interval=_interval())
            return predict_seconds(layout, Constants.from_dict(trial))["wall_s"]

        equations = []
        for length, group in sorted(by_length.items()):
            base = wall(length, 0.0, 0.0)
            equations.append(([wall(length, 1.0, 0.0) - base, wall(length, 0.0, 1.0) - base],
                              fastest[length]["wall_s"] - base))
        (a, b), (c, d) = (e[0] for e in equations)
        (y1, y2) = (e[1] for e in equations)
        det = a * d - b * c
        breed_s = (y1 * d - b * y2) / det if det else 0.0
        init_s = (a * y2 - c * y1) / det if det else 0.0
        out[str(dim)] = dict(costs, breed_s=max(breed_s, 0.0), init_s=max(init_s, 0.0))
    return out


def _fitness_per_evaluation(runs: list[dict]) -> float:
    """Seconds inside the fitness per evaluation of one-rank runs."""
    return sum(r["utilisation"][0] * r["wall_s"] for r in runs) / sum(r["evaluations"] for r in runs)


def anchor_engine_costs(constants, rows: list[dict], interval: int):
    """(``constants`` with each calibrated dim's engine costs fitted to the sweep's own
    one-rank cost-0 run there, {str(dim): the scale of the costs other than the row}).
    The row cost is that run's time inside the fitness per evaluation; the others are
    scaled by one factor so that the model gives its wall time (the model is linear in
    them, so two predictions give the factor). Calibration fits the engine costs to that
    same run (see the module docstring), but minutes earlier: here one calibration
    measured breeding at 1e7 genes at 198 ms per child, the two before it 59 and 79 ms.
    Fitted in the sweep, both sides see the machine of the same minutes, and the model
    still predicts every other rank count and scheme from that run, the links, the loop
    costs and the contention. Marks the run (under every scheme) ``model_fitted``."""
    from .traffic import bench_layout

    engine, anchors = dict(constants.engine), {}
    for row in rows:
        if row["ranks"] != 1 or row["scheme"] != "island" or row["mode"] != "none" or row["dim"] not in engine:
            continue
        layout, dim = bench_layout(row, interval=interval), row["dim"]
        row_s = _fitness_per_evaluation([row])
        scale = scale_to_wall(lambda f: _fitted_wall(constants, engine, layout, row_s, f), row["wall_s"])
        if scale is None:        # no engine costs to scale
            continue
        engine[dim] = dict({k: v * scale for k, v in engine[dim].items()}, row_s=row_s)
        anchors[str(dim)] = scale
    for row in rows:        # the one-rank run, reported under every scheme
        row["model_fitted"] = row["ranks"] == 1 and row["mode"] == "none" and str(row["dim"]) in anchors
    return dataclasses.replace(constants, engine=engine), anchors


def scale_to_wall(wall_at, measured_s: float) -> float | None:
    """The factor of the engine costs at which the model's wall time is ``measured_s``:
    the model is linear in them, so its walls at factors 0 and 1 (``wall_at(0.0)``,
    ``wall_at(1.0)``) give it (at least 0); None when the costs add no time.

    Example:
        >>> scale_to_wall(lambda f: 1.0 + 2.0 * f, 4.0), scale_to_wall(lambda f: 1.0, 4.0)
        (1.5, None)
    """
    base, full = wall_at(0.0), wall_at(1.0)
    if full <= base:
        return None
    return max(measured_s - base, 0.0) / (full - base)


def _fitted_wall(constants, engine: dict, layout, row_s: float, scale: float) -> float:
    """The model's wall time of ``layout`` with the row cost ``row_s`` and the other
    engine costs at its dim times ``scale``."""
    from .timing import predict_seconds

    costs = dict({k: v * scale for k, v in engine[layout.dim].items()}, row_s=row_s)
    trial = dataclasses.replace(constants, engine={**engine, layout.dim: costs})
    return predict_seconds(layout, trial)["wall_s"]


def _interval() -> int:
    from .workloads import SchemesOptions

    return SchemesOptions().interval


def ping_pong() -> dict:
    """{"latency_s", "bandwidth_Bps"} (one-way) between ranks 0 and 1 of 2 (collective)."""
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
    small, large = PING_SIZES
    latency = times[small]
    return {"latency_s": latency, "bandwidth_Bps": large / max(times[large] - latency, 1e-12)}


def launched(dims, ping: bool) -> None:
    """A launched job: rank 0 prints {"intra": ping-pong (on 2 ranks, else None),
    "rows": scheme rows, "concurrent": rank 0's walls of the one-rank runs alone and every
    rank's while the others made the same (:func:`concurrent_runs`; None on one rank)}
    as JSON."""
    from mpi4py import MPI

    from ..comm import abort_on_error
    from ..parallel.threads import limit_blas_threads

    size = MPI.COMM_WORLD.Get_size()
    with abort_on_error(), contextlib.ExitStack() as stack:
        limit_blas_threads(1, stack)
        result = {"intra": ping_pong() if ping else None, "rows": scheme_rows(dims, size),
                  "concurrent": concurrent_runs(dims) if size > 1 else None}
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps(result), flush=True)


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def contention_runs(dims) -> dict:
    """{dim: (generations, repeats)} of the one-rank island runs of
    :func:`concurrent_runs`: the loop-cost runs' bench length at the smallest dim (a
    shorter run there is milliseconds), the engine-cost runs' short length above."""
    small = min(dims)
    out = {small: (loop_lengths(small)[1], ENGINE_REPEATS)}
    for dim in sorted(dims)[1:]:
        (short, _), repeats = run_lengths(dim)
        out[dim] = (short, repeats)
    return out


def concurrent_runs(dims) -> dict:
    """{str(dim): {"alone": rank 0's wall times, "together": each rank's}} (rank 0; None
    elsewhere) of :func:`contention_runs`' one-rank island runs (the bench's, on this
    rank's own communicator), collective: each repeat, rank 0 makes the run alone while
    the others wait without holding a core (:func:`.workloads.sleep_until_all_arrive`), then every rank
    makes it at once. Alone and together are seconds apart, so both see the machine
    alike: against the one-rank job minutes earlier, a calibration on a GPU node just
    started measured no contention at 4 ranks and 1e7 genes, where its sweep's ranks
    took 1.2-1.3x longer per evaluation than one rank."""
    from mpi4py import MPI

    from .workloads import sleep_until_all_arrive
    from .workloads import SchemesOptions, Workload, measure

    comm = MPI.COMM_WORLD
    options = SchemesOptions(dims=tuple(sorted(dims)))
    out = {}
    for dim, (generations, repeats) in contention_runs(dims).items():
        def run():
            return measure(Workload(0.0, "none", dim), "island", options, loop_budget(generations, dim),
                           mpi_comm=MPI.COMM_SELF)["wall_s"]

        alone, together = [], []
        for _ in range(repeats):
            if comm.rank == 0:
                alone.append(run())
            sleep_until_all_arrive(comm)
            comm.Barrier()          # every rank starts together
            together.append(run())
        gathered = comm.gather(together, root=0)
        out[str(dim)] = {"alone": alone, "together": gathered} if comm.rank == 0 else None
    return out


def contention(concurrent: dict, ranks: int, cores: int) -> dict:
    """{str(dim): how much longer a rank's engine work takes while ``ranks`` ranks run
    at once, beyond sharing the cores (``ranks / cores`` where they outnumber them)}, at
    least 1: the mean over ranks of each one's fastest wall time together against rank
    0's fastest alone (:func:`concurrent_runs`; fastest, like every repeated run of
    calibration and bench). Ranks side by side share caches, memory bandwidth and the
    chip's clock budget, and time-sliced ones evict each other's caches."""
    out = {}
    for dim, runs in concurrent.items():
        together = statistics.mean(min(walls) for walls in runs["together"])
        out[dim] = max(1.0, together / min(runs["alone"]) / max(1.0, ranks / cores))
    return out


def run_launched(ranks: int, module_args: list[str], timeout: float, what: str, result):
    """``python -m module_args`` on ``ranks`` ranks under the venv's launcher; returns
    ``result(finished process)`` where it exited 0 and ``result`` found one (not None).

    Raises:
        RuntimeError: "expected the N-rank ``what``, got exit code ...", with the end of its stderr.
    """
    from ..launcher import launch_command, launch_env

    cmd = launch_command(ranks, ["python", "-m", *module_args])
    done = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=timeout)
    found = result(done) if done.returncode == 0 else None
    if found is None:
        raise RuntimeError(f"expected the {ranks}-rank {what}, got exit code "
                           f"{done.returncode}: {done.stderr.strip()[-500:]}")
    return found


def launch_job(ranks: int, dims) -> dict:
    """Run :func:`launched` on ``ranks`` ranks; its result (the last JSON line it printed)."""
    def printed(done):
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None

    return run_launched(ranks, ["mpievo.plan.calibrate", ",".join(map(str, dims)), str(ranks == 2)], 600,
                        "calibration job to print its result", printed)


def calibrate(dims=CALIBRATION_DIMS, ranks=LOOP_RANKS) -> dict:
    """Every constant of :class:`mpievo.plan.timing.Constants`, as a JSON-able
    dict; the loop costs at ``ranks``, 1 and 2 (the ping-pong's job)."""
    from ..parallel.threads import limit_blas_threads

    small = min(dims)
    with contextlib.ExitStack() as stack:
        limit_blas_threads(1, stack)
        engine_costs(small)                 # compiles the kernels (initial genomes included)
        engine = {str(d): fastest_engine_costs(d) for d in sorted(dims)}
        jobs = {p: launch_job(p, sorted(dims)) for p in sorted({1, 2, *ranks})}
        result = {"source": f"mpievo plan --calibrate, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC",
                  "cores": _cores(), "engine": engine, "intra": jobs[2]["intra"]}
        result["contention"] = {str(p): contention(job["concurrent"], p, result["cores"])
                                for p, job in jobs.items() if job.get("concurrent")}
        rows = [row for job in jobs.values() for row in job["rows"]]
        result["loop"] = loop_costs([row for row in rows if row["dim"] == small], result)
        result["engine"] = {**engine, **run_engine_costs(rows, result)}
    return result


def median_calibration(calibrations: list[dict]) -> dict:
    """One calibration of several (:func:`calibrate`'s dicts): each constant the median of
    its values, over the keys every calibration has. The bench calibrates before each of
    its sweeps, so that the model's constants, like its rows, are the median over the
    whole command: one calibration's few seconds can be a slow or fast moment of this
    machine (five calibrations of 2026-11-27 here put centralized's loop cost at 4 ranks
    between 0.62 and 2.30 ms per generation)."""
    if not calibrations:
        raise ValueError("expected at least 1 calibration, got none")
    if len(calibrations) == 1:
        return calibrations[0]
    merged = _median_of(calibrations)
    merged["source"] = (f"median of {len(calibrations)} calibrations ({calibrations[0]['source']} .. "
                        f"{calibrations[-1]['source'].rsplit(', ', 1)[-1]})")
    return merged


def _median_of(values: list):
    first = values[0]
    if all(v == first for v in values[1:]):       # cores, sources: kept as they are
        return first
    if isinstance(first, dict):
        shared = [k for k in first if all(k in v for v in values[1:])]
        return {k: _median_of([v[k] for v in values]) for k in shared}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return statistics.median(values)
    return first


def write(path: str | os.PathLike, result: dict) -> None:
    Path(path).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    launched([int(d) for d in sys.argv[1].split(",")], sys.argv[2] == "True")
