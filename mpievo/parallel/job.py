"""From a validated job config to a running island model (the Python API of ``mpievo run``).

Example (on every rank, e.g. under ``mpiexec -n 2``)::

    from mpievo.comm import Communicator
    from mpievo.config import validate
    from mpievo.parallel import run_job

    comm = Communicator()
    job = validate({"run": {"islands": 4, "generations": 50},
                    "problem": {"name": "sphere", "dim": 10}}, comm.size)
    result = run_job(job, comm)          # result.best_genome on rank 0
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..evo.problems import Problem, load_object, make_problem
from .adaptive import AdaptiveInterval
from .migration import MigrationPolicy
from .runner import Reporter, RunLoop, RunResult, RunSettings
from .scheme import IslandScheme, MigrationSchedule

_TOPOLOGY_OPTIONS = ("degree", "rows", "adjacency", "edges")


class RowFitness:
    """One genome's fitness from a batch function (picklable when the function is)."""

    def __init__(self, batch_function):
        self.batch_function = batch_function

    def __call__(self, genome) -> float:
        return float(np.asarray(self.batch_function(np.asarray(genome)[None, :])).reshape(-1)[0])


def build_problem(problem: Mapping[str, Any], stack: contextlib.ExitStack | None = None) -> Problem:
    """The :class:`Problem` of a ``[problem]`` table (validated by mpievo.config).

    With ``time_limit > 0`` each genome is evaluated under
    :class:`mpievo.faults.TimeLimitedFitness` (a late evaluation counts as failed, +inf);
    its worker is closed when ``stack`` closes.
    """
    name = problem["name"]
    limit = float(problem.get("time_limit", 0.0))
    common = dict(lower=problem.get("lower"), upper=problem.get("upper"),
                  maximize=problem.get("maximize", False))
    if ":" not in name:
        built = make_problem(name, problem["dim"], shift=problem.get("shift", False),
                             rotate=problem.get("rotate", False), seed=problem.get("seed", 0), **common)
        if limit <= 0:
            return built
        func, batched = built.func, True
    else:
        func, batched = load_object(name), problem.get("batched", True)
        if isinstance(func, Problem):
            return func
        if limit <= 0:
            return make_problem(func, problem["dim"], batched=batched, **common)
    from ..faults import TimeLimitedFitness

    limited = TimeLimitedFitness(RowFitness(func) if batched else func, limit,
                                 method=problem.get("time_limit_method", "process"))
    if stack is not None:
        stack.callback(limited.close)
    lower, upper = (common["lower"], common["upper"]) if ":" in name else (built.lower, built.upper)
    return Problem(limited.evaluate_many, problem["dim"], lower, upper, maximize=common["maximize"],
                   name=f"{name} (time limit {limit:g} s)", batched=True)


def build_scheme(comm, job, problem: Problem | None = None) -> IslandScheme:
    """The :class:`IslandScheme` of a validated :class:`mpievo.config.JobConfig`."""
    migration = job.migration
    adaptive = migration.get("adaptive", {})
    rule = None
    if adaptive.get("enabled"):
        rule = AdaptiveInterval(adaptive["minimum"], adaptive["maximum"], adaptive["collapse_below"],
                                adaptive["diverse_above"])
    options = {k: migration[k] for k in _TOPOLOGY_OPTIONS if k in migration}
    if migration["topology"] != "random":
        options.pop("degree", None)
    schedule = MigrationSchedule(migration["topology"], migration["interval"], options, rule)
    policy = MigrationPolicy(migration["emigrants"], migration["selection"], migration["replacement"],
                             migration["unique"])
    return IslandScheme(comm, build_problem(job.problem) if problem is None else problem, job.engine,
                        n_islands=job.n_islands, seed=job.run["seed"], policy=policy, schedule=schedule)


def run_job(job, comm, *, reporters: Sequence[Reporter] = (), checkpointer: Any = None,
            stop: Any = None, restored: Any = None, generations: int | None = None) -> RunResult:
    """Run a validated job to its last generation (collective).

    Args:
        job: a :class:`mpievo.config.JobConfig`.
        comm: an mpievo Communicator.
        reporters: rank 0's observers (progress, output files).
        checkpointer: mpievo.io.Checkpointer or None.
        stop: a flag with ``requested`` (mpievo.faults.StopRequest) or None.
        restored: a loaded checkpoint (``.islands`` for this rank, ``.run_state``) or None.
        generations: override ``run.generations``.

    Returns:
        The :class:`RunResult` (genome and per-island list on rank 0).
    """
    with contextlib.ExitStack() as stack:
        scheme = build_scheme(comm, job, build_problem(job.problem, stack))
        extra = {}
        if restored is not None:
            scheme.restore(restored.islands, restored.run_state)
            extra["wall_s_before"] = float(np.asarray(restored.run_state.get("wall_s_before", 0.0)))
        settings = RunSettings(job.run["generations"] if generations is None else generations,
                               job.run["log_every"], job.run["checkpoint_every"],
                               float(job.run["checkpoint_seconds"]))
        loop = RunLoop(comm, scheme, settings, reporters=reporters, checkpointer=checkpointer,
                       config=job.config, stop=stop, extra_run_state=extra)
        return loop.run()


def best_genome_bytes(result: RunResult) -> bytes:
    """The best genome's raw bytes (for comparing runs bit for bit); b"" off rank 0."""
    return b"" if result.best_genome is None else np.ascontiguousarray(result.best_genome).tobytes()


def out_dir_default(now=None) -> Path:
    """``runs/<YYYYmmdd-HHMMSS>`` (rank 0 picks it; broadcast it to the others)."""
    import time

    return Path("runs") / time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
