"""The TOML job config of ``mpievo run``: load, apply command-line overrides, validate.

A job config has four tables (every key optional; ``mpievo run --help-config`` lists
every key with its type, default and meaning)::

    [run]        seed, generations, budget, leader_rate, target, scheme (island, hybrid,
                 centralized, replicated, master_worker), islands (0: one per group),
                 ranks_per_island (hybrid: K or "node"),
                 log_every, checkpoint_every, checkpoint_seconds (default 600),
                 checkpoint_keep, blas_threads                     (RunConfig)
    [problem]    name (built-in or "module:function"), dim, shift, rotate, seed,
                 lower, upper, maximize, batched, time_limit, time_limit_method
                                                                   (ProblemConfig)
    [engine]     the island engine's settings        (mpievo.evo.engine_config.EngineConfig)
    [migration]  topology, interval, emigrants, selection, replacement, unique,
                 degree (random), rows (torus), adjacency or edges (graph),
                 and [migration.adaptive]: enabled, minimum, maximum,
                 collapse_below, diverse_above      (MigrationConfig, AdaptiveConfig)

Heterogeneous islands: any ``[engine]`` setting may be a list with one value per
island, or a string expression of the island index ``i`` such as ``"0.3 + 0.1*i"``
(parsed safely, see :mod:`mpievo.evo.expressions`).

Every table is a :class:`mpievo.schema.Settings` (defined in :mod:`mpievo.config_tables`).
:func:`validate` checks everything once (keys, types, ranges, the island count against the rank count, every island's
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
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config_tables import (DEFAULT_GENERATIONS, MAX_ROTATED_DIM, ONE_GROUP_SCHEMES,  # noqa: F401
                            MULTI_OBJECTIVE_ALGORITHMS, RESUMABLE_KEYS, SCHEMES, AdaptiveConfig,
                            MigrationConfig, ProblemConfig, RunConfig, with_problem_object)
from .schema import ConfigError, Settings, shown, unknown_keys

if TYPE_CHECKING:
    from .evo.engine_config import EngineConfig
    from .evo.migration_policy import MigrationPolicy
    from .evo.problems import Problem
    from .rules.schedule import MigrationSchedule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

__all__ = ["ConfigError", "JobConfig", "RunConfig", "ProblemConfig", "MigrationConfig", "AdaptiveConfig",
           "RESUMABLE_KEYS", "validate", "load_config", "parse_toml", "parse_assignment", "apply_overrides",
           "default_config_text", "describe_schema", "schema_tables", "as_toml"]

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
    from .evo.engine_config import EngineConfig    # loads numpy: only when validating

    if not isinstance(config, dict):
        raise ConfigError([f"expected a table of tables, got {shown(config)}"], source)
    classes = {"run": RunConfig, "problem": ProblemConfig, "migration": MigrationConfig, "engine": EngineConfig}
    problems = unknown_keys(config, classes, "")
    if problem is not None:
        del classes["problem"]
        if "problem" in config:
            problems.append("problem: expected no [problem] table beside a Problem object, got one")
    if problem is None and "problem" in config:     # a named Problem object brings dim, bounds, sense
        config = {**config, "problem": with_problem_object(config["problem"], problems)}
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
    if engines:
        _check_evaluation(run, engines, problems)
    if engines and run.budget is not None:
        _check_budget(run.budget, engines, problems)
    if run is not None:
        _check_leader_rate(run, problems)
    if run is not None and migration is not None:
        policy, schedule = _migration(migration, run, engines, problems)
    if engines and migration is not None and tables.get("problem", problem) is not None:
        _check_objectives(tables.get("problem", problem), run, engines, migration, problems)
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
    """``run.islands`` resolved: one per group when 0 (groups of "node" are known only
    at run time: counted as ranks here, checked against the nodes by the scheme)."""
    per = run.ranks_per_island
    if per != 1 and run.scheme != "hybrid":
        problems.append(f"run.ranks_per_island: expected 1 with run.scheme = {run.scheme!r} (groups of "
                        f"ranks are the hybrid scheme), got {per!r}")
        per = 1
    if run.breed == "evaluator" and run.scheme == "replicated":
        problems.append(f"run.breed: expected 'leader' or 'auto' with run.scheme = {run.scheme!r} (evaluator "
                        "breeding is the hybrid, centralized and master_worker schemes'), got 'evaluator'")
    if run.scheme in ONE_GROUP_SCHEMES:
        per = nranks    # one group of every rank
    if per != "node" and nranks % per:
        problems.append(f"run.ranks_per_island: expected a divisor of the {nranks} ranks, got {per}")
        per = 1
    groups = nranks if per == "node" else nranks // per
    n_islands = run.islands or groups
    if per != "node" and n_islands < groups:
        unit = ("rank", "ranks") if per == 1 else ("group of ranks", "groups")
        problems.append(f"run.islands: expected at least one island per {unit[0]} (>= {groups} {unit[1]}), "
                        f"got {n_islands}; start fewer ranks or ask for more islands")
        return groups
    return n_islands


def _generations(run: RunConfig) -> int | None:
    """``run.generations``, or its default when no budget bounds the run."""
    if run.generations is None and run.budget is None:
        return DEFAULT_GENERATIONS
    return run.generations


def _check_evaluation(run: RunConfig, engines, problems: list[str]) -> None:
    """engine.evaluation and engine.device against the scheme: blocks of rows pulled
    by workers (master_worker) are host arrays, and only that scheme evaluates "steady"."""
    modes = sorted({e.evaluation for e in engines})
    if run.scheme != "master_worker" and modes != ["generational"]:
        problems.append(f'engine.evaluation: expected "generational" with run.scheme = {run.scheme!r} '
                        f'("steady" is the master_worker scheme\'s), got {modes[-1]!r}')
    elif len(modes) > 1:
        problems.append(f"engine.evaluation: expected one value for every island, got {modes}")
    devices = sorted({e.device for e in engines} - {"cpu"})
    if run.scheme == "master_worker" and devices:
        problems.append(f'engine.device: expected "cpu" with run.scheme = \'master_worker\' (workers '
                        f"evaluate host rows), got {devices[0]!r}")


def _check_objectives(problem, run: RunConfig, engines, migration: MigrationConfig, problems: list[str]) -> None:
    """Several objectives (problem.n_obj >= 2) take multi-objective algorithms (nsga2,
    smsemoa, moead or a user class), the island scheme and a replacement that compares fronts."""
    n_obj = getattr(problem, "n_obj", 1)
    several = n_obj > 1
    wrong = sorted({e.algorithm for e in engines if isinstance(e.algorithm, str) and ":" not in e.algorithm
                    and (e.algorithm in MULTI_OBJECTIVE_ALGORITHMS) != several})
    if wrong:
        wanted = f"{list(MULTI_OBJECTIVE_ALGORITHMS)} or 'module:Class'" if several else "a one-objective algorithm"
        problems.append(f"engine.algorithm: expected {wanted} for a problem with {n_obj} objective(s), got {wrong}")
    if several and run.scheme != "island":
        problems.append(f"run.scheme: expected 'island' with several objectives, got {run.scheme!r}")
    if several and migration.replacement == "fair":
        problems.append("migration.replacement: expected 'better' or 'worst' with several objectives, got 'fair'")


def _check_leader_rate(run: RunConfig, problems: list[str]) -> None:
    rate, final = run.leader_rate, run.leader_rate_final
    if final is not None and final < rate:
        problems.append(f"run.leader_rate_final: expected >= run.leader_rate = {rate} (or none), got {final}")
    if final is not None and final > 1 and rate == 1:
        problems.append(f"run.leader_rate_final: expected run.leader_rate > 1 for the rate to grow from, "
                        f"got leader_rate = 1 and leader_rate_final = {final}")
    if run.leader_margin > 0 and rate == 1:
        problems.append(f"run.leader_margin: expected run.leader_rate > 1 for a lead to keep, got "
                        f"leader_rate = 1 and leader_margin = {run.leader_margin}")
    for name, off in (("finish_diversity", 0), ("finish_reserve", 0), ("progress_rate", 1), ("restart_after", 0)):
        if getattr(run, name) > off and rate == 1:
            problems.append(f"run.{name}: expected run.leader_rate > 1 (decided at the budget's splits), "
                            f"got leader_rate = 1 and {name} = {getattr(run, name)}")
    if rate == 1:
        return
    if run.budget is None:
        problems.append(f"run.leader_rate: expected a run.budget to split (or leader_rate = 1), got "
                        f"leader_rate = {rate} without a budget")
    if run.scheme != "island" or run.ranks_per_island != 1:
        problems.append(f"run.leader_rate: expected 1 with run.scheme = {run.scheme!r} and ranks_per_island = "
                        f"{run.ranks_per_island!r} (the budget's split is the island scheme's), got {rate}")


def _check_budget(budget: int, engines, problems: list[str]) -> None:
    from .evo.island_sizes import initial_population
    from .rules.budget import smallest_budget

    minimum = smallest_budget([initial_population(e) for e in engines])
    if budget < minimum:
        problems.append(f"run.budget: expected at least {minimum} evaluations (each island's share must "
                        f"cover its initial population), got {budget}")


def _migration(migration: MigrationConfig, run: RunConfig, engines, problems: list[str]):
    """(MigrationPolicy, MigrationSchedule) of a checked [migration] table (None, None
    with problems added when the topology or the adaptive rule cannot be built)."""
    from .evo.migration_policy import MigrationPolicy
    from .rules.adaptive import AdaptiveInterval
    from .rules.schedule import MigrationSchedule
    from .rules.topology import build_topology

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
                                adaptive.diverse_above, adaptive.emigrants)
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


def schema_tables() -> list[type[Settings]]:
    """Every table of a job config, in the order they are documented (nested tables,
    such as ``[migration.adaptive]``, as their own)."""
    from .evo.engine_config import EngineConfig

    return [RunConfig, ProblemConfig, MigrationConfig, AdaptiveConfig, EngineConfig]


#: what an ``[engine]`` value may be besides one value
PER_ISLAND_NOTE = "a value, a list per island, or an expression of i"


def describe_schema() -> str:
    """Every config key with its default, type and meaning (``mpievo run --help-config``)."""
    lines = ["# <unset>: no value, or one that depends on the problem or the algorithm (the key says which);",
             "# a value given in the config or on the command line always wins"]
    for cls in schema_tables():
        note = f"  ({PER_ISLAND_NOTE})" if cls.TABLE == "engine" else ""
        lines.append(f"[{cls.TABLE}]{note}")
        for name, key in cls.keys().items():
            if not isinstance(key.default, Settings):       # a nested table is listed as its own
                lines.append(f"  {name} = {as_toml(key.default)}  # {key.check.expected}; {key.doc}")
    return "\n".join(lines)


def as_toml(value) -> str:
    """A default as TOML writes it (``<unset>`` for None)."""
    if value is None:
        return "<unset>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)
