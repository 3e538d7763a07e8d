"""``mpievo run [CONFIG.toml]``: the island-model job, on every rank of ``mpiexec -n P``.

Without a config it runs the embedded default job (``mpievo/cli/default.toml``).
Started by an MPI launcher it runs on every rank; started without one it runs in
this process without MPI (mpi4py is never imported). Every rank validates the same config (rank 0 reads the file and broadcasts its
text) before any work starts; a bad config is reported once, by rank 0, and every
rank exits with status 2. SIGUSR1/SIGTERM on any rank: all ranks finish the current
generation, write a checkpoint and exit with status 85 (requeue); ``--resume DIR``
continues such a run, also on another number of ranks.

Exit status: 0 done, 2 bad config or unusable checkpoint, 85 checkpointed on request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

HELP = "run an island-model optimisation (a TOML job config, or the built-in default job)"
EXIT_CONFIG_ERROR = 2
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
    from ..faults import install_stop_handlers

    # first thing: Slurm's signal may come while MPI and the config are still loading;
    # the handler only records it, and the run stops at its first generation boundary
    stop = install_stop_handlers()
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


def _out_dir(comm, args) -> Path:
    from ..parallel.job import out_dir_default

    out = None
    if comm.rank == 0:
        out = args.out or args.resume or out_dir_default()
        out.mkdir(parents=True, exist_ok=True)
    with comm.purpose("control"):
        out = Path(comm.bcast_object(str(out) if out is not None else None))
    return out


# ---------------------------------------------------------------- the run
def _run(comm, args, stop) -> int:
    try:
        prepared, error = _prepare(comm, args), None
    except _Failure as failure:
        prepared, error = None, str(failure)
    error = _agree(comm, error)
    if error is not None:
        if comm.rank == 0:
            print(f"mpievo run: {error}", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    job = prepared.job
    if args.show_config:
        if comm.rank == 0:
            print(json.dumps(job.config, indent=1))
        return 0
    out = _out_dir(comm, args)
    with contextlib.ExitStack() as stack:
        return _execute(comm, args, prepared, out, stack, stop)


def _execute(comm, args, prepared, out: Path, stack: contextlib.ExitStack, stop) -> int:
    from ..faults import EXIT_CHECKPOINTED_REQUEUE
    from ..io import Checkpointer
    from ..parallel.device_binding import bind_device
    from ..parallel.job import last_generation, run_job
    from ..parallel.output import NonfiniteWarner, OutputWriter, ProgressReporter
    from ..parallel.threads import limit_blas_threads

    job, restored = prepared.job, prepared.restored
    threads = limit_blas_threads(job.run.blas_threads, stack)
    binding = bind_device(getattr(comm, "mpi_comm", None))    # SelfComm: no MPI, the environment
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
        print(f"mpievo run: {start}: {prepared.source}, {job.n_islands} islands on {comm.size} ranks "
              f"({', '.join(sorted(set(devices)))}), {_limits(job, last)}, out {out}", flush=True)
    checkpointer = Checkpointer(out / CHECKPOINT_SUBDIR, keep=job.run.checkpoint_keep, comm=comm)
    result = run_job(job, comm, reporters=reporters, checkpointer=checkpointer, stop=stop,
                     restored=restored)
    if comm.rank == 0 and result.stop_reason == "target":
        print(f"mpievo run: target {job.run.target:g} reached by generation {result.generations}", flush=True)
    if result.stopped:
        if comm.rank == 0:
            print(f"mpievo run: checkpointed at generation {result.generations} on request; "
                  f"resume with `mpievo run --resume {out}` (exit {EXIT_CHECKPOINTED_REQUEUE})", flush=True)
        return EXIT_CHECKPOINTED_REQUEUE
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
