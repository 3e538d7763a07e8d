"""The TOML job config of ``mpievo run``: load, apply command-line overrides, validate.

A job config has four tables (every key optional; ``mpievo run --help-config`` lists
every key with its type, default and meaning)::

    [run]        seed, generations, budget, target, islands (0: one per rank),
                 log_every, checkpoint_every, checkpoint_seconds (default 600),
                 checkpoint_keep, blas_threads                     (RunConfig)
    [problem]    name (built-in or "module:function"), dim, shift, rotate, seed,
                 lower, upper, maximize, batched, time_limit, time_limit_method
                                                                   (ProblemConfig)
    [engine]     the island engine's settings        (mpievo.evo.config.EngineConfig)
    [migration]  topology, interval, emigrants, selection, replacement, unique,
                 degree (random), rows (torus), adjacency or edges (graph),
                 and [migration.adaptive]: enabled, minimum, maximum,
                 collapse_below, diverse_above      (MigrationConfig, AdaptiveConfig)

Heterogeneous islands: any ``[engine]`` setting may be a list with one value per
island, or a string expression of the island index ``i`` such as ``"0.3 + 0.1*i"``
(parsed safely, see :mod:`mpievo.evo.expressions`).

Every table is a :class:`mpievo.schema.Settings`. :func:`validate` checks everything
once (keys, types, ranges, the island count against the rank count, every island's
engine settings, the topology), reports all problems at once in a :class:`ConfigError`
and returns a :class:`JobConfig` of typed objects that the parallel layer uses as
they are. It is a pure function of the config and the rank count, so every rank
reaches the same verdict without talking. Importing this module loads neither numpy
nor MPI: the engine's registries are imported when validation needs them.

The defaults are those of the tables (``EngineConfig()`` for ``[engine]``): one set,
tuned for cheap problems and many small islands. The embedded job
(``mpievo/cli/default.toml``) departs from some of them for its 100-D rotated
Rastrigin; ``mpievo run --help-config`` lists those departures, the file says why.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .schema import (Check, ConfigError, Settings, boolean, bounds, choice, index_lists, integer, number,
                     optional, setting, shown, table, text, unknown_keys)

if TYPE_CHECKING:
    from .evo.config import EngineConfig
    from .evo.migration import MigrationPolicy
    from .evo.problems import Problem
    from .parallel.scheme import MigrationSchedule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

__all__ = ["ConfigError", "JobConfig", "RunConfig", "ProblemConfig", "MigrationConfig", "AdaptiveConfig",
           "RESUMABLE_KEYS", "validate", "load_config", "parse_toml", "parse_assignment", "apply_overrides",
           "default_config_text", "describe_schema"]

#: rotation matrices above this many genes would not fit in memory (8 * dim**2 bytes)
MAX_ROTATED_DIM = 10_000
#: keys that may change when a run is resumed (everything else must match the checkpoint)
RESUMABLE_KEYS = ("run.generations", "run.budget", "run.target", "run.log_every", "run.checkpoint_every",
                  "run.checkpoint_seconds", "run.checkpoint_keep", "run.blas_threads")
#: run.generations without a budget, when not given
DEFAULT_GENERATIONS = 200


# --------------------------------------------------------------------- registries (loaded late)
def _selection_policies():
    from .evo.migration import SELECTION_POLICIES

    return SELECTION_POLICIES


def _replacement_policies():
    from .evo.migration import REPLACEMENT_POLICIES

    return REPLACEMENT_POLICIES


def _topologies():
    from .parallel.topology import TOPOLOGIES

    return TOPOLOGIES


def _time_limit_methods():
    from .faults import TIME_LIMIT_METHODS

    return TIME_LIMIT_METHODS


def _accept_finite(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        finite.reject(value)
    return float(value)


finite = Check("a finite number", _accept_finite)


# --------------------------------------------------------------------- tables
@dataclass(frozen=True)
class RunConfig(Settings):
    """The ``[run]`` table: how long, how many islands, logging and checkpoints.

    A run ends at the first of ``generations``, ``budget`` (every island has spent
    its share) and ``target``; at least one of ``generations`` and ``budget`` bounds
    it (``generations`` is 200 when neither is given).
    """

    TABLE = "run"

    seed: int = setting(0, integer(0), "seed of every random stream")
    generations: Any = setting(None, optional(integer(1)),
                               "generations to run (in total, also after a resume); each is about the "
                               "largest island batch of evaluations per island; none: no limit with a "
                               f"budget, else {DEFAULT_GENERATIONS}")
    budget: Any = setting(None, optional(integer(1)),
                          "evaluations over all islands, initial populations included, never exceeded: "
                          "island i gets budget // islands (+1 for the first budget % islands); none: no limit")
    target: Any = setting(None, optional(finite),
                          "stop once an island's best fitness is at least this good (<= when minimising, "
                          ">= when maximising), one generation later; none: no target")
    islands: int = setting(0, integer(0), "number of islands; 0: one per rank")
    log_every: int = setting(10, integer(1), "generations between global-best gathers and log lines")
    checkpoint_every: int = setting(0, integer(0), "generations between checkpoints; 0: none by count "
                                    "(there is always one at the end and on SIGUSR1/SIGTERM)")
    checkpoint_seconds: float = setting(600.0, number(0.0, 1e9),
                                        "wall-clock seconds between checkpoints (rank 0's clock; lands one "
                                        "generation later), so a node failure loses at most this much; 0: off")
    checkpoint_keep: int = setting(3, integer(1), "checkpoints kept on disk")
    blas_threads: int = setting(1, integer(0), "BLAS/OpenMP threads per rank; 0: the libraries' default")


@dataclass(frozen=True)
class ProblemConfig(Settings):
    """The ``[problem]`` table; :func:`mpievo.parallel.build_problem` makes the Problem."""

    TABLE = "problem"

    name: str = setting("rastrigin", text, "built-in name or 'module:function'")
    dim: int = setting(100, integer(1), "genes per genome")
    shift: bool = setting(False, boolean, "built-ins: move the optimum (drawn from problem.seed)")
    rotate: bool = setting(False, boolean, "built-ins: rotate the function (drawn from problem.seed)")
    seed: int = setting(0, integer(0), "seed of the shift and rotation")
    lower: Any = setting(None, bounds, "box lower bound (scalar or list); default: the built-in's")
    upper: Any = setting(None, bounds, "box upper bound (scalar or list); default: the built-in's")
    maximize: bool = setting(False, boolean, "larger fitness is better")
    batched: bool = setting(True, boolean, "a user function takes a whole (n, dim) batch")
    time_limit: float = setting(0.0, number(0.0, 1e9), "seconds per evaluation (0: no limit); "
                                "a late evaluation counts as failed")
    time_limit_method: str = setting("process", choice(_time_limit_methods),
                                     "how the limit is enforced (see mpievo.faults)")

    @property
    def user_function(self) -> bool:
        """True for a ``"module:function"`` name."""
        return ":" in self.name

    def _check_together(self, problems: list[str]) -> None:
        from .evo.problems import BUILTIN_PROBLEMS, load_object

        if not self.user_function and self.name not in BUILTIN_PROBLEMS:
            problems.append(f"problem.name: expected a built-in among {sorted(BUILTIN_PROBLEMS)} "
                            f"or 'module:function', got {self.name!r}")
        if self.user_function:
            try:
                load_object(self.name)
            except ValueError as err:
                problems.append(f"problem.name: {err}")
            for flag in ("shift", "rotate"):
                if getattr(self, flag):
                    problems.append(f"problem.{flag}: expected false for a user function, got true")
            for bound in ("lower", "upper"):
                if getattr(self, bound) is None:
                    problems.append(f"problem.{bound}: expected a bound for user function {self.name!r}, "
                                    f"got none")
        if self.rotate and self.dim > MAX_ROTATED_DIM:
            problems.append(f"problem.rotate: expected dim <= {MAX_ROTATED_DIM} with a rotation "
                            f"(8*dim^2 bytes), got dim = {self.dim}")
        for bound in ("lower", "upper"):
            value = getattr(self, bound)
            if isinstance(value, list) and len(value) != self.dim:
                problems.append(f"problem.{bound}: expected a number or {self.dim} numbers, got {len(value)}")


@dataclass(frozen=True)
class AdaptiveConfig(Settings):
    """The ``[migration.adaptive]`` table (:class:`mpievo.parallel.AdaptiveInterval`)."""

    TABLE = "migration.adaptive"

    enabled: bool = setting(False, boolean, "adapt the interval to measured diversity")
    minimum: int = setting(2, integer(1), "shortest interval")
    maximum: int = setting(50, integer(1), "longest interval")
    collapse_below: float = setting(1e-3, number(0.0, 1e300), "diversity below which an island collapsed")
    diverse_above: float = setting(5e-2, number(0.0, 1e300), "diversity above which all islands are diverse")


@dataclass(frozen=True)
class MigrationConfig(Settings):
    """The ``[migration]`` table: the MigrationPolicy and MigrationSchedule of a job."""

    TABLE = "migration"

    topology: str = setting("ring", choice(_topologies), "who sends to whom")
    interval: int = setting(10, integer(1), "generations between migrations (initial one when adaptive)")
    emigrants: int = setting(2, integer(0), "migrants per edge")
    selection: str = setting("best", choice(_selection_policies), "which members emigrate")
    replacement: str = setting("better", choice(_replacement_policies), "how immigrants enter")
    unique: bool = setting(True, boolean, "elite-unique: never send a genome the receiver holds")
    degree: int = setting(1, integer(1), "random topology: destinations per island")
    rows: Any = setting(None, optional(integer(1)), "torus: grid rows (default: most square)")
    adjacency: Any = setting(None, index_lists, "graph topology: destinations of each island")
    edges: Any = setting(None, index_lists, "graph topology: [source, destination] pairs")
    adaptive: AdaptiveConfig = setting(AdaptiveConfig(), table(AdaptiveConfig),
                                       "the [migration.adaptive] table")


# --------------------------------------------------------------------- loading
def default_config_text() -> str:
    """The TOML text of the embedded default job (``mpievo/cli/default.toml``)."""
    return resources.files("mpievo.cli").joinpath("default.toml").read_text(encoding="utf-8")


def parse_toml(text: str, source: str = "config") -> dict:
    """Parse TOML text.

    Raises:
        ConfigError: the text is not valid TOML.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError([f"expected valid TOML, got: {err}"], source) from None


