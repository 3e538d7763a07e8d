"""``mpievo bench schemes``: the parallel schemes (``run.scheme``) measured side by side.

Started without mpiexec: for each rank count P the driver launches one job
(``mpievo launch -n P -- python -m mpievo.bench.schemes SPEC OUT``) that runs every
(workload, scheme) pair in turn; more ranks than cores oversubscribe them (the result
says so). The workloads, their options and one measured run are the cost model's
vocabulary (:mod:`mpievo.plan.workloads`): every run is the same job, ``islands``
islands (default the largest P, so the island scheme has one per rank there), the same
engine, seed and ``run.budget``, on a shifted rastrigin (also rotated up to
:data:`~mpievo.plan.workloads.ROTATE_MAX_DIM` genes) with a per-child cost added by
:class:`~mpievo.plan.workloads.WorkloadFitness`; from ``large_dim`` genes with smaller
archives, batches and budget (:class:`~mpievo.plan.workloads.SchemesOptions`). At P = 1
every scheme is the island model (one rank makes every layout trivial), so it is
measured once and reported for each scheme. ``master_worker`` runs with
``engine.evaluation = "generational"``, ``master_worker_steady`` with ``"steady"``
(:func:`~mpievo.plan.workloads.run_scheme`).

Per run: generations, evaluations, wall time (slowest rank), evaluations/s, bytes sent
per generation summed over ranks and over every communicator the scheme uses (the
world's, and a hybrid scheme's group and leader communicators), by purpose,
utilisation per rank (time inside the fitness / wall), best fitness, and the speed-up
over the same scheme at P = 1. Checks (:func:`check_rows`): evaluations equal the
budget, the best is finite, and every scheme at every P finds the same best for a
workload (the fitness treats rows on their own), else :class:`SchemesCheckError`;
the cost model's bytes are exact and its time within
:data:`mpievo.plan.timing.TIME_BOUND` of every run, else :class:`ModelCheckError`
after the files are written, those runs marked (the model is calibrated before each
sweep, its constants are the median of those calibrations,
:func:`mpievo.plan.calibrate.median_calibration`, and its engine costs are then scaled
to the sweeps' own one-rank cost-0 runs, :func:`mpievo.plan.calibrate.anchor_engine_costs`,
so both see the machine's load alike). A short run is the fastest of
:data:`~mpievo.plan.workloads.SHORT_RUN_REPEATS` spread over the workload
(:func:`~mpievo.plan.workloads.measure_workload`). The whole sweep runs ``sweeps``
times, every P in turn each time; a row is the run of median wall time over them
(:func:`median_rows`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..plan.calibrate import anchor_engine_costs, calibrate, median_calibration
from ..plan.timing import TIME_BOUND, Constants, model_rows, time_outliers
from ..plan.workloads import ROTATE_MAX_DIM, SCHEMES, SchemesOptions, measure_workload, warm_up, workloads
from .schemes_report import format_table, write_outputs


# ---------------------------------------------------------------- the launched job
def worker(spec_path: str, out_path: str) -> None:
    """The launched job: every (workload, scheme) at this rank count; rank 0 writes the rows."""
    from mpi4py import MPI

    from ..comm import abort_on_error
    from ..parallel.threads import limit_blas_threads

    spec = json.loads(Path(spec_path).read_text())
    options = SchemesOptions.from_dict(spec)
    size = MPI.COMM_WORLD.Get_size()
    schemes = SCHEMES if size > 1 else ("island",)
    with abort_on_error(), contextlib.ExitStack() as stack:
        limit_blas_threads(1, stack)
        warm_up(options, schemes)
        rows = []
        for load in workloads(options):
            for row in measure_workload(load, schemes, options):
                rows.append(row)
                if MPI.COMM_WORLD.Get_rank() == 0:   # progress: a full sweep takes minutes
                    print(f"  P={size} {row['scheme']:<11} {load.label}: {row['evals_per_s']:.4g} evaluations/s, "
                          f"{row['wall_s']:.2f} s", flush=True)
    if MPI.COMM_WORLD.Get_rank() == 0:
        library = MPI.Get_library_version().strip().splitlines()[0].split(",")[0]
        Path(out_path).write_text(json.dumps({"rows": rows, "mpi_library": library}))


# ---------------------------------------------------------------- the driver
class SchemesCheckError(RuntimeError):
    """A run reported a wrong evaluation count, a non-finite best, or schemes disagree."""


class ModelCheckError(SchemesCheckError):
    """The cost model's bytes are wrong or its time off by more than its bound for some
    runs; ``result`` is the whole sweep's (its files are written, the rows marked)."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def launch_ranks(ranks: int, options: SchemesOptions, workdir: Path) -> dict:
    """Run :func:`worker` on ``ranks`` ranks; its rows and MPI library."""
    from ..launcher import launch_command, launch_env

    spec, out = workdir / f"spec-{ranks}.json", workdir / f"rows-{ranks}.json"
    spec.write_text(json.dumps(options.to_dict()))
    cmd = launch_command(ranks, ["python", "-m", "mpievo.bench.schemes", str(spec), str(out)])
    done = subprocess.run(cmd, env=launch_env())      # its progress and errors go to our terminal
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"expected the {ranks}-rank job to exit 0 and write its rows, got exit code "
                           f"{done.returncode}")
    return json.loads(out.read_text())


