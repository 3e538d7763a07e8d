"""What rank 0 shows and writes about a run: progress, per-island logs, summary, plot.

Output directory layout::

    summary.json                 the result (written only when the run completed); with several
                                 objectives its "front": the merged non-dominated set
    front.png                    that front (several objectives; needs matplotlib)
    islands/island-0003.jsonl    one JSON line per log point of island 3
    convergence.png              best fitness against evaluations (needs matplotlib)
    best_genome.npy              the best genome, when too long for summary.json (bfloat16: as float32)
    checkpoints/                 HDF5 checkpoints (mpievo.io)
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, TextIO

import numpy as np

from ..kernels.host import BFLOAT16
from .runner import LogPoint, RunResult

#: genomes longer than this go to best_genome.npy instead of summary.json
INLINE_GENOME_MAX = 1000
ISLAND_LOG_DIR = "islands"


def island_log_path(out: Path, island: int) -> Path:
    """``out/islands/island-0003.jsonl``."""
    return Path(out) / ISLAND_LOG_DIR / f"island-{island:04d}.jsonl"


def json_number(value: float) -> float | None:
    """``value`` for JSON: non-finite numbers become null (JSON has no NaN/inf)."""
    value = float(value)
    return value if math.isfinite(value) else None


def format_count(value: float) -> str:
    """Human-readable count: 950, 12.3k, 4.56M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}"


#: set by a launcher that knows whether the user's terminal is a tty ("1"/"0"): under
#: Open MPI every rank's stdout is a pseudo-terminal, whatever mpiexec's own stdout is
STDOUT_ISATTY_VARIABLE = "MPIEVO_STDOUT_ISATTY"


