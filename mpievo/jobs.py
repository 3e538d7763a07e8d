"""``mpievo.run`` and ``mpievo.resume``: the ``mpievo run`` job from Python.

The same job as the command line (one engine: ``mpievo run`` calls these steps too):
the config validated on every rank before any work starts, an output directory with
per-island logs, checkpoints and summary.json, a resume from the latest checkpoint
(also on another number of ranks). ``python script.py`` runs it in this process
without MPI; ``mpievo launch -n 4 -- python script.py`` on 4 ranks (call it on every
rank). Called from the main thread, SIGUSR1/SIGTERM/SIGINT make every rank finish the
generation, checkpoint and return (``stopped``; the previous handlers come back after);
``resume`` continues from there.

Example::

    import mpievo

    result = mpievo.run("examples/portfolio.toml", out="runs/p1",
                        overrides={"run.budget": 20_000})
    print(result.fun, result.stop_reason, result.summary["evaluations"])
    # later, from where it ended, with more budget (run.budget is among the resumable keys)
    result = mpievo.resume("runs/p1", overrides={"run.budget": 40_000})
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    import numpy as np

__all__ = ["run", "resume", "JobResult", "JobError"]    # the rest: the steps `mpievo run` shares

CHECKPOINT_SUBDIR = "checkpoints"
PROGRESS = ("auto", "live", "lines", "none")


class JobError(ValueError):
    """A job refused before any work started (a bad config, an unusable checkpoint, an
    occupied output directory, too little memory); under MPI every rank raises it with
    the same message.

    Example::

        try:
            mpievo.run({"run": {"islands": -1}})
        except mpievo.JobError as err:
            print(err)          # run.islands: expected an int >= 0 ..., got int -1
    """


@dataclass(frozen=True)
class JobResult:
    """The outcome of :func:`run` or :func:`resume`, the same on every rank.

    Attributes:
        out: the output directory (summary.json, islands/, checkpoints/).
        x: the best genome (the islands' dtype); None when stopped before the first generation.
        fun: its fitness, in the problem's sense (several objectives: the compromise's sum).
        evaluations: fitness evaluations over all islands, earlier attempts included.
        generations: the generation the run ended at.
        stop_reason: "generations", "budget", "target", or "stopped" (a stop request:
            :func:`resume` continues it).
        checkpoint: the latest checkpoint's name (None: none written).
        summary: what summary.json holds (None when stopped: the run is not complete).

    Example::

        result = mpievo.run(out="runs/r1", overrides={"run.generations": 50})
        if result.stopped:
            result = mpievo.resume(result.out)
    """

    out: Path | None
    x: np.ndarray | None
    fun: float
    evaluations: int
    generations: int
    stop_reason: str
    checkpoint: str | None = None
    summary: dict | None = field(default=None, repr=False)

    @property
    def stopped(self) -> bool:
        """Whether a stop request ended the run before its end (resume it)."""
        return self.stop_reason == "stopped"


def run(config: str | Path | Mapping[str, Any] | None = None, problem=None, out: str | Path | None = None, *,
        overrides: Mapping[str, Any] | None = None, overwrite: bool = False, progress: str = "none",
        comm=None) -> JobResult:
    """Run a job as ``mpievo run`` does (collective under MPI: call it on every rank).

    Args:
        config: a TOML job file, a config dict (``{"run": {...}, "engine": {...}}``), or
            None: the built-in job (``mpievo/cli/default.toml``).
        problem: a :class:`mpievo.evo.Problem` object (e.g. a ``mpievo.torch.ModelProblem``)
            in place of the config's ``[problem]`` table (the config must have none).
        out: the output directory (default: a new ``runs/<timestamp>``); it must not hold
            another run unless ``overwrite``.
        overrides: config keys by dotted path, as ``--set`` gives them
            (``{"run.budget": 20000, "engine.algorithm": "de"}``).
        overwrite: remove the run already in ``out`` (its checkpoints, logs, summary) first.
        progress: rank 0's progress display: "none" (default), "lines", "live" or "auto".
        comm: the communicator (default: COMM_WORLD under an MPI launcher, else none).

    Returns:
        The :class:`JobResult` (``summary`` is summary.json's content).

    Raises:
        JobError: a refused job, on every rank, before any work started.

    Example::

        result = mpievo.run({"problem": {"name": "sphere", "dim": 10}, "run": {"budget": 20000}},
                            out="runs/sphere")
        print(result.fun, result.summary["evals_per_s"])
    """
    return _drive(_request(config, overrides, progress, out, problem=problem, overwrite=overwrite), comm)


def resume(directory: str | Path, config: str | Path | Mapping[str, Any] | None = None, problem=None, *,
           out: str | Path | None = None, overrides: Mapping[str, Any] | None = None, progress: str = "none",
           comm=None) -> JobResult:
    """Continue the run in ``directory`` from its latest checkpoint, as ``mpievo run --resume``
    does (collective; on any number of ranks the checkpoint's islands fit).

    Args:
        directory: the output directory of an earlier :func:`run` (or ``mpievo run``).
        config: the config to continue with (default: the one saved in the checkpoint);
            only the keys of :data:`mpievo.config.RESUMABLE_KEYS` may differ from the saved one.
        problem: the Problem object the run was started with, if any (it is not saved).
        out: where to continue (default: ``directory`` itself).
        overrides: config keys by dotted path (``{"run.generations": 400}``).
        progress: as in :func:`run`.
        comm: as in :func:`run`.

    Returns:
        The :class:`JobResult`.

    Raises:
        JobError: no checkpoint, a changed config, or islands that do not fit the ranks.

    Example::

        first = mpievo.run(config, out="runs/r1", overrides={"run.generations": 100})
        more = mpievo.resume("runs/r1", overrides={"run.generations": 200})
    """
    return _drive(_request(config, overrides, progress, out, problem=problem, resume=Path(directory)), comm)


def _request(config, overrides, progress, out, **given) -> Request:
    """The Request of :func:`run`'s or :func:`resume`'s arguments, checked before any work."""
    if isinstance(config, Mapping):
        config = copy.deepcopy(dict(config))
    elif not (config is None or isinstance(config, (str, Path))):
        raise JobError(f"config: expected a TOML file path, a dict or None, got {type(config).__name__}")
    if overrides is not None and not (isinstance(overrides, Mapping) and all(isinstance(k, str) for k in overrides)):
        raise JobError(f"overrides: expected a dict of dotted keys ({{'run.budget': 20000}}), got {overrides!r}")
    if progress not in PROGRESS:
        raise JobError(f"progress: expected one of {list(PROGRESS)}, got {progress!r}")
    return Request(config=config, overrides=dict(overrides or {}), progress=progress,
                   out=None if out is None else Path(out), **given)


def _drive(request: Request, comm) -> JobResult:
    from .faults import RUN_ABORT_SIGNALS, RUN_STOP_SIGNALS, install_stop_handlers
    from .parallel.world import world_comm

    comm = world_comm() if comm is None else comm
    say = (lambda text: print(f"mpievo.run: {text}", flush=True)) if request.progress != "none" else _quiet
    request = replace(request, say=say)
    stop = None
    if threading.current_thread() is threading.main_thread():    # Python sets handlers only there
        stop = install_stop_handlers(RUN_STOP_SIGNALS, abort_on_repeat=RUN_ABORT_SIGNALS)
    try:
        with collective(comm):
            prepared = prepare(comm, request)
            if stopped_before_start(comm, stop):
                restored = prepared.restored
                mine = JobResult(request.out or request.resume, None, math.nan, 0,
                                 0 if restored is None else restored.generation, "stopped",
                                 None if restored is None else restored.name)
            else:
                out = claim_out(comm, request)
                result = execute(comm, request, prepared, out, stop)
                mine = _result(comm, out, result)
        with comm.purpose("control"):
            return comm.bcast_object(mine)
    finally:
        if stop is not None:
            stop.restore()


def _result(comm, out: Path, result) -> JobResult | None:
    """Rank 0's JobResult of a finished or stopped run (None elsewhere)."""
    if comm.rank != 0:
        return None
    summary = None if result.stopped else json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return JobResult(out, result.best_genome, result.best_fitness, result.evaluations, result.generations,
                     result.stop_reason, result.checkpoints[-1] if result.checkpoints else None, summary)


def _quiet(text: str) -> None:
    """Says nothing (``progress="none"``)."""


# ------------------------------------------------------------- the steps of a job
@dataclass(frozen=True)
class Request:
    """What to run: the command line's ``mpievo run`` arguments, or :func:`run`'s.

    ``config``: a TOML path, a parsed config, or None (the built-in job; resuming: the
    saved one). ``fresh_problem``: the overrides' ``problem.name`` starts a new
    ``[problem]`` table (``--problem``). ``say``: rank 0's messages.
    """

    config: str | Path | dict | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    problem: Any = None
    fresh_problem: bool = False
    resume: Path | None = None
    out: Path | None = None
    overwrite: bool = False
    progress: str = "none"
    say: Callable[[str], None] = _quiet


@dataclass
class Prepared:
    """A validated job (:class:`mpievo.config.JobConfig`), the name of its config, and
    the loaded checkpoint when resuming."""

    job: Any
    source: str
    restored: Any = None


@contextlib.contextmanager
def collective(comm):
    """Under MPI an uncaught exception on one rank aborts every rank
    (:func:`mpievo.comm.abort_on_error`); a :class:`JobError`, which every rank raises
    together, passes through."""
    if comm.size == 1:
        yield
        return
    from .comm import abort_on_error

    refused = []
    with abort_on_error():
        try:
            yield
        except JobError as err:
            refused.append(err)
    if refused:
        raise refused[0]


def prepare(comm, request: Request, *, check_memory: bool = True) -> Prepared:
    """Read, override and validate the config on every rank, and load the checkpoint
    when resuming (collective).

    Raises:
        JobError: on every rank, with the first rank's problem.
    """
    from .parallel.memory import memory_problem

    try:
        prepared, error = _prepare(comm, request), None
    except JobError as err:
        prepared, error = None, str(err)
    error = agree(comm, error)
    if error is None and check_memory:
        error = agree(comm, memory_problem(comm, prepared.job))
    if error is not None:
        raise JobError(error)
    return prepared


def _prepare(comm, request: Request) -> Prepared:
    from .config import RESUMABLE_KEYS, ConfigError, validate
    from .io import CheckpointError, check_config_compatible
    from .io.errors import ConfigMismatchError

    try:
        restored = None
        if request.resume is not None:
            restored = _load_checkpoint(comm, request.resume)
            saved = restored.config
        if request.resume is not None and request.config is None:
            raw, source = saved, f"config saved in {request.resume}"
        elif isinstance(request.config, dict):
            raw, source = request.config, "config"
        else:
            raw, source = _read_on_root(comm, request.config)
        job = validate(_with_overrides(raw, request), comm.size, source, problem=request.problem)
        if restored is not None:
            check_config_compatible(saved, job.config, allow=RESUMABLE_KEYS)
            if job.run.generations is not None and restored.generation > job.run.generations:
                raise ConfigError([f"run.generations: expected at least the checkpoint's generation "
                                   f"{restored.generation}, got {job.run.generations}"], source)
            restored = _load_islands(comm, request.resume, job, restored)
        return Prepared(job, source, restored)
    except (ConfigError, ConfigMismatchError, CheckpointError) as err:
        raise JobError(str(err)) from None
    except ValueError as err:  # e.g. islands requested from a checkpoint that lacks them
        raise JobError(f"cannot start: {err}") from None


def _with_overrides(raw: dict, request: Request) -> dict:
    """The config with the request's overrides applied; ``fresh_problem`` starts a new
    ``[problem]`` table (a built-in's shift, rotation or bounds mean nothing for another problem),
    and another ``engine.algorithm`` a new ``[engine]`` table for the built-in job (its keys
    are the GA's for its Rastrigin: the other algorithm takes its own defaults)."""
    from .config import apply_overrides

    if request.fresh_problem:
        raw = {**raw, "problem": {}}
    built_in = request.config is None and request.resume is None
    if built_in and request.overrides.get("engine.algorithm", raw["engine"]["algorithm"]) != raw["engine"]["algorithm"]:
        raw = {**raw, "engine": {}}
    return apply_overrides(raw, dict(request.overrides))


def _read_on_root(comm, path):
    """Rank 0 reads the config file (or the default) and broadcasts (parsed, source) or an error."""
    from .config import ConfigError, load_config

    reply = None
    if comm.rank == 0:
        try:
            parsed, _ = load_config(path)
            reply = ("ok", parsed, "default config" if path is None else str(path))
        except ConfigError as err:
            reply = ("error", str(err), None)
    with comm.purpose("control"):
        reply = comm.bcast_object(reply)
    if reply[0] == "error":
        raise JobError(reply[1])
    return reply[1], reply[2]


def _load_checkpoint(comm, directory: Path, islands=()):
    """The latest checkpoint with ``islands`` of this rank (first the run state and
    config only: which islands a rank holds depends on the resumed job's layout)."""
    from .io import load_latest

    with comm.purpose("control"):
        return load_latest(Path(directory) / CHECKPOINT_SUBDIR, islands=islands, comm=comm)


def _load_islands(comm, directory: Path, job, first):
    """``first`` (loaded without islands) again, with this rank's islands under ``job``'s layout.

    Raises:
        ValueError: a rank count or group layout that the checkpoint's islands do not fit,
            or a newer checkpoint appeared meanwhile.
    """
    from .parallel.groups import islands_to_load

    mine = islands_to_load(comm, job.run, len(first.island_indices))
    restored = _load_checkpoint(comm, directory, mine)
    if restored.name != first.name:
        raise ValueError(f"expected checkpoint {first.name} to stay the latest while resuming, got {restored.name}")
    return restored


def agree(comm, error: str | None) -> str | None:
    """Every rank's verdict; the first failure's message (or None when all are fine)."""
    with comm.purpose("control"):
        verdicts = comm.allgather_object(error)
    return next((v for v in verdicts if v is not None), None)


def stopped_before_start(comm, stop) -> bool:
    """Whether a stop was requested on any rank before the run began (nothing to save yet;
    the ranks may leave one by one after this collective: see StopRequest.disarmed)."""
    disarmed = contextlib.nullcontext() if stop is None else stop.disarmed()
    with disarmed, comm.purpose("control"):
        return any(comm.allgather_object(stop is not None and stop.requested))


def claim_out(comm, request: Request) -> Path:
    """The output directory, made on rank 0 (collective).

    Raises:
        JobError: it holds another run (and neither resuming in place nor overwrite), or
            cannot be made.
    """
    from .parallel.job import claim_out_dir, make_default_out_dir

    reply = None
    if comm.rank == 0:
        try:
            if request.out is None and request.resume is None:
                reply = (str(make_default_out_dir()), None)
            else:
                out = request.out or request.resume
                in_place = request.resume is not None and out.resolve() == request.resume.resolve()
                claim_out_dir(out, resuming=in_place, overwrite=request.overwrite)
                reply = (str(out), None)
        except (OSError, ValueError) as err:
            reply = (None, str(err))
    with comm.purpose("control"):
        out, error = comm.bcast_object(reply)
    if error is not None:
        raise JobError(error)
    return Path(out)


def execute(comm, request: Request, prepared: Prepared, out: Path, stop):
    """Run the prepared job into ``out`` (collective): logs, checkpoints, summary.json.

    Returns:
        The :class:`mpievo.parallel.runner.RunResult` (genome on rank 0).

    Raises:
        JobError: the GPU islands do not fit in their devices' free memory.
    """
    from mpievo.kernels import numba_cache

    from .evo.warmup import warm_up_all
    from .io import Checkpointer
    from .parallel.device_binding import bind_device
    from .parallel.job import last_generation, run_job
    from .parallel.memory import device_memory_problem
    from .parallel.output import NonfiniteWarner, OutputWriter, ProgressReporter
    from .parallel.threads import limit_blas_threads

    job, restored, say = prepared.job, prepared.restored, request.say
    with contextlib.ExitStack() as stack:
        threads = limit_blas_threads(job.run.blas_threads, stack)
        binding = bind_device(getattr(comm, "mpi_comm", None))    # SelfComm: no MPI, the environment
        error = agree(comm, device_memory_problem(comm, job))
        if error is not None:
            raise JobError(error)
        last = last_generation(job)
        with comm.purpose("control"):
            devices = comm.allgather_object(binding.label)
        reporters = []
        if comm.rank == 0:
            reporters.append(NonfiniteWarner())
            if request.progress != "none":
                live = {"auto": None, "live": True, "lines": False}[request.progress]
                reporters.append(ProgressReporter(last, live=live))
            extra = {"ranks": comm.size, "devices": devices, "blas_threads": threads,
                     "resumed_from": None if restored is None else restored.name,
                     "wall_s_total": None}
            reporters.append(_TotalWall(OutputWriter(
                out, job.config, resume_generation=None if restored is None else restored.generation,
                extra=extra), restored))
            start = "resuming " + restored.name if restored is not None else "starting"
            for note in () if restored is None else restored.skipped:
                say(f"skipped: {note}")
            say(f"{start}: {prepared.source}, {job.n_islands} islands on {comm.size} ranks "
                f"({', '.join(sorted(set(devices)))}), {_limits(job, last)}, out {out}")
        # compile before the run's clock starts (generation 0's evaluations/s stay honest)
        compiled = warm_up_all(job.engines, job.problem.dim)
        if comm.rank == 0 and compiled:
            say(f"kernels ready in {compiled:.2f} s (compiled or loaded from the Numba cache "
                f"in {numba_cache.location()})")
        checkpointer = Checkpointer(out / CHECKPOINT_SUBDIR, keep=job.run.checkpoint_keep, comm=comm,
                                    background=job.run.checkpoint_background,
                                    incremental=job.run.checkpoint_incremental)
        return run_job(job, comm, reporters=reporters, checkpointer=checkpointer, stop=stop,
                       restored=restored)


def _limits(job, last: int) -> str:
    """What bounds the run, for the start line: "120 generations, budget 50000, target 0.001"."""
    run = job.run
    parts = [f"{last} generations"]
    if run.budget is not None:
        parts.append(f"budget {run.budget}")
    if run.target is not None:
        parts.append(f"target {run.target:g}")
    return ", ".join(parts)


class _TotalWall:
    """Adds the wall time of earlier attempts (from the checkpoint) and why the run
    ended to summary.json."""

    def __init__(self, writer, restored):
        self.writer = writer
        self.before = 0.0 if restored is None else float(restored.run_state.get("wall_s_before", 0.0))

    def on_log(self, point) -> None:
        self.writer.on_log(point)

    def on_finish(self, result) -> None:
        self.writer.extra["wall_s_total"] = self.before + result.wall_s
        self.writer.extra["stop_reason"] = result.stop_reason
        self.writer.on_finish(result)