def load_config(path: str | Path | None = None) -> tuple[dict, str]:
    """Read a job config file, or the embedded default job when ``path`` is None.

    Returns:
        (parsed config, its text).

    Raises:
        ConfigError: the file cannot be read or is not valid TOML.
    """
    if path is None:
        text, source = default_config_text(), "default config"
    else:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError([f"expected a readable TOML file, got {type(err).__name__}: {err}"],
                              source) from None
    return parse_toml(text, source), text


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"table.key=value"`` (value in TOML syntax, bare words taken as strings) -> (path, value).

    Raises:
        ConfigError: no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError([f"--set: expected TABLE.KEY=VALUE, got {text!r}"], "command line")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value


def apply_overrides(config: dict, overrides: dict[str, Any]) -> dict:
    """A deep copy of ``config`` with dotted-path ``overrides`` set (None values skipped).

    Raises:
        ConfigError: a path that crosses a non-table value.
    """
    out = copy.deepcopy(config)
    for path, value in overrides.items():
        if value is None:
            continue
        node = out
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError([f"{path}: expected {part!r} to be a table, got a value"], "command line")
        node[parts[-1]] = value
    return out


# --------------------------------------------------------------------- validation
@dataclass(frozen=True)
class JobConfig:
    """A validated job: typed settings that the parallel layer takes as they are.

    Attributes:
        config: the effective config (every key with its value, the island count
            resolved, no None values): what summary.json and checkpoints record; no
            ``[problem]`` table when the problem is a Problem object.
        run: the ``[run]`` settings, ``islands`` (and ``generations`` without a
            budget) resolved.
        problem: the ``[problem]`` settings, or the Problem object given to :func:`validate`.
        engines: one resolved EngineConfig per island (no per-island values left).
        policy: the MigrationPolicy.
        schedule: the MigrationSchedule, its topology built for this island count.
    """

    config: dict
    run: RunConfig
    problem: ProblemConfig | Problem
    engines: tuple[EngineConfig, ...]
    policy: MigrationPolicy
    schedule: MigrationSchedule

    @property
    def n_islands(self) -> int:
        return len(self.engines)


