"""An :class:`Island`: archive + algorithm + problem + keyed random streams.

The parallel layer drives islands through this API only::

    island = Island(index, problem, config, seed=seed, n_islands=n)
    island.initialize()                       # generation 0: random genomes, evaluated
    for g in range(1, generations + 1):
        island.step(g)                        # or: X = island.ask(g); island.tell(f)
        if g % interval == 0:
            out = island.emigrants(k, "best", stream(seed, index, g, "emigrate"))
            ... send out.genomes/fitness/ids/origins/births, receive theirs ...
            island.immigrate(*received, policy="replace_if_better")
    state = island.state_dict()               # numpy arrays and plain scalars only

Determinism: generation ``g`` of island ``i`` draws only from
``stream(seed, i, g, purpose)``, so a run's result depends on the seed, the
settings and the order of calls on each island, never on ranks or timing; after
``load_state_dict`` an island continues exactly as it would have.

Migration: :meth:`Island.emigrants` picks members (``best`` or ``random``);
:meth:`Island.immigrate` takes foreign genomes in under a policy (see
:data:`IMMIGRATION_POLICIES`). Migrants keep their ids, births and origin island.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .algorithms.base import make_algorithm
from .archive import Archive, make_ids, sanitize_fitness
from .config import EngineConfig
from .operators import box_arrays
from .problems import Problem, check_fitness, make_problem
from .streams import stream

EMIGRATION_POLICIES = ("best", "random")
#: replace_worst: immigrants evict the worst members unconditionally;
#: replace_if_better: merged like children (enter only when better than the worst);
#: fair: like replace_if_better but at most ``max_replace`` (default 1) immigrants,
#:       the best ones, may enter (pagmo's fair_replace);
#: elite_unique: replace_if_better, skipping genomes the island already holds.
IMMIGRATION_POLICIES = ("replace_worst", "replace_if_better", "fair", "elite_unique")
STATE_FORMAT = 1


class Migrants(NamedTuple):
    """Genomes leaving or entering an island, with their records (field order matches
    :meth:`Island.immigrate`, so ``island.immigrate(*migrants)`` works)."""

    genomes: np.ndarray   # (k, dim)
    fitness: np.ndarray   # (k,) float64, minimised
    ids: np.ndarray       # (k,) int64
    origins: np.ndarray   # (k,) int64, island each genome was born on
    births: np.ndarray    # (k,) int64, generation each genome was born in


class Island:
    """One island of the model (see the module docstring).

    Args:
        index: island index (>= 0), also the id prefix of its genomes.
        problem: a :class:`Problem` or anything :func:`make_problem` accepts with
            no further argument (pass a Problem for built-ins with a dimension).
        config: :class:`EngineConfig` (per-island values are resolved with ``index``
            and ``n_islands``); default settings when None.
        seed: the run's seed.
        n_islands: number of islands in the run (for per-island settings); may be
            left out when no setting is a list.
        algorithm: overrides ``config.algorithm``: a name, ``"module:Class"``, class
            or instance following :mod:`mpievo.evo.algorithms.base`.
    """

    def __init__(self, index: int, problem, config: EngineConfig | None = None, *, seed: int = 0,
                 n_islands: int | None = None, algorithm=None):
        config = EngineConfig() if config is None else config
        if not isinstance(config, EngineConfig):
            raise TypeError(f"expected an EngineConfig, got {type(config).__name__}")
        self.index = int(index)
        self.seed = int(seed)
        stream(self.seed, self.index, 0)  # validates seed and index early
        self.problem = problem if isinstance(problem, Problem) else make_problem(problem)
        if n_islands is None:
            if any(isinstance(v, list) for v in config.to_dict().values()):
                raise ValueError("expected n_islands with per-island list settings, got None")
            n_islands = self.index + 1
        self.config = config.resolve(self.index, n_islands)
        self.archive = Archive(self.config.capacity, self.problem.dim, self.config.dtype,
                               unique=self.config.unique, island=self.index,
                               limit=min(self.config.population or self.config.capacity,
                                         self.config.capacity))
        self.algorithm = make_algorithm(self.config.algorithm if algorithm is None else algorithm,
                                        self.config)
        self.generation = -1          # last completed generation; -1 before initialize()
        self.evaluations = 0
        self.nonfinite = 0            # evaluations that returned NaN or +-inf
        self.children_accepted = 0    # children that entered the archive
        self.immigrants_accepted = 0
        self._next_id = 0
        self._pending = None

    def __repr__(self) -> str:
        return (f"Island({self.index}, {self.problem!r}, algorithm={self.algorithm.name!r}, "
                f"generation={self.generation}, evaluations={self.evaluations})")

    @property
    def initialized(self) -> bool:
        return self.generation >= 0

    # --- evolution ---------------------------------------------------------------
    def _evaluate(self, genomes: np.ndarray) -> np.ndarray:
        fitness, bad = sanitize_fitness(self.problem.evaluate(genomes))
        self.evaluations += len(fitness)
        self.nonfinite += bad
        return fitness

    def _new_ids(self, count: int) -> np.ndarray:
        ids = make_ids(self.index, self._next_id, count)
        self._next_id += count
        return ids

    def _init_algorithm(self) -> None:
        self.algorithm.init(self.problem, self.archive, stream(self.seed, self.index, 0, "algorithm"))

    def initialize(self) -> None:
        """Generation 0: fill the archive (up to its limit, ``population``) with uniform
        random genomes (evaluated).

        Raises:
            RuntimeError: already initialised (or restored).
        """
        if self.initialized:
            raise RuntimeError(f"island {self.index} is already initialised (generation {self.generation})")
        rng = stream(self.seed, self.index, 0, "init")
        lower, upper = box_arrays(self.problem.lower, self.problem.upper, self.archive.dtype)
        genomes = rng.uniform(self.problem.lower, self.problem.upper, (self.archive.limit, self.problem.dim))
        genomes = np.clip(genomes.astype(self.archive.dtype), lower, upper)
        fitness = self._evaluate(genomes)
        self.archive.insert(genomes, fitness, self._new_ids(len(genomes)), self.index, 0)
        self._init_algorithm()
        self.generation = 0

    def ask(self, generation: int) -> np.ndarray:
        """The batch of generation ``generation`` to evaluate (then call :meth:`tell`).

        Raises:
            RuntimeError: not initialised, or a generation not after the last one.
        """
        if not self.initialized:
            raise RuntimeError(f"island {self.index}: call initialize() or load_state_dict() first")
        if generation <= self.generation:
            raise RuntimeError(f"island {self.index}: expected a generation > {self.generation}, got {generation}")
        genomes = self.algorithm.ask(stream(self.seed, self.index, generation, "breed"))
        genomes = self._check_batch(genomes)
        self._pending = (generation, genomes)
        return genomes

    def _check_batch(self, genomes) -> np.ndarray:
        genomes = np.asarray(genomes)
        if genomes.ndim != 2 or genomes.shape[1] != self.problem.dim or genomes.shape[0] < 1:
            raise ValueError(f"expected algorithm {self.algorithm.name!r} to ask for genomes of shape "
                             f"(n >= 1, {self.problem.dim}), got {genomes.shape}")
        return genomes.astype(self.archive.dtype, copy=False)

    def tell(self, fitness) -> int:
        """Fitness (minimised) of the batch from :meth:`ask`; updates algorithm and archive.

        Returns:
            Number of children that entered the archive.
        """
        if self._pending is None:
            raise RuntimeError(f"island {self.index}: expected ask() before tell(), got no pending batch")
        generation, genomes = self._pending
        fitness, bad = sanitize_fitness(check_fitness(fitness, len(genomes), self.problem.name))
        self._pending = None
        self.evaluations += len(fitness)
        self.nonfinite += bad
        self.algorithm.tell(genomes, fitness)
        result = self.archive.insert(genomes, fitness, self._new_ids(len(genomes)), self.index, generation)
        self.children_accepted += len(result.entered)
        self.generation = generation
        return len(result.entered)

    def step(self, generation: int) -> int:
        """Breed, evaluate and select one generation; returns the children accepted."""
        genomes = self.ask(generation)
        return self.tell(self.problem.evaluate(genomes))

    def run(self, generations: int) -> "Island":
        """Convenience for one island: initialise if needed, then step ``generations`` times."""
        if not self.initialized:
            self.initialize()
        for g in range(self.generation + 1, self.generation + 1 + generations):
            self.step(g)
        return self

    # --- results -----------------------------------------------------------------
    def best(self) -> tuple[np.ndarray, float]:
        """(genome, fitness in the user's sense) of the best archive member."""
        i = self.archive.best_index()
        return self.archive.genomes[i].copy(), float(self.problem.to_user(self.archive.fitness[i]))

    def diversity(self) -> float:
        """Mean distance of the members to their centroid, genes scaled by the box width,
        divided by sqrt(dim): 0 when all members coincide, ~0.29 for uniform random.
        """
        if self.archive.size == 0:
            return 0.0
        width = self.problem.upper - self.problem.lower
        scaled = self.archive.genomes.astype(np.float64) / width
        spread = scaled - scaled.mean(axis=0)
        return float(np.mean(np.sqrt(np.einsum("ij,ij->i", spread, spread))) / np.sqrt(self.problem.dim))

    def counters(self) -> dict:
        """Plain-int counters (evaluations, nonfinite, ...)."""
        return {"generation": self.generation, "evaluations": self.evaluations,
                "nonfinite": self.nonfinite, "children_accepted": self.children_accepted,
                "immigrants_accepted": self.immigrants_accepted}

    # --- migration ---------------------------------------------------------------
    def emigrants(self, k: int, policy: str = "best", rng: np.random.Generator | None = None) -> Migrants:
        """Copies of ``k`` members (fewer when the archive holds fewer).

        Args:
            k: number of emigrants.
            policy: ``best`` (the k best, best first) or ``random`` (k distinct members).
            rng: required by ``random`` (e.g. ``stream(seed, index, g, "emigrate")``).
        """
        if policy not in EMIGRATION_POLICIES:
            raise ValueError(f"expected emigration policy among {EMIGRATION_POLICIES}, got {policy!r}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"expected k to be an int >= 0, got {k!r}")
        k = min(int(k), self.archive.size)
        if policy == "best":
            chosen = self.archive.ranking()[:k]
        else:
            if rng is None:
                raise ValueError("expected a Generator for emigration policy 'random', got None")
            chosen = rng.choice(self.archive.size, size=k, replace=False)
        a = self.archive
        return Migrants(a.genomes[chosen].copy(), a.fitness[chosen].copy(), a.ids[chosen].copy(),
                        a.origins[chosen].copy(), a.births[chosen].copy())

    def immigrate(self, genomes, fitness, ids, origins, births=None, *,
                  policy: str = "replace_if_better", max_replace: int | None = None) -> int:
        """Take migrants into the archive under ``policy`` (see :data:`IMMIGRATION_POLICIES`).

        Args:
            genomes: (k, dim) genomes (cast to this island's dtype).
            fitness: (k,) minimised fitness as computed on their origin island.
            ids, origins: (k,) int64 (origins may be one int for all).
            births: (k,) generations of birth; default: this island's generation.
            policy: immigration policy.
            max_replace: ``fair`` only: most immigrants that may enter (default 1).

        Returns:
            Number of immigrants that entered the archive.
        """
        if policy not in IMMIGRATION_POLICIES:
            raise ValueError(f"expected immigration policy among {IMMIGRATION_POLICIES}, got {policy!r}")
        if not self.initialized:
            raise RuntimeError(f"island {self.index}: call initialize() or load_state_dict() first")
        genomes = np.asarray(genomes)
        if genomes.ndim != 2 or genomes.shape[1] != self.problem.dim:
            raise ValueError(f"expected immigrant genomes of shape (k, {self.problem.dim}), got {genomes.shape}")
        genomes = genomes.astype(self.archive.dtype, copy=False)
        fitness, _ = sanitize_fitness(fitness)
        if fitness.shape != (len(genomes),):
            raise ValueError(f"expected immigrant fitness of shape ({len(genomes)},), got {fitness.shape}")
        births = self.generation if births is None else births
        candidates = np.arange(len(genomes))
        if policy == "elite_unique" and len(genomes):
            candidates = candidates[~self.archive.duplicate_mask(genomes)]
        if policy == "fair":
            limit = 1 if max_replace is None else int(max_replace)
            if limit < 0:
                raise ValueError(f"expected max_replace >= 0, got {limit}")
            candidates = np.sort(np.lexsort((candidates, fitness))[:limit])
        sub = lambda col: col[candidates] if np.ndim(col) else col  # noqa: E731
        args = (genomes[candidates], fitness[candidates], sub(np.asarray(ids)), sub(np.asarray(origins)),
                sub(np.asarray(births)))
        if policy == "replace_worst":
            entered = self._replace_worst(*args)
        else:
            entered = self.archive.insert(*args).entered
        accepted = args[0][entered], args[1][entered]
        self.immigrants_accepted += len(entered)
        if len(entered) and callable(getattr(self.algorithm, "migrate_in", None)):
            self.algorithm.migrate_in(*accepted)
        return len(entered)

    def _replace_worst(self, genomes, fitness, ids, origins, births) -> np.ndarray:
        keep = np.arange(len(genomes))
        if self.archive.unique and len(genomes):
            keep = keep[~self.archive.duplicate_mask(genomes)]
        # Free slots first (in order, so no gap), then the worst members, worst first.
        worst = self.archive.ranking()[::-1]
        slots = np.concatenate([np.arange(self.archive.size, self.archive.limit), worst])[:len(keep)]
        keep = keep[:len(slots)]
        pick = lambda col: col[keep] if np.ndim(col) else col  # noqa: E731
        self.archive.replace(slots, genomes[keep], fitness[keep], pick(ids), pick(origins), pick(births))
        return keep

    # --- checkpoint --------------------------------------------------------------
    def state_dict(self) -> dict:
        """Flat dict of numpy arrays and plain ints/floats/strs/bools ("group/name" keys).

        Holds the archive, the algorithm's state and the counters; random generator
        state is not needed (streams are keyed by generation).
        """
        if self._pending is not None:
            raise RuntimeError(f"island {self.index}: expected no pending ask() when saving, got one")
        state = {
            "format": STATE_FORMAT,
            "island/index": self.index, "island/seed": self.seed, "island/dim": self.problem.dim,
            "island/next_id": self._next_id, "algorithm/name": str(self.algorithm.name),
        }
        state.update({f"island/{k}": v for k, v in self.counters().items()})
        state.update({f"archive/{k}": v for k, v in self.archive.state_dict().items()})
        state.update({f"algorithm/state/{k}": v for k, v in self.algorithm.state_dict().items()})
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore an island saved by :meth:`state_dict` (exactly).

        Raises:
            ValueError: the state belongs to another index/seed/dim/algorithm or format.
        """
        def expect(key, value):
            got = state[key]
            got = got.item() if isinstance(got, np.ndarray) else got
            if isinstance(got, bytes):
                got = got.decode()
            if got != value:
                raise ValueError(f"expected {key} = {value!r} in the island state, got {got!r}")
        expect("format", STATE_FORMAT)
        expect("island/index", self.index)
        expect("island/seed", self.seed)
        expect("island/dim", self.problem.dim)
        expect("algorithm/name", str(self.algorithm.name))
        self.archive.load_state_dict({k[len("archive/"):]: v for k, v in state.items() if k.startswith("archive/")})
        self._init_algorithm()
        prefix = "algorithm/state/"
        self.algorithm.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
        for key in ("generation", "evaluations", "nonfinite", "children_accepted", "immigrants_accepted"):
            setattr(self, key, int(state[f"island/{key}"]))
        self._next_id = int(state["island/next_id"])
        self._pending = None