def median_rows(runs: list[dict]) -> list[dict]:
    """One row per (workload, scheme, P) from the sweeps' runs: the run of median wall
    time (the upper one of an even count), with ``sweep_walls``, every sweep's wall time
    in sweep order."""
    by_key: dict = {}
    for run in runs:
        by_key.setdefault((run["workload"], run["scheme"], run["ranks"]), []).append(run)
    rows = []
    for group in by_key.values():
        ranked = sorted(group, key=lambda run: run["wall_s"])
        rows.append({**ranked[len(ranked) // 2], "sweep_walls": [run["wall_s"] for run in group]})
    return rows


def complete_rows(rows: list[dict]) -> list[dict]:
    """Every scheme's P = 1 row (the one island run, see the module docstring) and each
    row's ``speedup`` over its scheme at P = 1, in (workload, scheme, P) order."""
    singles = [r for r in rows if r["ranks"] == 1]
    rows = [r for r in rows if r["ranks"] > 1]
    for single in singles:
        rows += [{**single, "scheme": s, "note": "P=1: the island run"} for s in SCHEMES]
    base = {(r["workload"], r["scheme"]): r["evals_per_s"] for r in rows if r["ranks"] == 1}
    order = {s: i for i, s in enumerate(SCHEMES)}
    for row in rows:
        row.setdefault("note", "")
        row["speedup"] = row["evals_per_s"] / base[row["workload"], row["scheme"]]
    return sorted(rows, key=lambda r: (r["dim"], r["cost_ms"], r["mode"], order[r["scheme"]], r["ranks"]))


def check_rows(rows: list[dict], options: SchemesOptions) -> None:
    """Raise :class:`SchemesCheckError` naming every run that is wrong (see the module docstring)."""
    def budget(r):
        return options.budget_for(r["dim"], r["cost_ms"])

    problems = [f"{r['workload']}, {r['scheme']}, P={r['ranks']}: expected {budget(r)} evaluations and a "
                f"finite best, got {r['evaluations']} and {r['best_fitness']}"
                for r in rows if r["evaluations"] != budget(r) or not math.isfinite(r["best_fitness"])]
    for label in dict.fromkeys(r["workload"] for r in rows):
        bests = {(r["scheme"], r["ranks"], r["best_fitness"]) for r in rows if r["workload"] == label}
        if len({b for _, _, b in bests}) > 1:
            problems.append(f"{label}: expected the same best fitness from every scheme, P and sweep, got "
                            + ", ".join(f"{s} P={p}: {b!r}" for s, p, b in sorted(bests)))
    if problems:
        raise SchemesCheckError("mpievo bench schemes: wrong results:\n  " + "\n  ".join(problems))


def bench_schemes(options: SchemesOptions, out_dir: str | os.PathLike | None = None, constants=None) -> dict:
    """Run the sweep (driver side, no MPI here), check it, write CSV/JSON/PNG to ``out_dir``.

    ``constants``: the cost model's (:class:`mpievo.plan.timing.Constants`);
    None: calibrated here at the sweep's dims before each sweep (``mpievo plan
    --calibrate``, 3-4 minutes each) and the median of those calibrations taken, so
    that model and runs see the machine's load alike.

    Raises:
        SchemesCheckError: wrong results (before writing anything).
        ModelCheckError: the model's bytes are wrong or its time is off by more than
            :data:`mpievo.plan.timing.TIME_BOUND` for some runs (after writing everything).

    Returns:
        dict with ``rows`` (see :func:`run_row`; plus ``speedup``, ``note`` and the
        model's ``model_*`` fields) and ``conditions``.
    """
    calibrations = []
    start = time.perf_counter()
    runs, libraries = [], set()
    with tempfile.TemporaryDirectory(prefix="mpievo-schemes-") as tmp:
        for sweep in range(options.sweeps):
            if constants is None:       # a calibration before each sweep: see median_calibration
                calibrations.append(calibrate(dims=sorted(set(options.dims)), ranks=options.ps))
            for ranks in options.ps:
                part = launch_ranks(ranks, options, Path(tmp))
                runs += part["rows"]
                libraries.add(part["mpi_library"])
    check_rows(runs, options)
    calibration = median_calibration(calibrations) if calibrations else None
    if calibration is not None:
        constants = Constants.from_dict(calibration)
    rows = complete_rows(median_rows(runs))
    constants, anchors = anchor_engine_costs(constants, rows, options.interval)
    wrong = model_rows(rows, options.interval, constants)
    cores = len(os.sched_getaffinity(0))
    result = {
        "conditions": {
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "cores": cores,
            "loadavg": list(os.getloadavg()), "mpi_library": sorted(libraries),
            "oversubscribed_p": [p for p in options.ps if p > cores], "sweep_s": time.perf_counter() - start,
            "problem": f"shifted rastrigin, rotated up to {ROTATE_MAX_DIM} genes, float32 genomes",
            "options": options.to_dict(), "model_constants": constants.source,
            "model_calibration": calibration,       # None: constants given
            "model_calibrations": calibrations,     # one per sweep; calibration is their median
            "model_anchors": anchors,
        },
        "rows": rows,
    }
    print(format_table(result), flush=True)
    if out_dir is not None:
        for line in write_outputs(result, Path(out_dir)):
            print(line, flush=True)
    problems = [f"the cost model's bytes are wrong for {len(wrong)} runs:"] + wrong if wrong else []
    outliers = time_outliers(rows)
    if outliers:
        problems += [f"the cost model's time is off by more than {100 * TIME_BOUND:.0f} % (marked ! in the "
                     f"table) for {len(outliers)} runs:"] + outliers
    if problems:
        raise ModelCheckError("mpievo bench schemes: " + "\n  ".join(problems), result)
    return result


if __name__ == "__main__":
    worker(*sys.argv[1:3])
