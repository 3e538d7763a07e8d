"""A scheme measured against the cost model at several rank counts (``mpievo plan --measure``).

For each rank count P the driver launches one job (``mpievo launch -n P -- python -m
mpievo.plan.measured SPEC OUT``) that runs the bench's job (:func:`.workloads.measure`:
GA islands on the shifted rastrigin with a fitness cost per child, the bench's archive
and budget at the genome size) with each scheme ``repeats`` times; one rank runs the
island scheme only (every scheme is the island model there). Each run's wall time (the
slowest rank's) is set against the model's (:func:`.timing.predict_row`, with the
constants of ``mpievo plan --calibrate``): per scheme and P, the measured median with
its spread (fastest, slowest), the prediction, and the relative error (predicted /
measured - 1) of the median with the spread of the errors over the runs. More ranks
than cores share them: the table says so. A scheme is a bench scheme name
(:data:`.workloads.MEASURED_SCHEMES`: the bench's, and ``hybrid_evaluator``, hybrid
with ``run.breed = "evaluator"``, each rank breeding its own children from the
node-shared archive); a new one is measured once it is one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: a launched job's time limit, seconds
JOB_TIMEOUT_S = 900


@dataclass(frozen=True)
class MeasureSpec:
    """What to measure: schemes, rank counts, the workload and the job's size.

    Example:
        >>> MeasureSpec(schemes=("island", "hybrid"), ranks=(1, 2, 4)).dim
        1000000
    """

    schemes: tuple = ("island", "hybrid", "hybrid_evaluator")
    ranks: tuple = (1, 2, 4)
    dim: int = 1_000_000
    cost_ms: float = 20.0
    mode: str = "sleep"
    repeats: int = 3
    budget: int = 64          # evaluations a run (capacity 2 from 1e6 genes: 7 generations on 4 islands)

    def check(self) -> None:
        """Raise ValueError naming what is wrong, before any run starts."""
        from ..evo.operators import COUNTER_DIM
        from .workloads import MEASURED_SCHEMES, MODES, run_breed

        problems = []
        unknown = [s for s in self.schemes if s not in MEASURED_SCHEMES]
        if unknown or not self.schemes:
            problems.append(f"schemes: expected some of {MEASURED_SCHEMES}, got {self.schemes}")
        if any(run_breed(s) == "evaluator" for s in self.schemes) and self.dim < COUNTER_DIM:
            problems.append(f"dim: expected at least {COUNTER_DIM} genes with evaluator breeding (the "
                            f"counter-based kernels), got {self.dim}")
        if not self.ranks or min(self.ranks) < 1:
            problems.append(f"ranks: expected rank counts >= 1, got {self.ranks}")
        if self.mode not in MODES:
            problems.append(f"mode: expected one of {MODES}, got {self.mode!r}")
        if self.repeats < 1 or self.dim < 1 or self.cost_ms < 0:
            problems.append(f"repeats, dim, cost_ms: expected >= 1, >= 1, >= 0, got {self.repeats}, "
                            f"{self.dim}, {self.cost_ms}")
        options = self.options()
        if self.budget < options.n_islands * options.capacity_for(self.dim):
            problems.append(f"budget: expected at least {options.n_islands * options.capacity_for(self.dim)} "
                            f"evaluations (every island's first population), got {self.budget}")
        if problems:
            raise ValueError("; ".join(problems))

    def options(self):
        """The bench's options of these runs (islands: the largest P)."""
        from .workloads import SchemesOptions

        return SchemesOptions(ps=tuple(sorted({1, *self.ranks})), dims=(self.dim,), costs_ms=(self.cost_ms,),
                              modes=(self.mode,), budget=self.budget, large_budget=self.budget)


def worker(spec_path: str, out_path: str) -> None:
    """The launched job: every scheme ``repeats`` times at this rank count; rank 0 writes the rows."""
    from mpi4py import MPI

    from ..comm import abort_on_error
    from ..parallel.threads import limit_blas_threads
    from .workloads import Workload, measure, warm_up

    spec = MeasureSpec(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in json.loads(Path(spec_path).read_text()).items()})
    size = MPI.COMM_WORLD.Get_size()
    schemes = spec.schemes if size > 1 else ("island",)
    options = spec.options()
    rows = []
    with abort_on_error(), contextlib.ExitStack() as stack:
        limit_blas_threads(1, stack)
        warm_up(options, schemes)
        for _ in range(spec.repeats):          # in rounds: the machine's slow spells spread over schemes
            for scheme in schemes:
                rows.append(measure(Workload(spec.cost_ms, spec.mode, spec.dim), scheme, options))
    if MPI.COMM_WORLD.Get_rank() == 0:
        Path(out_path).write_text(json.dumps(rows))


