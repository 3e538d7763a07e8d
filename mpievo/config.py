"""The TOML job config of ``mpievo run``: load, apply command-line overrides, validate.

A job config has four tables (every key optional; defaults in :data:`SCHEMA`)::

    [run]        seed, generations, islands (0: one per rank), log_every,
                 checkpoint_every (0: only at the end), checkpoint_seconds, checkpoint_keep, blas_threads
    [problem]    name (built-in or "module:function"), dim, shift, rotate, seed,
                 lower, upper, maximize, batched, time_limit, time_limit_method
    [engine]     the island engine's settings (mpievo.evo.config.EngineConfig)
    [migration]  topology, interval, emigrants, selection, replacement, unique,
                 degree (random), rows (torus), adjacency or edges (graph),
                 and a sub-table [migration.adaptive]: enabled, minimum, maximum,
                 collapse_below, diverse_above

Heterogeneous islands: any ``[engine]`` setting may be a list with one value per
island, or a string expression of the island index ``i`` such as ``"0.3 + 0.1*i"``
(parsed safely, see :mod:`mpievo.parallel.expressions`).

:func:`validate` checks everything (unknown keys, types, ranges, the island count
against the number of ranks, every island's resolved engine settings) and reports all
problems at once in a :class:`ConfigError`; it is a pure function of the config and
the rank count, so every rank reaches the same verdict without talking.
"""

from __future__ import annotations

import copy
import numbers
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

#: rotation matrices above this many genes would not fit in memory (8 * dim**2 bytes)
MAX_ROTATED_DIM = 10_000
SELECTION_POLICIES = ("best", "random")
REPLACEMENT_POLICIES = ("worst", "better", "fair")
#: keys that may change when a run is resumed (everything else must match the checkpoint)
RESUMABLE_KEYS = ("run.generations", "run.log_every", "run.checkpoint_every", "run.checkpoint_seconds",
                  "run.checkpoint_keep",
                  "run.blas_threads")


class ConfigError(ValueError):
    """An invalid job config; ``problems`` lists every problem found (one line each)."""

    def __init__(self, problems: list[str], source: str = "config"):
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid {source} ({len(self.problems)} problem"
                         f"{'s' if len(self.problems) != 1 else ''}):\n{lines}")


# --------------------------------------------------------------------- value checks
def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}"