def terminal_is_live(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a live ``\r`` progress line suits ``stream``.

    Trusts :data:`STDOUT_ISATTY_VARIABLE` when set; under Open MPI's mpiexec (which
    gives ranks a pseudo-terminal even when its output goes to a file) it assumes
    not; otherwise asks ``stream.isatty()``.
    """
    environ = os.environ if environ is None else environ
    told = environ.get(STDOUT_ISATTY_VARIABLE)
    if told is not None:
        return told.strip() == "1"
    if "OMPI_COMM_WORLD_SIZE" in environ:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ProgressReporter:
    """Rank 0's progress: a live ``\\r`` line on a terminal, periodic plain lines otherwise.

    Args:
        total_generations: the run's last generation.
        stream: where to write (default sys.stdout).
        every_s: minimum seconds between plain lines (not on a terminal).
        live: force the terminal mode on or off (default: :func:`terminal_is_live`).
    """

    def __init__(self, total_generations: int, stream: TextIO | None = None, every_s: float = 2.0,
                 live: bool | None = None):
        self.total = int(total_generations)
        self.stream = sys.stdout if stream is None else stream
        self.every_s = float(every_s)
        self.live = terminal_is_live(self.stream) if live is None else bool(live)
        self._last = -math.inf
        self._width = 0

    def line(self, point: LogPoint) -> str:
        """The progress text for ``point``."""
        rate = point.evaluations_this_run / point.elapsed_s if point.elapsed_s > 0 else 0.0
        best = point.best
        return (f"gen {point.generation}/{self.total}  evals {format_count(point.evaluations)}  "
                f"best {best.best:.6g} (island {best.island})  {format_count(rate)} evals/s  "
                f"migrations {point.migrations}")

    def on_log(self, point: LogPoint) -> None:
        text = self.line(point)
        if self.live:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self.stream.flush()
            return
        now = time.monotonic()
        if now - self._last >= self.every_s or point.generation >= self.total:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last = now

    def on_finish(self, result: RunResult) -> None:
        if self.live:
            self.stream.write("\n")
        state = "stopped (checkpointed)" if result.stopped else "done"
        nonfinite = nonfinite_total(result)
        bad = f", {format_count(nonfinite)} non-finite" if nonfinite else ""
        self.stream.write(f"{state}: generation {result.generations}, best {result.best_fitness:.10g} "
                          f"(island {result.best_island}), {format_count(result.evaluations_this_run)} "
                          f"evaluations{bad} in {result.wall_s:.1f} s "
                          f"({format_count(result.evals_per_s)} evals/s)\n")
        self.stream.flush()


class NonfiniteWarner:
    """Warns (once per island) when an island has seen only NaN or +-inf fitness values.

    Such a fitness would otherwise run to the end and report ``best inf`` without a
    word. Attached by ``mpievo run`` whatever the progress display.
    """

    def __init__(self, stream: TextIO | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.warned: set[int] = set()

    def on_log(self, point: LogPoint) -> None:
        for record in point.records:
            if record.only_nonfinite and record.island not in self.warned:
                self.warned.add(record.island)
                self.stream.write(f"mpievo: warning: island {record.island} has seen only non-finite fitness "
                                  f"values ({record.nonfinite} of {record.evaluations} evaluations were NaN "
                                  f"or +-inf): check the fitness function\n")
                self.stream.flush()

    def on_finish(self, result: RunResult) -> None:
        """Nothing more to say: the summary counts non-finite evaluations."""


def nonfinite_total(result: RunResult) -> int:
    """Evaluations that returned NaN or +-inf, over all islands (rank 0's result)."""
    return sum(int(island.get("nonfinite", 0)) for island in result.islands)


class OutputWriter:
    """Writes the per-island logs, and at the end summary.json and convergence.png.

    Args:
        out: the output directory (created).
        config: the effective config (stored in summary.json).
        resume_generation: generation of the checkpoint a resumed run started from
            (log lines from it on are dropped, since the run logs them again); None for
            a new run (old logs in ``out`` are removed).
        extra: more keys for summary.json (e.g. ranks, device).
        notice: ``notice(text)`` for messages such as a skipped plot (default: print).
    """

    def __init__(self, out: str | Path, config: Mapping[str, Any], *, resume_generation: int | None = None,
                 extra: Mapping[str, Any] | None = None, notice=None):
        self.out = Path(out)
        self.config = dict(config)
        self.extra = dict(extra or {})
        self.notice = notice or (lambda text: print(text, flush=True))
        logs = self.out / ISLAND_LOG_DIR
        logs.mkdir(parents=True, exist_ok=True)
        for path in sorted(logs.glob("island-*.jsonl")):
            if resume_generation is None:
                path.unlink()
            else:
                trim_log(path, resume_generation)

    def on_log(self, point: LogPoint) -> None:
        for record in point.records:
            line = {k: (json_number(v) if isinstance(v, float) else v) for k, v in record.to_json().items()}
            with open(island_log_path(self.out, record.island), "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")

    def on_finish(self, result: RunResult) -> None:
        if result.stopped:
            return  # no summary: the run is not complete (a requeue resumes it)
        summary = self.summary(result)
        write_json_atomic(self.out / "summary.json", summary)
        plot_convergence(self.out, self.out / "convergence.png", notice=self.notice)
        if result.front is not None:
            plot_front(result.front, self.out / "front.png", notice=self.notice)

    def summary(self, result: RunResult) -> dict:
        """The summary.json content for ``result``."""
        genome = result.best_genome
        if genome is not None and genome.size > INLINE_GENOME_MAX:
            # .npy has no bfloat16 (it would read back as raw '|V2'): its exact float32 values
            np.save(self.out / "best_genome.npy", genome.astype(np.float32) if genome.dtype == BFLOAT16 else genome)
            genome_field: Any = "best_genome.npy"
        else:
            genome_field = None if genome is None else [float(x) for x in genome]
        return {
            "config": self.config,
            "best_fitness": json_number(result.best_fitness),
            "best_island": result.best_island,
            "best_genome": genome_field,
            "evaluations": result.evaluations,
            "nonfinite_evaluations": nonfinite_total(result),
            "generations": result.generations,
            "wall_s": result.wall_s,
            "evals_per_s": json_number(result.evals_per_s),
            "evaluations_this_run": result.evaluations_this_run,
            "migrations": result.migrations,
            "bytes_sent": result.bytes_sent,
            "islands": [{k: (json_number(v) if isinstance(v, float) else v) for k, v in island.items()}
                        for island in result.islands],
            "checkpoints": result.checkpoints,
            **({} if result.front is None else {"front": self._front(result.front)}),
            **self.extra,
        }

    def _front(self, front: Mapping[str, Any]) -> dict:
        """The merged front for summary.json; genomes longer than INLINE_GENOME_MAX go to
        front_genomes.npy."""
        genomes = front["genomes"]
        if genomes.ndim == 2 and genomes.shape[1] > INLINE_GENOME_MAX:
            np.save(self.out / "front_genomes.npy", genomes)
            genome_field: Any = "front_genomes.npy"
        else:
            genome_field = genomes.tolist()
        point = front["reference_point"]
        return {"size": int(len(front["objectives"])), "objectives": front["objectives"].tolist(),
                "genomes": genome_field, "islands": front["islands"].tolist(),
                "reference_point": None if point is None else [float(v) for v in point],
                "hypervolume": None if front["hypervolume"] is None else json_number(front["hypervolume"])}


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write JSON to ``path`` through a temporary file and a rename."""
    temp = path.with_name(path.name + f".tmp-{os.getpid()}")
    temp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(temp, path)


def trim_log(path: Path, resume_generation: int) -> None:
    """Keep the lines of a JSON-lines log before ``resume_generation`` (the resumed run
    logs that generation again); unreadable lines, e.g. a torn last line, are dropped."""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["generation"] < resume_generation:
                kept.append(line)
        except (ValueError, KeyError, TypeError):
            continue
    path.write_text("".join(k + "\n" for k in kept), encoding="utf-8")


def read_island_logs(out: str | Path) -> dict[int, list[dict]]:
    """Island index -> its log records, from ``out/islands``."""
    logs = {}
    for path in sorted((Path(out) / ISLAND_LOG_DIR).glob("island-*.jsonl")):
        index = int(path.stem.split("-")[1])
        logs[index] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return logs


def _pyplot(target: str | Path, notice):
    """matplotlib's pyplot on the Agg backend; None (after a notice naming ``target``) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        notice(f"mpievo: {Path(target).name} skipped: matplotlib is not installed "
               "(pip install 'mpievo[plot]')")
        return None
    return plt


