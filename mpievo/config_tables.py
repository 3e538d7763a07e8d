"""The tables of a job config: ``[run]``, ``[problem]``, ``[migration]`` (with
``[migration.adaptive]``), as :class:`mpievo.schema.Settings` (``[engine]`` is
:class:`mpievo.evo.engine_config.EngineConfig`). :mod:`mpievo.config` loads and validates
whole jobs with them. Standard library only, like :mod:`mpievo.schema`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .schema import (Check, Settings, boolean, bounds, choice, index_lists, integer, list_of, number,
                     optional, setting, shown, table, text)

#: rotation matrices above this many genes would not fit in memory (8 * dim**2 bytes)
MAX_ROTATED_DIM = 10_000
#: keys that may change when a run is resumed (everything else must match the checkpoint)
RESUMABLE_KEYS = ("run.generations", "run.budget", "run.target", "run.log_every", "run.checkpoint_every",
                  "run.checkpoint_seconds", "run.checkpoint_keep", "run.blas_threads", "run.memory_check",
                  "run.ranks_per_island",
                  "run.checkpoint_background", "run.checkpoint_incremental",
                  "run.scheme", "engine.evaluation", "run.breed")
#: the parallel schemes of ``run.scheme``
SCHEMES = ("island", "hybrid", "centralized", "replicated", "master_worker")
#: the schemes that run as one group of every rank (rank 0 holds the islands or speaks for them)
ONE_GROUP_SCHEMES = ("centralized", "replicated", "master_worker")
#: built-in algorithms for problems with several objectives (problem.n_obj >= 2)
MULTI_OBJECTIVE_ALGORITHMS = ("nsga2", "smsemoa", "moead")
#: the most islands a job may ask for (a typo of an extra 000 fails at validation)
MAX_ISLANDS = 1_000_000
#: run.generations without a budget, when not given
DEFAULT_GENERATIONS = 200
#: problem.dim when not given, but for a multi-objective built-in (its own usual count)
DEFAULT_DIM = 100


# --------------------------------------------------------------------- registries (loaded late)
def _selection_policies():
    from .evo.migration_policy import SELECTION_POLICIES

    return SELECTION_POLICIES


def _replacement_policies():
    from .evo.migration_policy import REPLACEMENT_POLICIES

    return REPLACEMENT_POLICIES


def _topologies():
    from .rules.topology import TOPOLOGIES

    return TOPOLOGIES


def _time_limit_methods():
    from .evo.problem_wrappers import TIME_LIMIT_METHODS

    return TIME_LIMIT_METHODS


def _bases_problems(path: str, dim: int) -> list[str]:
    """What is wrong with ``problem.bases`` (a .npy file of (count, dim) or (dim,) floats)."""
    import numpy as np

    try:
        peek = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        return [f"problem.bases: expected a readable .npy file, got {path!r} ({err})"]
    shape = peek.shape if peek.ndim == 2 else (1,) + peek.shape
    if len(shape) != 2 or shape[1] != dim or peek.dtype not in (np.float32, np.float64):
        return [f"problem.bases: expected float32/float64 bases of shape (count, {dim}) or ({dim},), "
                f"got {peek.dtype} {peek.shape} in {path!r}"]
    return []


def _accept_finite(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        finite.reject(value)
    return float(value)


finite = Check("a finite number", _accept_finite)


def _accept_ranks_per_island(value):
    if value == "node":
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        ranks_per_island.reject(value)
    if value < 1:
        ranks_per_island.reject(value, typed=False)
    return value


ranks_per_island = Check('an int >= 1 or "node"', _accept_ranks_per_island)


def _accept_integer_genes(value):
    """Gene indices (ints) or a mask (booleans), as a tuple; their range is checked with dim."""
    if not isinstance(value, (list, tuple)) or not value:
        integer_genes.reject(value)
    kinds = {type(item) is bool for item in value}
    if len(kinds) > 1 or not all(isinstance(item, int) for item in value):
        integer_genes.reject(value)
    return tuple(value)


integer_genes = Check("a non-empty list of gene indices (ints) or a mask of dim booleans", _accept_integer_genes)


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
    leader_rate: int = setting(1, integer(1),
                               "with a budget and scheme = island: at each migration the budget left is "
                               "split again and the island with the best fitness evaluates this many "
                               "children per child of any other island; 1: fixed equal shares")
    leader_rate_final: Any = setting(None, optional(integer(1)),
                                     "with leader_rate > 1: the leader's rate once the whole budget is "
                                     "spent; from half the budget spent the rate grows geometrically "
                                     "from leader_rate to this (late commitment); none: leader_rate "
                                     "throughout")
    leader_margin: Any = setting(0.0, number(0.0, 1.0),
                                 "with leader_rate > 1: the lead changes hands only when another island's "
                                 "best is better by more than this fraction of the spread of the islands' "
                                 "best fitness at the first split; 0: any improvement (a tie keeps the leader)")
    finish_diversity: Any = setting(0.0, number(0.0, 0.999),
                                    "with leader_rate > 1: at a split, the leader (under leader_margin) switches "
                                    "(once) to a local CMA-ES from its best when it is not a CMA-ES island and "
                                    "its diversity (box-relative spread) is at most this; 0: never")
    finish_reserve: Any = setting(0.0, number(0.0, 0.999),
                                  "with leader_rate > 1: at the first split with at most this fraction of "
                                  "the budget left, the leader (under leader_margin) switches (once) to a local "
                                  "CMA-ES from its best; 0: never")
    progress_rate: int = setting(1, integer(1),
                                 "with leader_rate > 1: at each split every island but the leader gets up to "
                                 "this many parts of the budget left by its progress since the previous split "
                                 "(orders of magnitude of its gap to the best closed per evaluation); 1: one part")
    restart_after: int = setting(0, integer(0),
                                 "with leader_rate > 1: an island that is not the leader restarts (CMA-ES from a "
                                 "random point, its restart policy's regime) after this many splits in a row "
                                 "without progress; 0: never")
    target: Any = setting(None, optional(finite),
                          "stop once an island's best fitness is at least this good (<= when minimising, "
                          ">= when maximising), one generation later; none: no target")
    scheme: str = setting("island", choice(SCHEMES),
                          "how islands use the ranks: island (islands spread over ranks), hybrid "
                          "(islands over groups of ranks_per_island ranks), centralized (rank 0 holds "
                          "the islands and breeds, every rank evaluates a share of each batch), "
                          "replicated (every rank holds and breeds every island, evaluates a share "
                          "of each batch and all-gathers the fitness), master_worker (rank 0 holds "
                          "the islands and breeds, the other ranks pull blocks of rows to evaluate; "
                          "see engine.evaluation)")
    islands: int = setting(0, integer(0, MAX_ISLANDS), "number of islands; 0: one per group of ranks "
                           "(centralized, replicated, master_worker: one)")
    ranks_per_island: Any = setting(1, ranks_per_island,
                                    "ranks per group: the group's first rank holds its islands and "
                                    "breeds, all of them evaluate row blocks of each batch; \"node\": "
                                    "the ranks of a node")
    breed: str = setting("auto", choice(("leader", "evaluator", "auto")),
                         "hybrid, centralized and master_worker schemes: who breeds a group's children: leader (the "
                         "group's first rank breeds all and ships rows), evaluator (each rank breeds its "
                         "own from the island's archive held once per node; only decisions and fitness "
                         "travel; GA islands of model-sized rows), auto (evaluator for rows of 64 MiB "
                         "or more where it can run)")
    log_every: int = setting(10, integer(1), "generations between global-best gathers and log lines")
    checkpoint_every: int = setting(0, integer(0), "generations between checkpoints; 0: none by count "
                                    "(there is always one at the end and on SIGUSR1/SIGTERM)")
    checkpoint_seconds: float = setting(600.0, number(0.0, 1e9),
                                        "wall-clock seconds between checkpoints (rank 0's clock; lands one "
                                        "generation later), so a node failure loses at most this much; 0: off")
    checkpoint_keep: int = setting(3, integer(1), "checkpoints kept on disk")
    checkpoint_background: bool = setting(True, boolean, "write periodic checkpoints in a thread from a "
                                          "snapshot while the run goes on (the next checkpoint, a stop and "
                                          "the end wait for it); false: the run waits for each write")
    checkpoint_incremental: bool = setting(True, boolean, "store archive rows of 64 KiB or more that a "
                                           "kept earlier checkpoint holds as references to it, not again "
                                           "(needs checkpoint_keep >= 2)")
    blas_threads: int = setting(1, integer(0), "BLAS/OpenMP, Numba and torch threads per rank; "
                                "0: the libraries' defaults")
    memory_check: bool = setting(True, boolean, "refuse a job whose per-rank memory estimate (archive, "
                                 "children, draws) exceeds what the ranks can use (cgroup limit, "
                                 "MemAvailable, free device memory); false: skip the check")


@dataclass(frozen=True)
class ProblemConfig(Settings):
    """The ``[problem]`` table; :func:`mpievo.parallel.build_problem` makes the Problem."""

    TABLE = "problem"

    name: str = setting("rastrigin", text, "built-in name, 'module:function' or 'module:object' "
                                         "(a Problem: it brings dim, lower, upper, maximize, n_obj)")
    dim: Any = setting(None, optional(integer(1)), "genes per genome; none: a multi-objective built-in's usual "
                       f"count (pymoo's: zdt1-3 30, zdt4 and zdt6 10, dtlz n_obj - 1 + k, wfg 20 + k), else "
                       f"{DEFAULT_DIM}")
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
                                     "how the limit is enforced (see mpievo.evo.problem_wrappers)")
    n_obj: Any = setting(None, optional(integer(1)),
                         "objectives per genome: 1, or >= 2 for a multi-objective problem "
                         "(built-ins zdt1-4, zdt6, dtlz1-7, wfg1-9; a user function then returns (n, n_obj); "
                         "engine.algorithm nsga2, smsemoa or moead); none: the problem's (zdt: 2, its "
                         "definition; dtlz and wfg: 3, pymoo's and pygmo's; others 1)")
    reference_point: Any = setting(None, optional(list_of(number(-1e300, 1e300))),
                                   "several objectives: the point hypervolumes are measured to (n_obj "
                                   "numbers); default: a built-in's, none for a user function")
    fidelity_sample: float = setting(1.0, number(0.0, 1.0, open_low=True),
                                     "cheaper fitness: the fraction of the data rows a child is scored on first, "
                                     "each later stage of its race 4x more (a problem with fidelity_rows and "
                                     "evaluate_rows; scheme island); 1: full scores only (see mpievo.evo.fidelity)")
    fidelity_margin: float = setting(0.0, number(0.0, 1e300),
                                     "cheaper fitness: a child stays in the race while its estimate (the archive's "
                                     "worst plus their difference on the rows read) is at most the archive's worst "
                                     "plus this (fitness units)")
    integer: Any = setting(None, optional(integer_genes),
                           "integer genes, as gene indices or a mask of dim booleans (their bounds integers; "
                           "[0, 1]: binary): bred continuously, rounded wherever a genome is made (see "
                           "mpievo.evo.problems.Problem); none: the problem's own")
    bases: Any = setting(None, optional(text),
                         "delta/seeded genomes: a .npy file of the base models, shape (count, dim) or "
                         "(dim,), loaded once per node; none: the problem object's own")

    def __post_init__(self):
        """``n_obj`` and ``dim`` left unset (None) take the problem's (see their docs)."""
        if self.n_obj is None or self.dim is None:
            from .evo.moo.problems import BUILTIN_MOO, builtin_dim, builtin_objectives

            builtin = isinstance(self.name, str) and self.name in BUILTIN_MOO
            if self.n_obj is None:
                object.__setattr__(self, "n_obj", builtin_objectives(self.name) if builtin else 1)
            if self.dim is None:
                n_obj = self.n_obj if builtin and type(self.n_obj) is int and self.n_obj >= 2 else 2
                object.__setattr__(self, "dim", builtin_dim(self.name, n_obj) if builtin else DEFAULT_DIM)
        super().__post_init__()

    @property
    def user_function(self) -> bool:
        """True for a ``"module:function"`` name."""
        return ":" in self.name

    def _check_together(self, problems: list[str]) -> None:
        from .evo.moo.problems import BUILTIN_MOO
        from .evo.builtin_functions import BUILTIN_PROBLEMS
        from .evo.problems import load_object

        if not self.user_function and self.name not in BUILTIN_PROBLEMS and self.name not in BUILTIN_MOO:
            problems.append(f"problem.name: expected a built-in among {sorted(BUILTIN_PROBLEMS)} "
                            f"or {sorted(BUILTIN_MOO)} (n_obj >= 2) or 'module:function', got {self.name!r}")
        problems += self._objective_problems(BUILTIN_MOO)
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
        if self.bases is not None:
            problems += _bases_problems(self.bases, self.dim)
        if self.rotate and self.dim > MAX_ROTATED_DIM:
            problems.append(f"problem.rotate: expected dim <= {MAX_ROTATED_DIM} with a rotation "
                            f"(8*dim^2 bytes), got dim = {self.dim}")
        for bound in ("lower", "upper"):
            value = getattr(self, bound)
            if isinstance(value, list) and len(value) != self.dim:
                problems.append(f"problem.{bound}: expected a number or {self.dim} numbers, got {len(value)}")
        problems += self._box_problems()
        if self.integer is not None:
            problems += self._integer_problems()

    def _integer_problems(self) -> list[str]:
        """``integer`` against dim, the bounds (integers) and the objectives (one)."""
        import numpy as np

        from .evo.builtin_functions import BUILTIN_PROBLEMS
        from .evo.problems import integer_genes as columns_of

        if self.n_obj > 1:
            return [f"problem.integer: expected none with several objectives, got {shown(list(self.integer))}"]
        builtin = BUILTIN_PROBLEMS.get(self.name)
        box = [getattr(self, b) if getattr(self, b) is not None else getattr(builtin, b, 0.0)
               for b in ("lower", "upper")]
        try:
            box = [np.broadcast_to(np.asarray(b, np.float64), (self.dim,)) for b in box]
        except ValueError:
            box = [np.zeros(self.dim)] * 2          # a bound of another length: reported on its own
        try:
            columns_of(list(self.integer), self.dim, *box)
        except ValueError as err:
            return [f"problem.{err}"]
        return []

    def _objective_problems(self, builtin_moo) -> list[str]:
        """Settings that contradict the number of objectives."""
        from .evo.moo.problems import fixed_objectives

        problems, several, fixed = [], self.n_obj > 1, fixed_objectives(self.name)
        if fixed is not None and self.n_obj != fixed:
            problems.append(f"problem.n_obj: expected {fixed} for {self.name} (its definition; or leave "
                            f"n_obj out), got {self.n_obj}")
        elif self.name in builtin_moo and not several:
            problems.append(f"problem.n_obj: expected >= 2 for {self.name}, got {self.n_obj}")
        if several and not self.user_function and self.name not in builtin_moo:
            problems.append(f"problem.n_obj: expected 1 for the single-objective {self.name}, got {self.n_obj}")
        for bound in ("lower", "upper") if self.name in builtin_moo else ():
            if getattr(self, bound) is not None:
                problems.append(f"problem.{bound}: expected none for {self.name} (its own box), "
                                f"got {getattr(self, bound)}")
        for flag in ("maximize", "shift", "rotate") if several else ():
            if getattr(self, flag):
                problems.append(f"problem.{flag}: expected false with several objectives, got true")
        if several and self.time_limit > 0:
            problems.append(f"problem.time_limit: expected 0 with several objectives, got {self.time_limit:g}")
        point = self.reference_point
        if point is not None and len(point) != self.n_obj:
            problems.append(f"problem.reference_point: expected {self.n_obj} numbers (n_obj), got {len(point)}")
        return problems

    def _box_problems(self) -> list[str]:
        """Non-finite bounds and genes whose lower bound is not below the upper one (a
        missing bound of a built-in is the built-in's), found here rather than as a
        traceback on every rank once the run has started."""
        from .evo.builtin_functions import BUILTIN_PROBLEMS

        builtin = BUILTIN_PROBLEMS.get(self.name)
        box, problems = {}, []
        for bound in ("lower", "upper"):
            value = getattr(self, bound)
            if value is None and builtin is not None:
                value = getattr(builtin, bound)
            if value is None:
                continue
            values = value if isinstance(value, list) else [value]
            bad = [v for v in values if not math.isfinite(v)]
            if bad:
                problems.append(f"problem.{bound}: expected finite numbers, got {bad[0]}")
            elif not isinstance(value, list) or len(value) == self.dim:
                box[bound] = values
        if len(box) == 2:
            lower, upper = box["lower"], box["upper"]
            width = max(len(lower), len(upper))
            pairs = [(lower[k % len(lower)], upper[k % len(upper)]) for k in range(width)]
            wrong = next((k for k, (lo, hi) in enumerate(pairs) if not lo < hi), None)
            if wrong is not None:
                gene = "" if width == 1 else f" at gene {wrong}"
                problems.append(f"problem.lower, problem.upper: expected lower < upper{gene}, got "
                                f"lower {pairs[wrong][0]:g} and upper {pairs[wrong][1]:g}")
        return problems