def _int(minimum: int, maximum: int | None = None) -> Callable:
    def check(value, path):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{path}: expected an int, got {_describe(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            upper = "" if maximum is None else f" and <= {maximum}"
            raise ValueError(f"{path}: expected an int >= {minimum}{upper}, got {value}")
        return int(value)
    return check


def _float(minimum: float, maximum: float) -> Callable:
    def check(value, path):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{path}: expected a number, got {_describe(value)}")
        if not minimum <= float(value) <= maximum:
            raise ValueError(f"{path}: expected a number in [{minimum}, {maximum}], got {value}")
        return float(value)
    return check


def _bool(value, path):
    if not isinstance(value, bool):
        raise ValueError(f"{path}: expected true or false, got {_describe(value)}")
    return value


def _str(value, path):
    if not isinstance(value, str) or not value:
        raise ValueError(f"{path}: expected a non-empty string, got {_describe(value)}")
    return value


def _choice(options) -> Callable:
    def check(value, path):
        if value not in options or not isinstance(value, str):
            raise ValueError(f"{path}: expected one of {list(options)}, got {_describe(value)}")
        return value
    return check


def _bound(value, path):
    if value is None:
        return None
    if isinstance(value, list):
        for k, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, numbers.Real):
                raise ValueError(f"{path}[{k}]: expected a number, got {_describe(item)}")
        return [float(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{path}: expected a number or a list of numbers, got {_describe(value)}")
    return float(value)


def _int_lists(value, path):
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        raise ValueError(f"{path}: expected a list of lists of island indices, got {_describe(value)}")
    for r, row in enumerate(value):
        for c, item in enumerate(row):
            if isinstance(item, bool) or not isinstance(item, int):
                raise ValueError(f"{path}[{r}][{c}]: expected an island index, got {_describe(item)}")
    return [list(row) for row in value]


def _optional(check: Callable) -> Callable:
    return lambda value, path: None if value is None else check(value, path)


@dataclass(frozen=True)
class Key:
    """One config key: its default and its check (``check(value, path) -> value``)."""

    default: Any
    check: Callable
    doc: str


#: table -> key -> Key; [engine] is checked by mpievo.evo.config.EngineConfig.
#: ``None`` defaults are omitted from the effective config (TOML has no null).
SCHEMA: dict[str, dict[str, Key]] = {
    "run": {
        "seed": Key(0, _int(0), "seed of every random stream"),
        "generations": Key(200, _int(1), "generations to run (in total, also after a resume)"),
        "islands": Key(0, _int(0), "number of islands; 0: one per rank"),
        "log_every": Key(10, _int(1), "generations between global-best gathers and log lines"),
        "checkpoint_every": Key(0, _int(0), "generations between checkpoints; 0: only at the end"),
        "checkpoint_seconds": Key(0.0, _float(0.0, 1e9), "wall-clock seconds between checkpoints "
                                  "(rank 0's clock; lands one generation later); 0: off"),
        "checkpoint_keep": Key(3, _int(1), "checkpoints kept on disk"),
        "blas_threads": Key(1, _int(0), "BLAS/OpenMP threads per rank; 0: the libraries' default"),
    },
    "problem": {
        "name": Key("rastrigin", _str, "built-in name or 'module:function'"),
        "dim": Key(100, _int(1), "genes per genome"),
        "shift": Key(False, _bool, "built-ins: move the optimum (drawn from problem.seed)"),
        "rotate": Key(False, _bool, "built-ins: rotate the function (drawn from problem.seed)"),
        "seed": Key(0, _int(0), "seed of the shift and rotation"),
        "lower": Key(None, _bound, "box lower bound (scalar or list); default: the built-in's"),
        "upper": Key(None, _bound, "box upper bound (scalar or list); default: the built-in's"),
        "maximize": Key(False, _bool, "larger fitness is better"),
        "batched": Key(True, _bool, "a user function takes a whole (n, dim) batch"),
        "time_limit": Key(0.0, _float(0.0, 1e9), "seconds per evaluation (0: no limit); "
                          "a late evaluation counts as failed"),
        "time_limit_method": Key("process", _choice(("process", "signal")),
                                 "how the limit is enforced (see mpievo.faults)"),
    },
    "migration": {
        "topology": Key("ring", _choice(("ring", "bidirectional_ring", "torus", "fully_connected",
                                         "random", "graph", "unconnected")), "who sends to whom"),
        "interval": Key(10, _int(1), "generations between migrations (initial one when adaptive)"),
        "emigrants": Key(2, _int(0), "migrants per edge"),
        "selection": Key("best", _choice(SELECTION_POLICIES), "which members emigrate"),
        "replacement": Key("better", _choice(REPLACEMENT_POLICIES), "how immigrants enter"),
        "unique": Key(True, _bool, "elite-unique: never send a genome the receiver holds"),
        "degree": Key(1, _int(1), "random topology: destinations per island"),
        "rows": Key(None, _optional(_int(1)), "torus: grid rows (default: most square)"),
        "adjacency": Key(None, _int_lists, "graph topology: destinations of each island"),
        "edges": Key(None, _int_lists, "graph topology: [source, destination] pairs"),
    },
    "migration.adaptive": {
        "enabled": Key(False, _bool, "adapt the interval to measured diversity"),
        "minimum": Key(2, _int(1), "shortest interval"),
        "maximum": Key(50, _int(1), "longest interval"),
        "collapse_below": Key(1e-3, _float(0.0, 1e300), "diversity below which an island collapsed"),
        "diverse_above": Key(5e-2, _float(0.0, 1e300), "diversity above which all islands are diverse"),
    },
}
_TABLES = ("run", "problem", "engine", "migration")


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
    """A validated job: the effective config plus the parsed engine settings.

    Attributes:
        config: the effective config (every key with its value, resolved island
            count, no None values): what summary.json and checkpoints record.
        n_islands: number of islands.
        engine: the EngineConfig (per-island expressions turned into callables).
    """

    config: dict
    n_islands: int
    engine: Any

    @property
    def run(self) -> dict:
        return self.config["run"]

    @property
    def problem(self) -> dict:
        return self.config["problem"]

    @property
    def migration(self) -> dict:
        return self.config["migration"]


def validate(config: dict, nranks: int, source: str = "config") -> JobConfig:
    """Check a job config for ``nranks`` ranks and return the effective job.

    Args:
        config: parsed TOML (with overrides applied).
        nranks: number of MPI ranks the job runs on.
        source: name of the config for messages (a path, "default config").

    Returns:
        The :class:`JobConfig`.

    Raises:
        ConfigError: listing every problem found.
    """
    problems: list[str] = []
    if not isinstance(config, dict):
        raise ConfigError([f"expected a table of tables, got {_describe(config)}"], source)
    for key in sorted(set(config) - set(_TABLES)):
        problems.append(f"unknown table or key {key!r}; expected some of {list(_TABLES)}")
    effective = {}
    for table in ("run", "problem", "migration"):
        effective[table] = _check_table(config.get(table, {}), table, problems)
    adaptive = config.get("migration", {}).get("adaptive", {}) if isinstance(config.get("migration"), dict) else {}
    effective["migration"]["adaptive"] = _check_table(adaptive, "migration.adaptive", problems)
    n_islands = _island_count(effective["run"], nranks, problems)
    engine_raw = config.get("engine", {})
    engine, engine_dict = _check_engine(engine_raw, n_islands, problems)
    effective["engine"] = engine_dict
    if not problems:
        effective["run"]["islands"] = n_islands
        _check_problem(effective["problem"], problems)
        _check_migration(effective["migration"], n_islands, engine, effective["run"]["seed"], problems)
    if problems:
        raise ConfigError(problems, source)
    return JobConfig(_drop_none(effective), n_islands, engine)


def _check_table(raw, table: str, problems: list[str]) -> dict:
    schema = SCHEMA[table]
    out = {name: copy.deepcopy(key.default) for name, key in schema.items()}
    if not isinstance(raw, dict):
        problems.append(f"[{table}]: expected a table, got {_describe(raw)}")
        return out
    nested = {"migration": {"adaptive"}}.get(table, set())
    for name in sorted(set(raw) - set(schema) - nested):
        problems.append(f"[{table}]: unknown key {name!r}; expected some of {sorted(schema)}")
    for name, key in schema.items():
        if name in raw:
            try:
                out[name] = key.check(raw[name], f"{table}.{name}")
            except ValueError as err:
                problems.append(str(err))
    return out


def _island_count(run: dict, nranks: int, problems: list[str]) -> int:
    islands = run["islands"] if isinstance(run["islands"], int) else 0
    n_islands = islands or nranks
    if n_islands < nranks:
        problems.append(f"run.islands: expected at least one island per rank (>= {nranks} ranks), "
                        f"got {n_islands}; start fewer ranks or ask for more islands")
    return n_islands


def _check_engine(raw, n_islands: int, problems: list[str]):
    from .evo.config import EngineConfig
    from .parallel.expressions import IslandExpression, is_island_expression

    if not isinstance(raw, dict):
        problems.append(f"[engine]: expected a table, got {_describe(raw)}")
        return EngineConfig(), EngineConfig().to_dict()
    settings = {}
    for name, value in raw.items():
        if is_island_expression(value):
            try:
                value = IslandExpression(value)
            except ValueError as err:
                problems.append(f"engine.{name}: {err}")
                continue
        settings[name] = value
    try:
        engine = EngineConfig.from_dict(settings)
    except (TypeError, ValueError) as err:
        problems.append(f"[engine]: {err}")
        return EngineConfig(), EngineConfig().to_dict()
    for island in range(n_islands):
        try:
            engine.resolve(island, n_islands)
        except (TypeError, ValueError) as err:
            problems.append(f"[engine] on island {island} of {n_islands}: {err}")
            break  # the same mistake usually repeats on every island
    as_dict = {k: (v.text if isinstance(v, IslandExpression) else v)
               for k, v in engine.to_dict().items()}
    return engine, as_dict


def _check_problem(problem: dict, problems: list[str]) -> None:
    from .evo.problems import BUILTIN_PROBLEMS, load_object

    name, dim = problem["name"], problem["dim"]
    builtin = ":" not in name
    if builtin and name not in BUILTIN_PROBLEMS:
        problems.append(f"problem.name: expected a built-in among {sorted(BUILTIN_PROBLEMS)} "
                        f"or 'module:function', got {name!r}")
    if not builtin:
        try:
            load_object(name)
        except ValueError as err:
            problems.append(f"problem.name: {err}")
        for flag in ("shift", "rotate"):
            if problem[flag]:
                problems.append(f"problem.{flag}: expected false for a user function, got true")
        for bound in ("lower", "upper"):
            if problem[bound] is None:
                problems.append(f"problem.{bound}: expected a bound for user function {name!r}, got none")
    if problem["rotate"] and dim > MAX_ROTATED_DIM:
        problems.append(f"problem.rotate: expected dim <= {MAX_ROTATED_DIM} with a rotation "
                        f"(8*dim^2 bytes), got dim = {dim}")
    for bound in ("lower", "upper"):
        value = problem[bound]
        if isinstance(value, list) and len(value) != dim:
            problems.append(f"problem.{bound}: expected a number or {dim} numbers, got {len(value)}")


def _check_migration(migration: dict, n_islands: int, engine, seed: int, problems: list[str]) -> None:
    from .parallel.topology import build_topology

    options = {"degree": migration["degree"], "rows": migration["rows"],
               "adjacency": migration["adjacency"], "edges": migration["edges"]}
    try:
        build_topology(migration["topology"], n_islands, seed=seed, **options)
    except ValueError as err:
        problems.append(f"migration.topology: {err}")
    capacities = [engine.resolve(i, n_islands).capacity for i in range(n_islands)]
    if migration["emigrants"] > min(capacities):
        problems.append(f"migration.emigrants: expected at most the smallest archive capacity "
                        f"({min(capacities)}), got {migration['emigrants']}")
    adaptive = migration["adaptive"]
    if adaptive["minimum"] > adaptive["maximum"]:
        problems.append(f"migration.adaptive: expected minimum <= maximum, got "
                        f"{adaptive['minimum']} > {adaptive['maximum']}")
    if adaptive["collapse_below"] > adaptive["diverse_above"]:
        problems.append(f"migration.adaptive: expected collapse_below <= diverse_above, got "
                        f"{adaptive['collapse_below']} > {adaptive['diverse_above']}")


def _drop_none(value):
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def describe_schema() -> str:
    """Every config key with its default and meaning (for ``mpievo run --help-config``)."""
    from .evo.config import EngineConfig

    lines = []
    for table, keys in SCHEMA.items():
        lines.append(f"[{table}]")
        for name, key in keys.items():
            lines.append(f"  {name} = {key.default!r}  # {key.doc}")
    lines.append("[engine]  (a value, a list per island, or an expression of i)")
    defaults = EngineConfig().to_dict()
    for name, doc in EngineConfig.describe().items():
        lines.append(f"  {name} = {defaults[name]!r}  # {doc}")
    return "\n".join(lines)
