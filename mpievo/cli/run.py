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
import json
import math
import sys
from pathlib import Path


HELP = "run an island-model optimisation (a TOML job config, or the built-in default job)"
EXIT_CONFIG_ERROR = 2
#: a completed run in which no island ever saw a finite fitness
EXIT_NO_FINITE_FITNESS = 3
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
             "# departs from these defaults for its 100-D rotated Rastrigin (the file says why; another",
             "# algorithm set on the command line drops its [engine] keys: that algorithm's defaults apply):"]
    for name, cls in tables.items():
        for key, value in parsed.get(name, {}).items():
            if value != cls.keys()[key].default:
                lines.append(f"#   {name}.{key} = {json.dumps(value)}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the run
def _request(args):
    """The job of the command line (:class:`mpievo.jobs.Request`).

    Raises:
        ConfigError: two configs given, or a malformed ``--set``.
    """
    from ..config import parse_assignment
    from ..jobs import Request

    values = {}
    for key in ["problem.name", *(key for _, key, _ in _FLAGS)]:
        given = getattr(args, key, None)
        if given is not None:
            values[key] = parse_assignment(f"{key}={given}")[1]
    fresh_problem = "problem.name" in values
    for text in args.assignments:
        key, value = parse_assignment(text)
        values[key] = value
    return Request(config=_config_path(args), overrides=values, fresh_problem=fresh_problem, resume=args.resume,
                   out=args.out, overwrite=args.overwrite, progress=args.progress, say=_say)


def _say(text: str) -> None:
    print(f"mpievo run: {text}", flush=True)


def _config_path(args):
    if args.config is not None and args.config_option is not None and args.config != args.config_option:
        from ..config import ConfigError

        raise ConfigError([f"expected one config, got {args.config} and --config {args.config_option}"],
                          "command line")
    return args.config if args.config is not None else args.config_option


def _run(comm, args, stop) -> int:
    from ..config import ConfigError
    from ..faults import EXIT_CHECKPOINTED_REQUEUE
    from ..jobs import JobError, claim_out, execute, prepare, stopped_before_start

    try:
        request = _request(args)
        prepared = prepare(comm, request, check_memory=not args.show_config)
    except (ConfigError, JobError) as err:      # the same on every rank
        return _refuse(comm, str(err))
    job = prepared.job
    if args.show_config:
        if comm.rank == 0:
            print(json.dumps(job.config, indent=1))
        return 0
    if stopped_before_start(comm, stop):
        if comm.rank == 0:
            _say(f"interrupted before the first checkpoint: {_nothing_written(args, prepared)}")
        return EXIT_CHECKPOINTED_REQUEUE
    try:
        out = claim_out(comm, request)
        result = execute(comm, request, prepared, out, stop)
    except JobError as err:
        return _refuse(comm, str(err))
    if comm.rank == 0 and result.stop_reason == "target":
        _say(f"target {job.run.target:g} reached by generation {result.generations}")
    if result.stopped:
        if comm.rank == 0:
            _say(f"checkpointed at generation {result.generations} on request; "
                 f"resume with `mpievo run --resume {out}` (exit {EXIT_CHECKPOINTED_REQUEUE})")
        return EXIT_CHECKPOINTED_REQUEUE
    if not math.isfinite(result.best_fitness):
        if comm.rank == 0:
            print(f"mpievo run: no island ever saw a finite fitness in {result.generations} generations "
                  f"({result.evaluations} evaluations, best {result.best_fitness}); check the fitness "
                  f"function and the bounds (exit {EXIT_NO_FINITE_FITNESS})", file=sys.stderr, flush=True)
        return EXIT_NO_FINITE_FITNESS
    return 0


def _refuse(comm, error: str) -> int:
    if comm.rank == 0:
        print(f"mpievo run: {error}", file=sys.stderr, flush=True)
    return EXIT_CONFIG_ERROR


def _nothing_written(args, prepared) -> str:
    if prepared.restored is not None:
        return (f"checkpoint {prepared.restored.name} is unchanged; resume with "
                f"`mpievo run --resume {args.resume}`")
    return "nothing was written; run the same command again to start over"