def with_problem_object(raw, problems: list[str]):
    """The ``[problem]`` table ``raw``, completed from the Problem object its name names
    (``"module:object"``: e.g. a RecipeProblem), which brings its own ``dim``, ``lower``,
    ``upper``, ``maximize`` and ``n_obj`` (and ``reference_point`` where it has one):
    those the table leaves out are the object's, those it
    gives must be the object's (else a problem "expected ..., got ..." is added). Any
    other table or name: ``raw`` as it is (its own checks report what is wrong)."""
    from .evo.problems import Problem, load_object

    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or ":" not in raw["name"]:
        return raw
    try:
        obj = load_object(raw["name"])
    except ValueError:
        return raw
    if not isinstance(obj, Problem):
        return raw
    own = {"dim": obj.dim, "lower": _bound_setting(obj.lower), "upper": _bound_setting(obj.upper),
           "maximize": obj.maximize, "n_obj": getattr(obj, "n_obj", 1)}
    if getattr(obj, "reference_point", None) is not None:
        own["reference_point"] = [float(v) for v in obj.reference_point]
    if getattr(obj, "integer", None) is not None:
        own["integer"] = [int(v) for v in obj.integer]
    filled = dict(raw)
    for key, value in own.items():
        if key not in raw:
            filled[key] = value
        elif not _same_setting(raw[key], value, obj.dim):
            problems.append(f"problem.{key}: expected {value!r} (what {raw['name']!r} brings) or no "
                            f"{key}, got {shown(raw[key])}")
    return filled