def validate(config: dict, nranks: int, source: str = "config", *, problem: Problem | None = None) -> JobConfig:
    """Check a job config for ``nranks`` ranks and return the effective job.

    Args:
        config: parsed TOML (with overrides applied).
        nranks: number of MPI ranks the job runs on.
        source: name of the config for messages (a path, "default config").
        problem: a :class:`mpievo.evo.problems.Problem` object instead of a
            ``[problem]`` table (the config must then have none).

    Returns:
        The :class:`JobConfig`.

    Raises:
        ConfigError: listing every problem found.
    """
    from .evo.config import EngineConfig    # loads numpy: only when validating

    if not isinstance(config, dict):
        raise ConfigError([f"expected a table of tables, got {shown(config)}"], source)
    classes = {"run": RunConfig, "problem": ProblemConfig, "migration": MigrationConfig, "engine": EngineConfig}
    problems = unknown_keys(config, classes, "")
    if problem is not None:
        del classes["problem"]
        if "problem" in config:
            problems.append("problem: expected no [problem] table beside a Problem object, got one")
    tables = {name: _table(cls, config.get(name), problems) for name, cls in classes.items()}
    run, engine, migration = tables["run"], tables["engine"], tables["migration"]
    if run is not None:
        run = tables["run"] = dataclasses.replace(run, islands=_island_count(run, nranks, problems),
                                                  generations=_generations(run))
    engines = None
    if run is not None and engine is not None:
        try:
            engines = engine.resolve_all(run.islands)
        except ConfigError as err:
            problems += err.problems
    if engines and run.budget is not None:
        _check_budget(run.budget, engines, problems)
    if run is not None and migration is not None:
        policy, schedule = _migration(migration, run, engines, problems)
    if problems:
        raise ConfigError(problems, source)
    effective = _drop_none({name: table_.to_dict() for name, table_ in tables.items()})
    return JobConfig(effective, run, tables.get("problem", problem), engines, policy, schedule)