def plot_front(front: Mapping[str, Any], target: str | Path, notice=print) -> bool:
    """Scatter the merged front (2 objectives: a plane, 3: a 3-D plot, more: the first
    two) into ``target``, coloured by island. Returns False (after a notice) without matplotlib."""
    plt = _pyplot(target, notice)
    if plt is None:
        return False
    points, islands = np.asarray(front["objectives"]), np.asarray(front["islands"])
    three = points.ndim == 2 and points.shape[1] == 3
    fig = plt.figure(figsize=(6, 5))
    ax = fig.add_subplot(projection="3d" if three else None)
    if len(points):
        columns = [points[:, j] for j in range(3 if three else 2)]
        shown = ax.scatter(*columns, c=islands, s=10, cmap="viridis")
        fig.colorbar(shown, ax=ax, label="island")
    ax.set_xlabel("objective 1")
    ax.set_ylabel("objective 2")
    if three:
        ax.set_zlabel("objective 3")
    hv = front.get("hypervolume")
    ax.set_title("mpievo: merged front" + ("" if hv is None else f" (hypervolume {hv:.4g})"))
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return True


def plot_convergence(out: str | Path, target: str | Path, notice=print) -> bool:
    """Plot every island's best fitness against its evaluations into ``target``.

    Returns:
        True when the plot was written; False (after a notice) without matplotlib.
    """
    plt = _pyplot(target, notice)
    if plt is None:
        return False
    logs = read_island_logs(out)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    values, counts = [], []
    for index, records in sorted(logs.items()):
        points = [(r["evaluations"], r["best"]) for r in records if r.get("best") is not None]
        if points:
            x, y = zip(*points)
            values.extend(y)
            counts.extend(x)
            ax.plot(x, y, lw=1, alpha=0.7, label=f"island {index}" if len(logs) <= 8 else None)
    if values and min(values) > 0:
        ax.set_yscale("log")
    if counts and min(counts) > 0 and max(counts) > 100 * min(counts):
        ax.set_xscale("log")   # most of the progress happens in the first evaluations
    ax.set_xlabel("evaluations (per island)")
    ax.set_ylabel("best fitness")
    ax.set_title("mpievo: convergence")
    if values and len(logs) <= 8:   # no line (every best non-finite): no legend
        ax.legend(fontsize="small")
    elif not values:
        ax.text(0.5, 0.5, "no finite fitness value yet", ha="center", va="center", transform=ax.transAxes)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return True