def launch(ranks: int, spec: MeasureSpec, workdir: Path) -> list[dict]:
    """One job of ``ranks`` ranks (:func:`worker`); its rows."""
    from .calibrate import run_launched

    spec_path, out_path = workdir / f"spec{ranks}.json", workdir / f"rows{ranks}.json"
    spec_path.write_text(json.dumps(spec.__dict__))
    return run_launched(ranks, ["mpievo.plan.measured", str(spec_path), str(out_path)], JOB_TIMEOUT_S,
                        "job to write its rows",
                        lambda done: json.loads(out_path.read_text()) if out_path.exists() else None)


def compare(rows: list[dict], constants, interval: int, fitted=None) -> list[dict]:
    """Per (scheme, P): the measured walls' median, fastest and slowest, the model's wall,
    the error of the median and the errors' spread over the runs (one rank: the island
    scheme's runs, every scheme's model there); with ``fitted`` constants also their
    model and its error of the median ("fitted_s", "fitted_error").

    Example:
        >>> from mpievo.plan.timing import Constants
        >>> c = Constants.from_dict({"cores": 2, "engine": {"100": {"row_s": 0.0, "breed_s": 0.0}},
        ...                          "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}})
        >>> row = {"scheme": "island", "ranks": 1, "ranks_per_island": 1, "islands": 1, "dim": 100,
        ...        "capacity": 2, "budget": 4, "cost_ms": 10.0, "mode": "sleep", "generations": 1,
        ...        "wall_s": 0.05, "bytes_per_generation_by_purpose": {}}
        >>> round(compare([row], c, 2)[0]["error"], 2)     # 4 children of 10 ms: 0.04 s predicted
        -0.2
    """
    from .timing import predict_row

    groups: dict = {}
    for row in rows:
        groups.setdefault((row["scheme"], row["ranks"]), []).append(row)
    out = []
    for (scheme, ranks), runs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        model = predict_row(runs[0], interval, constants)["model_wall_s"]
        walls = sorted(r["wall_s"] for r in runs)
        median = statistics.median(walls)
        fit = predict_row(runs[0], interval, fitted)["model_wall_s"] if fitted is not None else None
        out.append({"scheme": scheme, "ranks": ranks, "runs": len(runs), "generations": runs[0]["generations"],
                    "measured_s": median, "fastest_s": walls[0], "slowest_s": walls[-1], "model_s": model,
                    "error": model / median - 1, "error_low": model / walls[-1] - 1,
                    "error_high": model / walls[0] - 1, "fitted_s": fit,
                    "fitted_error": fit / median - 1 if fit is not None else None,
                    "loadavg": statistics.median(r["loadavg_1min"] for r in runs if "loadavg_1min" in r)
                    if any("loadavg_1min" in r for r in runs) else None})
    return out