def _bound_setting(bound) -> float | list[float]:
    """A Problem's bound array as a setting: one number when every gene shares it."""
    values = [float(v) for v in bound.tolist()]
    return values[0] if len(set(values)) == 1 else values


def _same_setting(given, own, dim: int) -> bool:
    """``given`` (a setting) equals ``own`` (the object's), a number standing for all genes."""
    if isinstance(given, bool) or isinstance(own, bool):
        return given is own
    if isinstance(own, int):
        return type(given) is int and given == own

    def per_gene(value):
        return value if isinstance(value, list) else [value] * dim

    try:
        return [float(v) for v in per_gene(given)] == per_gene(own)
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class AdaptiveConfig(Settings):
    """The ``[migration.adaptive]`` table (:class:`mpievo.parallel.AdaptiveInterval`)."""

    TABLE = "migration.adaptive"

    enabled: bool = setting(False, boolean, "adapt the interval to measured diversity")
    minimum: int = setting(2, integer(1), "shortest interval")
    maximum: int = setting(50, integer(1), "longest interval")
    collapse_below: float = setting(1e-3, number(0.0, 1e300), "diversity below which an island collapsed")
    diverse_above: float = setting(5e-2, number(0.0, 1e300), "diversity above which all islands are diverse")
    emigrants: bool = setting(False, boolean, "adapt the emigrant count too (up to migration.emigrants: "
                                              "more when an island collapsed, fewer when all are diverse)")


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
