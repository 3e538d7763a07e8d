"""``mpievo run [CONFIG.toml]``: the island-model job, on every rank of ``mpiexec -n P``.

Without a config it runs the embedded default job (``mpievo/cli/default.toml``).
Started by an MPI launcher it runs on every rank; started without one it runs in
this process without MPI (mpi4py is never imported). Every rank validates the same config (rank 0 reads the file and broadcasts its
text) before any work starts; a bad config is reported once, by rank 0, and every
rank exits with status 2. SIGUSR1/SIGTERM/SIGINT on any rank: all ranks finish the current
generation, write a checkpoint and exit with status 85 (requeue); a second SIGINT or
SIGTERM ends the rank at once (the previous checkpoint stays whole); ``--resume DIR``
continues such a run, also on another number of ranks. A stop requested before the
run's first generation exits 85 too, having written nothing. A run never writes into a
directory that holds another run (checkpoints or a summary.json) unless ``--overwrite``.

Exit status: 0 done, 2 bad config, unusable checkpoint, an occupied output directory or
too little memory, 3 no island ever saw a finite fitness, 85 stopped on request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

HELP = "run an island-model optimisation (a TOML job config, or the built-in default job)"
EXIT_CONFIG_ERROR = 2
#: a completed run in which no island ever saw a finite fitness
EXIT_NO_FINITE_FITNESS = 3
CHECKPOINT_SUBDIR = "checkpoints"
#: (flag, config key, metavar) of the value overrides besides --problem
_FLAGS = (("--islands", "run.islands", "N"), ("--generations", "run.generations", "N"),
          ("--budget", "run.budget", "N"), ("--target", "run.target", "F"), ("--seed", "run.seed", "S"), ("--dim", "problem.dim", "D"),
          ("--lower", "problem.lower", "X"), ("--upper", "problem.upper", "X"),
          ("--log-every", "run.log_every", "N"), ("--checkpoint-every", "run.checkpoint_every", "N"),
          ("--checkpoint-seconds", "run.checkpoint_seconds", "T"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", type=Path, metavar="CONFIG.toml",
                        help="job config (default: the built-in job; see --help-config)")
    parser.add_argument("--config", dest="config_option", type=Path, metavar="CONFIG.toml",
                        help="the same as the positional CONFIG.toml")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: runs/<timestamp>, or DIR of --resume)")
    parser.add_argument("--resume", type=Path, metavar="DIR",
                        help="continue the run in DIR from its latest checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="remove the run already in --out (its checkpoints, logs and summary) first")
    overrides = parser.add_argument_group("overrides (take precedence over the config)")
    overrides.add_argument("--problem", dest="problem.name", metavar="NAME",
                           help="sets problem.name (built-in or module:function) in a fresh [problem] "
                                "table: the config's other problem keys (shift, rotate, bounds, ...) "
                                "are dropped; give them with --dim, --lower, --upper or --set")
    for flag, key, meta in _FLAGS:
        overrides.add_argument(flag, dest=key, metavar=meta, help=f"sets {key}")
    overrides.add_argument("--set", dest="assignments", action="append", default=[],
                           metavar="TABLE.KEY=VALUE", help="set any config key (TOML value), repeatable")
    parser.add_argument("--progress", choices=("auto", "live", "lines", "none"), default="auto",
                        help="rank 0's progress display (auto: a live line on a terminal)")
    parser.add_argument("--show-config", action="store_true",
                        help="print the effective config (JSON) and exit")
    parser.add_argument("--help-config", action="store_true", help="list every config key and exit")


def main(args: argparse.Namespace) -> int:
    if args.help_config:
        from ..config import describe_schema

        print(describe_schema())
        print(_departures_note())
        return 0
    from ..faults import RUN_ABORT_SIGNALS, RUN_STOP_SIGNALS, install_stop_handlers

    # first thing: Slurm's signal may come while MPI and the config are still loading;
    # the handler only records it, and the run stops at its first generation boundary
    stop = install_stop_handlers(RUN_STOP_SIGNALS, abort_on_repeat=RUN_ABORT_SIGNALS)
    try:
        from ..parallel.world import world_comm

        comm = world_comm()
        if comm.size == 1:
            return _run(comm, args, stop)
        from ..comm import abort_on_error

        with abort_on_error():
            return _run(comm, args, stop)
    finally:
        stop.restore()


def _departures_note() -> str:
    """The keys the embedded job sets away from the defaults (one set for the library,
    ``mpievo.minimize`` and jobs; the embedded job is tuned for its own problem)."""
    from ..config import MigrationConfig, ProblemConfig, RunConfig, load_config
    from ..evo.engine_config import EngineConfig

    parsed, _ = load_config(None)
    tables = {"run": RunConfig, "problem": ProblemConfig, "migration": MigrationConfig, "engine": EngineConfig}
    lines = ["# `mpievo run` without a config runs the embedded job (mpievo/cli/default.toml), which",
             "# departs from these defaults for its 100-D rotated Rastrigin (the file says why):"]
    for name, cls in tables.items():
        for key, value in parsed.get(name, {}).items():
            if value != cls.keys()[key].default:
                lines.append(f"#   {name}.{key} = {json.dumps(value)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- preparation
class _Prepared:
    def __init__(self, job, source: str, restored=None):
        self.job, self.source, self.restored = job, source, restored


def _command_line(raw: dict, args) -> dict:
    """The config with the command line's overrides applied; ``--problem`` starts a fresh
    ``[problem]`` table (a built-in's shift, rotation or bounds mean nothing for another
    problem)."""
    from ..config import apply_overrides, parse_assignment

    values = {}
    for key in ["problem.name", *(key for _, key, _ in _FLAGS)]:
        given = getattr(args, key, None)
        if given is not None:
            values[key] = parse_assignment(f"{key}={given}")[1]
    if "problem.name" in values:
        raw = {**raw, "problem": {}}
    for text in args.assignments:
        key, value = parse_assignment(text)
        values[key] = value
    return apply_overrides(raw, values)


def _config_path(args):
    if args.config is not None and args.config_option is not None and args.config != args.config_option:
        from ..config import ConfigError

        raise ConfigError([f"expected one config, got {args.config} and --config {args.config_option}"],
                          "command line")
    return args.config if args.config is not None else args.config_option


def _read_on_root(comm, path):
    """Rank 0 reads the config file (or the default) and broadcasts (parsed, source) or an error."""
    from ..config import ConfigError, load_config

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
        raise _Failure(reply[1])
    return reply[1], reply[2]


class _Failure(Exception):
    """A problem every rank has detected; rank 0 prints it, all exit with status 2."""


def _prepare(comm, args) -> _Prepared:
    from ..config import ConfigError, RESUMABLE_KEYS, validate
    from ..io import CheckpointError, check_config_compatible
    from ..io.errors import ConfigMismatchError

    try:
        path = _config_path(args)
        restored = None
        if args.resume is not None:
            restored = _load_checkpoint(comm, args.resume)
            saved = restored.config
            if path is None:
                raw, source = saved, f"config saved in {args.resume}"
            else:
                raw, source = _read_on_root(comm, path)
        else:
            raw, source = _read_on_root(comm, path)
        job = validate(_command_line(raw, args), comm.size, source)
        if restored is not None:
            check_config_compatible(saved, job.config, allow=RESUMABLE_KEYS)
            if job.run.generations is not None and restored.generation > job.run.generations:
                raise ConfigError([f"run.generations: expected at least the checkpoint's generation "
                                   f"{restored.generation}, got {job.run.generations}"], source)
            restored = _load_islands(comm, args.resume, job, restored)
        return _Prepared(job, source, restored)
    except (ConfigError, ConfigMismatchError, CheckpointError) as err:
        raise _Failure(str(err)) from None
    except ValueError as err:  # e.g. islands requested from a checkpoint that lacks them
        raise _Failure(f"cannot start: {err}") from None


def _load_checkpoint(comm, directory: Path, islands=()):
    """The latest checkpoint with ``islands`` of this rank (first the run state and
    config only: which islands a rank holds depends on the resumed job's layout)."""
    from ..io import load_latest

    with comm.purpose("control"):
        return load_latest(directory / CHECKPOINT_SUBDIR, islands=islands, comm=comm)


def _load_islands(comm, directory: Path, job, first):
    """``first`` (loaded without islands) again, with this rank's islands under ``job``'s layout.

    Raises:
        ValueError: a rank count or group layout that the checkpoint's islands do not fit,
            or a newer checkpoint appeared meanwhile.
    """
    from ..parallel.groups import islands_to_load

    mine = islands_to_load(comm, job.run, len(first.island_indices))
    restored = _load_checkpoint(comm, directory, mine)
    if restored.name != first.name:
        raise ValueError(f"expected checkpoint {first.name} to stay the latest while resuming, got {restored.name}")
    return restored


def _agree(comm, error: str | None) -> str | None:
    """Every rank's verdict; the first failure's message (or None when all are fine)."""
    with comm.purpose("control"):
        verdicts = comm.allgather_object(error)
    return next((v for v in verdicts if v is not None), None)


def _out_dir(comm, args) -> tuple[Path | None, str | None]:
    """(the output directory, made on rank 0; or None and why it cannot be used)."""
    from ..parallel.job import claim_out_dir, make_default_out_dir

    reply = None
    if comm.rank == 0:
        try:
            if args.out is None and args.resume is None:
                reply = (str(make_default_out_dir()), None)
            else:
                out = args.out or args.resume
                in_place = args.resume is not None and out.resolve() == args.resume.resolve()
                claim_out_dir(out, resuming=in_place, overwrite=args.overwrite)
                reply = (str(out), None)
        except (OSError, ValueError) as err:
            reply = (None, str(err))
    with comm.purpose("control"):
        out, error = comm.bcast_object(reply)
    return (None if out is None else Path(out)), error


# ---------------------------------------------------------------- the run
def _run(comm, args, stop) -> int:
    from ..faults import EXIT_CHECKPOINTED_REQUEUE
    from ..parallel.memory import memory_problem

    try:
        prepared, error = _prepare(comm, args), None
    except _Failure as failure:
        prepared, error = None, str(failure)
    error = _agree(comm, error)
    if error is None and not args.show_config:
        error = _agree(comm, memory_problem(comm, prepared.job))
    if error is not None:
        return _refuse(comm, error)
    job = prepared.job
    if args.show_config:
        if comm.rank == 0:
            print(json.dumps(job.config, indent=1))
        return 0
    if _stop_before_start(comm, stop):
        if comm.rank == 0:
            print(f"mpievo run: interrupted before the first checkpoint: {_nothing_written(args, prepared)}",
                  flush=True)
        return EXIT_CHECKPOINTED_REQUEUE
    out, error = _out_dir(comm, args)
    if error is not None:
        return _refuse(comm, error)
    with contextlib.ExitStack() as stack:
        return _execute(comm, args, prepared, out, stack, stop)


def _refuse(comm, error: str) -> int:
    if comm.rank == 0:
        print(f"mpievo run: {error}", file=sys.stderr, flush=True)
    return EXIT_CONFIG_ERROR


def _stop_before_start(comm, stop) -> bool:
    """Whether a stop was requested on any rank before the run began (nothing to save yet;
    the ranks may leave one by one after this collective: see StopRequest.disarmed)."""
    with stop.disarmed(), comm.purpose("control"):
        return any(comm.allgather_object(stop.requested))


def _nothing_written(args, prepared) -> str:
    if prepared.restored is not None:
        return (f"checkpoint {prepared.restored.name} is unchanged; resume with "
                f"`mpievo run --resume {args.resume}`")
    return "nothing was written; run the same command again to start over"


def _execute(comm, args, prepared, out: Path, stack: contextlib.ExitStack, stop) -> int:
    from mpievo.kernels import numba_cache

    from ..evo.warmup import warm_up_all
    from ..faults import EXIT_CHECKPOINTED_REQUEUE
    from ..io import Checkpointer
    from ..parallel.device_binding import bind_device
    from ..parallel.job import last_generation, run_job
    from ..parallel.memory import device_memory_problem
    from ..parallel.output import NonfiniteWarner, OutputWriter, ProgressReporter
    from ..parallel.threads import limit_blas_threads

    job, restored = prepared.job, prepared.restored
    threads = limit_blas_threads(job.run.blas_threads, stack)
    binding = bind_device(getattr(comm, "mpi_comm", None))    # SelfComm: no MPI, the environment
    error = _agree(comm, device_memory_problem(comm, job))
    if error is not None:
        return _refuse(comm, error)
    last = last_generation(job)
    with comm.purpose("control"):
        devices = comm.allgather_object(binding.label)
    reporters = []
    if comm.rank == 0:
        reporters.append(NonfiniteWarner())
        if args.progress != "none":
            live = {"auto": None, "live": True, "lines": False}[args.progress]
            reporters.append(ProgressReporter(last, live=live))
        extra = {"ranks": comm.size, "devices": devices, "blas_threads": threads,
                 "resumed_from": None if restored is None else restored.name,
                 "wall_s_total": None}
        reporters.append(_TotalWall(OutputWriter(
            out, job.config, resume_generation=None if restored is None else restored.generation,
            extra=extra), restored))
        start = "resuming " + restored.name if restored is not None else "starting"
        for note in () if restored is None else restored.skipped:
            print(f"mpievo run: skipped: {note}", flush=True)
        print(f"mpievo run: {start}: {prepared.source}, {job.n_islands} islands on {comm.size} ranks "
              f"({', '.join(sorted(set(devices)))}), {_limits(job, last)}, out {out}", flush=True)
    # compile before the run's clock starts (generation 0's evaluations/s stay honest)
    compiled = warm_up_all(job.engines, job.problem.dim)
    if comm.rank == 0 and compiled:
        print(f"mpievo run: kernels ready in {compiled:.2f} s (compiled or loaded from the Numba cache "
              f"in {numba_cache.location()})", flush=True)
    checkpointer = Checkpointer(out / CHECKPOINT_SUBDIR, keep=job.run.checkpoint_keep, comm=comm,
                                background=job.run.checkpoint_background,
                                incremental=job.run.checkpoint_incremental)
    result = run_job(job, comm, reporters=reporters, checkpointer=checkpointer, stop=stop,
                     restored=restored)
    if comm.rank == 0 and result.stop_reason == "target":
        print(f"mpievo run: target {job.run.target:g} reached by generation {result.generations}", flush=True)
    if result.stopped:
        if comm.rank == 0:
            print(f"mpievo run: checkpointed at generation {result.generations} on request; "
                  f"resume with `mpievo run --resume {out}` (exit {EXIT_CHECKPOINTED_REQUEUE})", flush=True)
        return EXIT_CHECKPOINTED_REQUEUE
    if not math.isfinite(result.best_fitness):
        if comm.rank == 0:
            print(f"mpievo run: no island ever saw a finite fitness in {result.generations} generations "
                  f"({result.evaluations} evaluations, best {result.best_fitness}); check the fitness "
                  f"function and the bounds (exit {EXIT_NO_FINITE_FITNESS})", file=sys.stderr, flush=True)
        return EXIT_NO_FINITE_FITNESS
    return 0


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
        before = 0.0 if restored is None else float(restored.run_state.get("wall_s_before", 0.0))
        self.before = before

    def on_log(self, point) -> None:
        self.writer.on_log(point)

    def on_finish(self, result) -> None:
        self.writer.extra["wall_s_total"] = self.before + result.wall_s
        self.writer.extra["stop_reason"] = result.stop_reason
        self.writer.on_finish(result)