def format_comparison(table: list[dict], spec: MeasureSpec, cores: int, source: str) -> str:
    """The comparison as a markdown table with its conditions.

    Example:
        >>> line = {"scheme": "island", "ranks": 4, "runs": 3, "generations": 7, "measured_s": 2.0,
        ...         "fastest_s": 1.9, "slowest_s": 2.2, "model_s": 1.8, "error": -0.1, "error_low": -0.18,
        ...         "error_high": -0.05, "loadavg": 3.0}
        >>> "| island | 4 (on 2 cores) |" in format_comparison([line], MeasureSpec(), 2, "test")
        True
    """
    lines = [f"{spec.cost_ms:g} ms {spec.mode} per child, {spec.dim:,} genes (float32), budget {spec.budget}, "
             f"{spec.repeats} runs per scheme and P, {cores} cores; constants: {source}", "",
             "| scheme | P | generations | measured wall, median [fastest, slowest] | per generation | model | "
             "error of the median [over the runs] | model fitted at P = 1 | its error | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        over = f" (on {cores} cores)" if t["ranks"] > cores else ""
        load = f"{t['loadavg']:.1f}" if t["loadavg"] is not None else "-"
        lines.append(f"| {t['scheme']} | {t['ranks']}{over} | {t['generations']} | {t['measured_s']:.3g} s "
                     f"[{t['fastest_s']:.3g}, {t['slowest_s']:.3g}] | "
                     f"{1e3 * t['measured_s'] / max(t['generations'], 1):.3g} ms | {t['model_s']:.3g} s | "
                     f"{100 * t['error']:+.0f} % [{100 * t['error_low']:+.0f}, {100 * t['error_high']:+.0f}] | "
                     + (f"{t['fitted_s']:.3g} s | {100 * t['fitted_error']:+.0f} % | " if t.get("fitted_s") else "- | - | ")
                     + f"{load} |")
    return "\n".join(lines)


def measure_against_model(spec: MeasureSpec, constants_path: str | None = None,
                          full: bool = False) -> tuple[list[dict], str]:
    """Run :func:`worker` at every P of ``spec`` and compare, with the constants of
    ``constants_path``, else of a full calibration (``full``: at 1e2 genes and
    ``spec.dim``, minutes), else :func:`quick_constants`; also with them fitted to the
    one-rank runs (:func:`fit_to_one_rank`). (comparison rows, the formatted table)."""
    from .calibrate import _cores, calibrate
    from .timing import Constants

    spec.check()
    if constants_path:
        constants = Constants.load(constants_path)
    elif full:
        constants = Constants.from_dict(calibrate(dims=tuple(sorted({100, spec.dim})), ranks=spec.ranks))
    else:
        constants = quick_constants(spec.dim)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mpievo-measured-") as tmp:
        for ranks in sorted({1, *spec.ranks}):
            rows += launch(ranks, spec, Path(tmp))
    interval = spec.options().interval
    fitted, scale = fit_to_one_rank(constants, rows, interval)
    table = compare(rows, constants, interval, fitted)
    source = f"{constants.source or constants_path}; fitted: engine costs x {scale:.3g} to the one-rank runs"
    return table, format_comparison(table, spec, _cores(), source)


def quick_constants(dim: int):
    """Constants in seconds: the engine's costs at ``dim`` genes stepped in this process
    (:func:`.calibrate.fastest_engine_costs`), this machine's cores, the intra-node link of
    :class:`.scenario.Scenario` and no loop costs or contention (a full ``mpievo plan
    --calibrate`` takes minutes, more on a loaded machine: here one's 2-rank job ran past
    its 10 minutes at a load average of 20)."""
    from ..parallel.threads import limit_blas_threads
    from .calibrate import _cores, fastest_engine_costs
    from .scenario import Scenario
    from .timing import Constants

    with contextlib.ExitStack() as stack:
        limit_blas_threads(1, stack)
        engine = fastest_engine_costs(dim)
    intra = Scenario().intra
    return Constants({dim: engine}, intra, intra, _cores(),
                     source=f"engine stepped in-process at {dim:,} genes, intra link "
                            f"{intra.bandwidth_Bps / 1e9:g} GB/s (not measured), no loop costs")


def fit_to_one_rank(constants, rows: list[dict], interval: int):
    """(``constants`` with every engine cost scaled so that the model gives the one-rank
    runs' median wall time, the scale): the model then predicts the other rank counts
    from the one-rank run, as ``mpievo bench schemes`` does (its error at P = 1 is 0 by
    construction). The scale is 1 without one-rank runs or engine costs.

    Example:
        >>> from mpievo.plan.timing import Constants
        >>> c = Constants.from_dict({"cores": 2, "engine": {"100": {"row_s": 0.001, "breed_s": 0.001}},
        ...                          "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}})
        >>> row = {"scheme": "island", "ranks": 1, "ranks_per_island": 1, "islands": 1, "dim": 100,
        ...        "capacity": 2, "budget": 4, "cost_ms": 10.0, "mode": "sleep", "generations": 1,
        ...        "wall_s": 0.05}
        >>> round(fit_to_one_rank(c, [row], 2)[1], 3)    # 40 ms slept; 4 rows and 2 children: 6 ms at x 1
        1.667
    """
    from .calibrate import scale_to_wall
    from .timing import Cost, predict_seconds
    from .traffic import bench_layout

    ones = [r for r in rows if r["ranks"] == 1]
    if not ones:
        return constants, 1.0
    layout = bench_layout(ones[0], interval=interval)
    cost = Cost(ones[0]["cost_ms"] / 1e3, ones[0]["mode"])

    def scaled(factor):
        return dataclasses.replace(constants, engine={d: {k: v * factor for k, v in c.items()}
                                                      for d, c in constants.engine.items()})

    scale = scale_to_wall(lambda f: predict_seconds(layout, scaled(f), cost)["wall_s"],
                          statistics.median(r["wall_s"] for r in ones))
    if scale is None:
        return constants, 1.0
    return scaled(scale), scale


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2])