def _table(cls: type[Settings], raw, problems: list[str]):
    try:
        return cls.from_dict(raw)
    except ConfigError as err:
        problems += err.problems
        return None


def _island_count(run: RunConfig, nranks: int, problems: list[str]) -> int:
    n_islands = run.islands or nranks
    if n_islands < nranks:
        problems.append(f"run.islands: expected at least one island per rank (>= {nranks} ranks), "
                        f"got {n_islands}; start fewer ranks or ask for more islands")
        return nranks
    return n_islands


def _generations(run: RunConfig) -> int | None:
    """``run.generations``, or its default when no budget bounds the run."""
    if run.generations is None and run.budget is None:
        return DEFAULT_GENERATIONS
    return run.generations


def _check_budget(budget: int, engines, problems: list[str]) -> None:
    from .evo.island import initial_population
    from .parallel.budget import smallest_budget

    minimum = smallest_budget([initial_population(e) for e in engines])
    if budget < minimum:
        problems.append(f"run.budget: expected at least {minimum} evaluations (each island's share must "
                        f"cover its initial population), got {budget}")


def _migration(migration: MigrationConfig, run: RunConfig, engines, problems: list[str]):
    """(MigrationPolicy, MigrationSchedule) of a checked [migration] table (None, None
    with problems added when the topology or the adaptive rule cannot be built)."""
    from .evo.migration import MigrationPolicy
    from .parallel.adaptive import AdaptiveInterval
    from .parallel.scheme import MigrationSchedule
    from .parallel.topology import build_topology

    found = len(problems)
    if engines and migration.emigrants > min(e.capacity for e in engines):
        problems.append(f"migration.emigrants: expected at most the smallest archive capacity "
                        f"({min(e.capacity for e in engines)}), got {migration.emigrants}")
    try:
        topology = build_topology(migration.topology, run.islands, seed=run.seed, degree=migration.degree,
                                  rows=migration.rows, adjacency=migration.adjacency, edges=migration.edges)
    except ValueError as err:
        problems.append(f"migration.topology: {err}")
    adaptive = migration.adaptive
    try:
        rule = AdaptiveInterval(adaptive.minimum, adaptive.maximum, adaptive.collapse_below,
                                adaptive.diverse_above)
    except ValueError as err:
        problems.append(f"migration.adaptive: {err}")
    if len(problems) > found:
        return None, None
    policy = MigrationPolicy(migration.emigrants, migration.selection, migration.replacement, migration.unique)
    return policy, MigrationSchedule(topology, migration.interval, rule if adaptive.enabled else None)


def _drop_none(value):
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def describe_schema() -> str:
    """Every config key with its default, type and meaning (``mpievo run --help-config``)."""
    from .evo.config import EngineConfig

    lines = []
    for cls in (RunConfig, ProblemConfig, MigrationConfig, AdaptiveConfig, EngineConfig):
        note = "  (a value, a list per island, or an expression of i)" if cls is EngineConfig else ""
        lines.append(f"[{cls.TABLE}]{note}")
        for name, key in cls.keys().items():
            if not isinstance(key.default, Settings):       # a nested table is listed as its own
                lines.append(f"  {name} = {_as_toml(key.default)}  # {key.check.expected}; {key.doc}")
    return "\n".join(lines)


def _as_toml(value) -> str:
    if value is None:
        return "<unset>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)
