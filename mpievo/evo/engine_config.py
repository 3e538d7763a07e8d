"""Engine settings: :class:`EngineConfig`, validated, with per-island values.

Every setting may be a plain value, a list with one value per island, a callable of
the island index, or an expression string of ``i`` (``"0.3 + 0.1*i"``, see
:mod:`.expressions`); :meth:`EngineConfig.resolve_all` gives every island's plain
settings. It is a table of :mod:`mpievo.schema`: constructing it, from Python or with
``from_dict`` (e.g. the ``[engine]`` table of a TOML file), reports every problem at
once as a :class:`~mpievo.schema.ConfigError` ("engine.capacity: expected an int >= 2,
got 1"), unknown keys included.

Example::

    cfg = EngineConfig.from_dict({"capacity": 32, "omega": [0.2, 0.5, 0.8]})
    islands = cfg.resolve_all(3)          # islands[1].omega == 0.5
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..kernels.cuda.fast_math import DEVICE_MATH
from ..schema import Check, ConfigError, Settings, boolean, choice, integer, number, optional, setting
from .algorithms.base import algorithm_classes
from .algorithms.ga import STEP_ADAPTATIONS
from .expressions import IslandExpression
from .half import GENOME_DTYPES
from .operators import BOUND_MODES, CROSSOVERS, SELECTIONS
from .params import PerIsland, check_island_index, is_per_island, resolve_param

_SOURCE = "[engine] settings"
#: genome encodings of ``engine.genome`` (mpievo.evo.genomes)
GENOMES = ("dense", "delta", "seeded")
#: evaluation modes of ``engine.evaluation``
EVALUATIONS = ("generational", "steady")
#: the most members or children a size setting may ask for: far above any useful
#: population, low enough that a typo (an extra 000) fails at validation, not in malloc
MAX_MEMBERS = 10_000_000


#: the settings whose default depends on the algorithm: their values when the algorithm
#: class does not say (its ``config_defaults``, e.g. the Pareto islands' population of 100)
ALGORITHM_DEFAULTS = {"capacity": 64, "batch_size": 128, "sbx_eta": 15.0, "sbx_prob": 0.9}


def algorithm_defaults(algorithm: str) -> dict:
    """The defaults of :data:`ALGORITHM_DEFAULTS`'s settings for ``algorithm`` (a built-in
    name; any other string gets the plain ones).

    Example::

        algorithm_defaults("nsga2")      # {"capacity": 100, "batch_size": 100, "sbx_eta": 15.0, ...}
    """
    own = getattr(algorithm_classes().get(algorithm), "config_defaults", {})
    return {name: own.get(name, value) for name, value in ALGORITHM_DEFAULTS.items()}


def _even_population(value):
    if integer(2, MAX_MEMBERS)(value) % 2:
        _EVEN.reject(value, typed=False)
    return int(value)


_EVEN = Check(f"an even int >= 2 and <= {MAX_MEMBERS} (antithetic pairs)", _even_population)


def _setting(default, check, doc: str):
    return setting(default, PerIsland(check), doc)


def _user_class(name: str) -> bool:
    return name.count(":") == 1


@dataclass(frozen=True)
class EngineConfig(Settings):
    """Settings of one island's engine (defaults tuned for cheap problems).

    Each field may also vary by island (a list, a callable or an expression of ``i``);
    see :meth:`resolve_all`. Field documentation: :meth:`describe`.

    Example::

        config = EngineConfig(algorithm=["ga", "cmaes"], omega="0.3 + 0.1*i")   # per-island values
        first, second = config.resolve_all(2)       # one plain EngineConfig per island
        second.algorithm, first.omega               # ('cmaes', 0.3)
    """

    TABLE = "engine"

    algorithm: Any = _setting("ga", choice(algorithm_classes, extra=" or 'module:Class'",
                                           also=_user_class),
                              "island algorithm: ga, de (jde), shade, cmaes, es, nsga2, smsemoa or moead "
                              "(several objectives) or 'module:Class'")
    capacity: Any = _setting(None, optional(integer(2, MAX_MEMBERS)),
                             "archive capacity (members kept per island); none: the algorithm's default "
                             "(64; nsga2, smsemoa, moead: 100, their population)")
    batch_size: Any = _setting(None, optional(integer(1, MAX_MEMBERS)),
                               "children per generation (ga, nsga2, smsemoa, moead); none: the algorithm's "
                               "default (128; nsga2, smsemoa: 100; moead: 10)")
    dtype: Any = _setting("float32", choice(GENOME_DTYPES),
                          "genome dtype; bfloat16 and float16 (GA, dense or delta genomes) breed in float32 "
                          "and round once to nearest even (see mpievo.evo.half)")
    device: Any = _setting("cpu", choice(("auto", "cpu", "cuda")),
                           "where the island's genomes live and breed: cpu, cuda (the rank's GPU; GA "
                           "and ES only) or auto (cuda when the rank has a GPU, the algorithm is the GA "
                           "or ES and the problem evaluates on the device)")
    device_math: Any = _setting("exact", choice(DEVICE_MATH),
                                "device islands' mutation arithmetic: exact (the host's bits, products "
                                "rounded one by one) or fast (hardware log/sin/cos normals and FMA: "
                                "repeatable on one GPU model, not the host's bits; see the GPU guide)")
    unique: Any = _setting(False, boolean, "refuse genomes the archive already holds")
    genome: Any = _setting("dense", choice(GENOMES),
                           "genome encoding: dense (every gene a row entry), delta (rows are differences "
                           "from the problem's base model, held once per node) or seeded (rows are "
                           "recipes: merge weights over the problem's base models and the (seed, step) of "
                           "each mutation; GA with interpolation crossover); the same on every island")
    materialize_budget: Any = _setting(1 << 30, integer(1),
                                       "delta/seeded: bytes of whole genomes an island materialises at once "
                                       "(evaluation blocks and its cache of materialised members); at least "
                                       "one genome")
    recipe_terms: Any = _setting(32, integer(1),
                                 "seeded: mutation terms a recipe keeps; a child whose parents' terms and "
                                 "its own exceed it drops the smallest (see mpievo.evo.genomes.seeded)")
    evaluation: Any = _setting("generational", choice(EVALUATIONS),
                               "master_worker scheme: generational (islands one after another) or steady "
                               "(every island's batch in flight at once; workers wait only at generation "
                               "ends); the same result either way")
    selection: Any = _setting("tournament", choice(SELECTIONS), "GA parent selection")
    tournament_size: Any = _setting(2, integer(1, MAX_MEMBERS), "members per tournament")
    rank_pressure: Any = _setting(1.5, number(1.0, 2.0), "linear ranking pressure in [1, 2]")
    crossover: Any = _setting("interpolate", choice(CROSSOVERS), "GA crossover")
    omega: Any = _setting(None, optional(number(0.0, 1.0)),
                          "interpolation weight omega*a + (1-omega)*b; None: U(0,1) per child")
    swap_prob: Any = _setting(0.5, number(0.0, 1.0), "uniform crossover: probability of a gene from b")
    blend_alpha: Any = _setting(0.5, number(0.0, 10.0), "BLX-alpha widening")
    sbx_eta: Any = _setting(None, optional(number(0.0, 1e6)), "SBX distribution index; none: the algorithm's "
                            "default (15; moead 20)")
    sbx_prob: Any = _setting(None, optional(number(0.0, 1.0)), "nsga2, smsemoa, moead: probability that a pair is "
                             "an SBX crossover (else copies of its parents); none: the algorithm's default (0.9; "
                             "moead 1)")
    pm_eta: Any = _setting(20.0, number(0.0, 1e6), "nsga2, smsemoa, moead: polynomial mutation distribution index")
    pm_prob: Any = _setting(0.9, number(0.0, 1.0), "nsga2, smsemoa, moead: probability that a child is mutated at "
                            "all (pymoo's PM(prob=0.9); 1: every child, as Deb's code and pygmo)")
    mutation_rate: Any = _setting(None, optional(number(0.0, 1.0)),
                                  "per-gene mutation probability; None: min(1, 10/dim) (nsga2, smsemoa, moead: 1/dim)")
    moead_neighbours: Any = _setting(20, integer(2), "moead: subproblems in a neighbourhood (pygmo's default 20)")
    moead_variation: Any = _setting("sbx", choice(("sbx", "de")), "moead: sbx (Zhang and Li 2007, pymoo) or de "
                                    "(MOEA/D-DE, pygmo's moead)")
    mutation_sigma: Any = _setting(0.1, number(0.0, 1.0, open_low=True),
                                   "initial mutation step, relative to the box width")
    step_adaptation: Any = _setting("success", choice(STEP_ADAPTATIONS),
                                    "GA step-size control: success rule or self-adaptation")
    sigma_tau: Any = _setting(None, optional(number(0.0, 10.0)),
                              "self-adaptation learning rate; None: 1/sqrt(2 * mutated genes)")
    population: Any = _setting(None, optional(integer(2, MAX_MEMBERS)),
                               "members in use at the start (the archive's limit; capped at capacity); "
                               "None: capacity. GA restarts multiply it by restart_growth, up to capacity")
    stagnation_patience: Any = _setting(200, integer(0),
                                        "GA: generations in which neither the best nor the median of the "
                                        "breeding members improves by stagnation_tol before a restart; "
                                        "0: never restart")
    stagnation_tol: Any = _setting(1e-4, number(0.0, 1.0),
                                   "GA: improvement (of the best or the median) that counts as progress, as a "
                                   "fraction of the fitness spread (median - best) of the first bred generation "
                                   "since the start or the last restart")
    immigration_patience: Any = _setting(0, integer(0),
                                         "generations the island's best must have stalled before it takes "
                                         "immigrants (its own children's improvements reset the count); "
                                         "0: immigrants always enter (under migration.replacement)")
    restart_elite: Any = _setting(1, integer(1),
                                  "GA: best members kept on a restart (they stay out of breeding)")
    restart_growth: Any = _setting(2.0, number(1.0, 1e3),
                                   "GA: population factor per restart (IPOP-like; 1: same size)")
    restart_margin: Any = _setting(1e-3, number(0.0, 1.0),
                                   "GA: after a restart, members from elsewhere breed only when better "
                                   "than the best at the restart by this fraction of the fitness spread "
                                   "(as stagnation_tol)")
    bounds: Any = _setting("clip", choice(BOUND_MODES), "box handling: clip, reflect or resample")
    de_population: Any = _setting(32, integer(4, MAX_MEMBERS), "differential evolution population")
    de_tau_f: Any = _setting(0.1, number(0.0, 1.0), "jDE: probability of renewing F")
    de_tau_cr: Any = _setting(0.1, number(0.0, 1.0), "jDE: probability of renewing CR")
    cma_popsize: Any = _setting(None, optional(integer(2, MAX_MEMBERS)), "CMA-ES population; None: 4 + 3 ln(dim)")
    cma_sigma0: Any = _setting(0.3, number(0.0, 1.0, open_low=True),
                               "CMA-ES initial step, relative to the box width")
    cma_restarts: Any = _setting("ipop", choice(("ipop", "bipop", "none")),
                                 "CMA-ES restarts: ipop (population grows each restart), bipop (alternates "
                                 "large and small local runs by evaluations used), none (same population)")
    cma_popsize_growth: Any = _setting(2.0, number(1.0, 1e3), "CMA-ES: population factor per ipop/bipop restart")
    cma_max_popsize: Any = _setting(None, optional(integer(2, MAX_MEMBERS)),
                                    "CMA-ES: largest population restarts reach; None: 512 x the first")
    shade_population: Any = _setting(None, optional(integer(4, MAX_MEMBERS)),
                                     "SHADE: initial population; None: 18 x dim with shade_max_evaluations "
                                     "(L-SHADE), else 100 (SHADE)")
    shade_memory: Any = _setting(6, integer(1), "SHADE: slots H of the F and CR success memories")
    shade_pbest: Any = _setting(0.11, number(0.0, 1.0, open_low=True),
                                "SHADE: current-to-pbest picks pbest among this fraction of the best members")
    shade_archive_rate: Any = _setting(2.6, number(0.0, 100.0),
                                       "SHADE: external archive size relative to the population (0: none)")
    shade_min_population: Any = _setting(4, integer(4), "L-SHADE: population at the end of the budget")
    shade_max_evaluations: Any = _setting(None, optional(integer(1)),
                                          "L-SHADE: this island's evaluation budget, over which the population "
                                          "shrinks linearly to shade_min_population; None: fixed size (SHADE)")
    es_popsize: Any = _setting(30, _EVEN, "ES: members per generation, antithetic pairs (ES at Scale: 30)")
    es_sigma: Any = _setting(0.02, number(0.0, 1e6, open_low=True),
                             "ES: noise standard deviation in genome units (Salimans: 0.02; LLMs: 1e-3)")
    es_learning_rate: Any = _setting(0.01, number(0.0, 1e6, open_low=True), "ES: step of the mean's optimizer")
    es_optimizer: Any = _setting("adam", choice(("adam", "sgd")), "ES: adam (OpenAI-ES) or sgd with es_momentum")
    es_momentum: Any = _setting(0.9, number(0.0, 0.999999), "ES: sgd momentum (0: the plain step of ES at Scale)")
    es_shaping: Any = _setting("centered_ranks", choice(("centered_ranks", "zscore", "none")),
                               "ES: fitness shaping: centered_ranks (Salimans), zscore (ES at Scale) or none")
    es_weight_decay: Any = _setting(0.0, number(0.0, 1e6), "ES: L2 coefficient on the mean (Salimans: 0.005)")
    es_sigma_decay: Any = _setting(1.0, number(0.0, 1.0, open_low=True), "ES: sigma factor per update")
    es_sigma_min: Any = _setting(0.0, number(0.0, 1e6), "ES: sigma's floor under es_sigma_decay")
    es_lr_decay: Any = _setting(1.0, number(0.0, 1.0, open_low=True), "ES: learning-rate factor per update")
    es_lr_min: Any = _setting(0.0, number(0.0, 1e6), "ES: learning rate's floor under es_lr_decay")
    es_adam_bias_correction: Any = _setting(True, boolean, "ES: Adam's bias correction (false: as EvoX's OpenES)")
    es_noise: Any = _setting("full", choice(("full", "lowrank")),
                             "ES: full (a normal per gene) or lowrank (rank-es_rank terms on a model's matrices)")
    es_rank: Any = _setting(4, integer(1), "ES: rank of the low-rank noise per weight matrix (EGGROLL)")

    def __post_init__(self):
        """Settings left unset (None) that :data:`ALGORITHM_DEFAULTS` lists take the
        algorithm's default (an island-varying algorithm: when resolved per island)."""
        if isinstance(self.algorithm, str) and (self.algorithm in algorithm_classes() or _user_class(self.algorithm)):
            for name, value in algorithm_defaults(self.algorithm).items():
                if getattr(self, name) is None:
                    object.__setattr__(self, name, value)
        super().__post_init__()

    def to_dict(self) -> dict:
        """All settings as a dict (lists copied, expressions as their text, other
        callables as they are): ``from_dict(to_dict())`` gives the same settings."""
        return {name: value.text if isinstance(value, IslandExpression) else value
                for name, value in super().to_dict().items()}

    def is_heterogeneous(self) -> bool:
        """True when some setting varies by island."""
        return any(is_per_island(getattr(self, name)) for name in self.keys())

    def resolve(self, island_index: int, n_islands: int) -> "EngineConfig":
        """The plain settings of island ``island_index`` out of ``n_islands``.

        Raises:
            ConfigError: a list of the wrong length, or a callable giving a bad value.
        """
        check_island_index(island_index, n_islands)
        values, problems = self._resolved(island_index, n_islands)
        if problems:
            raise ConfigError([message for _, message in problems], _SOURCE)
        return EngineConfig(**values)

    def resolve_all(self, n_islands: int) -> tuple["EngineConfig", ...]:
        """Every island's plain settings, resolved once for the whole run.

        Raises:
            ConfigError: every setting that fails (on the first island where it fails).
        """
        check_island_index(0, n_islands)      # n_islands: an int >= 1
        islands, problems, failed = [], [], set()
        for index in range(n_islands):
            values, found = self._resolved(index, n_islands)
            problems += [message for name, message in found if name not in failed]
            failed.update(name for name, _ in found)
            if not failed:
                islands.append(EngineConfig(**values))
        if problems:
            raise ConfigError(problems, _SOURCE)
        return tuple(islands)

    def _resolved(self, index: int, n_islands: int) -> tuple[dict, list[tuple[str, str]]]:
        """(plain values of island ``index``, [(setting, problem)])."""
        values, problems = {}, []
        for name, key in self.keys().items():
            path, value = f"{self.TABLE}.{name}", getattr(self, name)
            try:
                if callable(value):
                    values[name] = key.check.item(value(index))
                else:   # plain values and list entries were checked when this config was made
                    values[name] = resolve_param(value, index, n_islands, path)
            except ValueError as err:
                where = f"{path} on island {index}: " if callable(value) else ""
                problems.append((name, f"{where}{err}"))
        return values, problems
