"""An :class:`Island`: archive + algorithm + problem + keyed random streams.

The parallel layer drives islands through this API only::

    island = Island(index, problem, config, seed=seed, n_islands=n)
    island.initialize()                       # generation 0: the problem's starting genomes (default uniform), evaluated
    for g in range(1, generations + 1):
        island.step(g)                        # or: X = island.ask(g); island.tell(f)
        if g % interval == 0:
            out = island.emigrants(k, "best", stream(seed, index, g, "emigrate"))
            ... send out.genomes/fitness/ids/origins/births, receive theirs ...
            island.immigrate(*received, policy="better")
    state = island.state_dict()               # a tree of numpy arrays and plain scalars

Budgets: ``island.step(g, limit=k)`` evaluates at most ``k`` children (the last,
partial batch of an evaluation budget); :mod:`.island_sizes` tells from the settings
alone how many evaluations an island starts with and takes per step, so every rank can
plan every island's share. A problem with fidelity (:mod:`.fidelity`) is stepped in two
stages and counted in cost units (a full score 1, a sample score its fraction).

Determinism: generation ``g`` of island ``i`` draws only from
``stream(seed, i, g, purpose)``, so a run's result depends on the seed, the
settings and the order of calls on each island, never on ranks or timing; after
``load_state_dict`` an island continues exactly as it would have.

Migration: :meth:`Island.emigrants` picks members and :meth:`Island.immigrate`
takes foreign genomes in, both under the policies of :mod:`.migration_policy`
(selection ``best``/``random``, replacement ``worst``/``better``/``fair``, optionally
elite-unique). Migrants keep their ids, births and origin island.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .algorithms.base import make_algorithm
from . import device, genomes, half, pipeline
from .fidelity import fidelity_of, screened_step
from .archive import Archive
from .archive_records import first_id, make_ids
from .diversity import archive_diversity
from .engine_config import EngineConfig
from .island_sizes import initial_population
from .migration_policy import Migrants, admit, checked_migrants, choose_emigrants
from .moo.archive import ParetoArchive
from .moo.indicators import hypervolume
from .moo.problems import check_algorithm_objectives, sanitized_values
from .operators import box_arrays, round_integers
from .problems import Problem, make_problem
from .streams import StreamKeys, stream

STATE_FORMAT = 1


def _algorithm_name(spec) -> str | None:
    """The built-in name of an algorithm spec (name, class or instance), if any."""
    return spec if isinstance(spec, str) else getattr(spec, "name", None)


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

    Example::

        from mpievo.evo import EngineConfig, Island, make_problem
        island = Island(0, make_problem("rastrigin", dim=10), EngineConfig(capacity=32), seed=1)
        island.run(200)                               # initialize, then 200 generations
        genome, value = island.best()
        X = island.ask(201); island.tell(my_fitness(X))   # or evaluate elsewhere
    """

    def __init__(self, index: int, problem, config: EngineConfig | None = None, *, seed: int = 0,
                 n_islands: int | None = None, algorithm=None):
        config = EngineConfig() if config is None else config
        if not isinstance(config, EngineConfig):
            raise TypeError(f"expected an EngineConfig, got {type(config).__name__}")
        self.index = int(index)
        self.seed = int(seed)
        stream(self.seed, self.index, 0)  # validates seed and index early
        problem = problem if isinstance(problem, Problem) else make_problem(problem)
        if not config.is_heterogeneous():
            self.config = config  # plain already (IslandScheme passes resolve_all's configs)
        else:
            if n_islands is None:
                if any(isinstance(v, list) for v in config.to_dict().values()):
                    raise ValueError("expected n_islands with per-island list settings, got None")
                n_islands = self.index + 1
            self.config = config.resolve(self.index, n_islands)
        spec = self.config.algorithm if algorithm is None else algorithm
        genomes.check_encoding(self.config, _algorithm_name(spec))
        half.check_half(self.config, _algorithm_name(spec))
        self.problem = genomes.encode(problem, self.config)  # dense: the problem itself
        # recipes stay on the host (seeded genomes may materialise on the GPU); delta rows
        # are genome-shaped and go where dense ones would
        encoded = genomes.encoding_of(self.problem)
        self.on_device = ((encoded is None or encoded.device_rows)
                          and device.resolve_device(self.config.device, _algorithm_name(spec), self.problem))
        self.n_obj = int(getattr(self.problem, "n_obj", 1))   # objectives per genome
        archive_class, extra = Archive, {}
        if self.n_obj > 1:
            if self.on_device or encoded is not None:
                raise ValueError(f"expected dense genomes on the cpu for {self.n_obj} objectives, got "
                                 f"genome {self.config.genome!r} on device {self.config.device!r}")
            archive_class, extra = ParetoArchive, {"n_obj": self.n_obj}
        elif self.on_device:
            from .device_archive import DeviceArchive as archive_class
        self.archive = archive_class(self.config.capacity, self.problem.dim,
                                     genomes.row_dtype(self.problem, self.config.dtype),
                                     unique=self.config.unique, island=self.index,
                                     limit=initial_population(self.config), **extra)
        self.fidelity = fidelity_of(problem)    # two-stage scoring (mpievo.evo.fidelity), or None
        if self.fidelity is not None and (self.on_device or encoded is not None or self.n_obj > 1):
            raise ValueError(f"problem.fidelity_sample: expected dense host genomes of one objective, got "
                             f"genome {self.config.genome!r} on device {self.config.device!r}, {self.n_obj} objectives")
        self.fidelity_rows = 0        # rows scored (fidelity only): evaluations = ceil(rows / N)
        self.integer = getattr(problem, "integer", None)   # integer genes: children rounded in ask()
        if self.integer is not None and (self.on_device or encoded is not None):
            raise ValueError(f"problem.integer: expected dense host genomes, got genome {self.config.genome!r} "
                             f"on device {self.config.device!r}")
        self.algorithm = make_algorithm(spec, self.config)
        check_algorithm_objectives(self.algorithm, self.problem, self.n_obj)
        if callable(getattr(self.algorithm, "check_problem", None)):
            self.algorithm.check_problem(self.problem, on_device=self.on_device)   # e.g. ES's noise: before any work
        self.generation = -1          # last completed generation; -1 before initialize()
        self.evaluations = 0
        self.nonfinite = 0            # evaluations that returned NaN or +-inf
        self.children_accepted = 0    # children that entered the archive
        self.immigrants_accepted = 0
        self.stalled = 0              # own generations since the best last improved
        self._next_id = 0
        self._pending = None

    def __repr__(self) -> str:
        return (f"Island({self.index}, {self.problem!r}, algorithm={self.algorithm.name!r}, "
                f"device={'cuda' if self.on_device else 'cpu'!r}, "
                f"generation={self.generation}, evaluations={self.evaluations})")

    @property
    def initialized(self) -> bool:
        return self.generation >= 0

    # --- evolution ---------------------------------------------------------------
    def evaluate(self, genomes) -> np.ndarray:
        """Minimised fitness (host float64) of a batch of this island's genomes: on the
        device for a device island (the problem's ``evaluate_device`` when it has one,
        e.g. a group of ranks evaluating blocks on their GPUs, else
        :func:`mpievo.evo.device.evaluate`)."""
        if self.on_device:
            spread = getattr(self.problem, "evaluate_device", None)
            return spread(genomes) if spread is not None else device.evaluate(self.problem, genomes)
        return self.problem.evaluate(genomes)

    def _count(self, fitness) -> np.ndarray:
        """Evaluated ``fitness`` sanitised and counted (evaluations, non-finite values)."""
        fitness, bad = sanitized_values(fitness, self.n_obj, self.problem.name)
        self._spend(len(fitness))
        self.nonfinite += bad
        return fitness

    def _spend(self, full: int, sample_rows: int = 0) -> None:
        """Count ``full`` full scores and ``sample_rows`` rows of cheap ones: in calls, or
        with fidelity in cost units (``ceil(rows / N)``, exact in rows)."""
        if self.fidelity is None:
            self.evaluations += full
            return
        self.fidelity_rows += full * self.fidelity.rows + sample_rows
        self.evaluations = -(-self.fidelity_rows // self.fidelity.rows)

    def _new_ids(self, count: int) -> np.ndarray:
        ids = make_ids(self.index, self._next_id, count)
        self._next_id += count
        return ids

    def _init_algorithm(self) -> None:
        self.algorithm.init(self.problem, self.archive, stream(self.seed, self.index, 0, "algorithm"))

    def switch_algorithm(self, algorithm) -> None:
        """Run ``algorithm`` (an instance) from now on, initialised on the archive as it is
        (a portfolio's finishing run, :mod:`mpievo.rules.budget`); before the island is
        initialised or restored only set (:meth:`load_state_dict` initialises it then,
        and a checkpoint holds the state of the algorithm switched to, so a restore
        switches first).

        Example::

            from mpievo.evo import EngineConfig, Island, make_problem
            from mpievo.evo.algorithms.cmaes import CMAES
            island = Island(0, make_problem("sphere", dim=5), EngineConfig(algorithm="shade")).run(5)
            island.switch_algorithm(CMAES(sigma0=0.01))    # a local CMA-ES from the best
            island.run(5)

        Raises:
            RuntimeError: an ask() is pending.
        """
        if self._pending is not None:
            raise RuntimeError(f"island {self.index}: expected no pending ask() when switching, got one")
        check_algorithm_objectives(algorithm, self.problem, self.n_obj)
        self.algorithm = algorithm
        if self.initialized:
            self._init_algorithm()

    def initialize(self) -> None:
        """Generation 0: fill the archive (up to its limit, ``population``) with the
        problem's starting genomes (:meth:`Problem.initial_genomes`: its ``initial``
        hook, else uniform random), evaluated: :meth:`initial_population`, evaluated,
        then :meth:`initialize_with`.

        Raises:
            RuntimeError: already initialised (or restored).
        """
        genomes = self.initial_population()
        self.initialize_with(genomes, self.evaluate(genomes))

    def initial_population(self) -> np.ndarray:
        """Generation 0's genomes, not evaluated yet (for evaluation elsewhere, e.g. by
        workers while other islands' populations are evaluated, then :meth:`initialize_with`).

        Raises:
            RuntimeError: already initialised (or restored).
        """
        if self.initialized:
            raise RuntimeError(f"island {self.index} is already initialised (generation {self.generation})")
        rng = stream(self.seed, self.index, 0, "init")
        if self.on_device and self.problem.initial is None:
            from . import device_operators

            lower, upper = box_arrays(self.problem.lower, self.problem.upper, self.archive.dtype)
            return half.uniform_genomes(
                device_operators, rng, lower, upper,
                device_operators.empty((self.archive.limit, self.problem.dim), self.archive.dtype),
                on_device=True)
        n = self.archive.limit     # host rows: written where they will be kept
        return self.problem.initial_genomes(rng, n, self.archive.dtype, out=self.archive.population_rows(n))

    def initialize_with(self, genomes, fitness) -> None:
        """Generation 0 from :meth:`initial_population`'s ``genomes`` and their minimised
        ``fitness`` (what :meth:`evaluate` gives for them)."""
        if self.initialized:
            raise RuntimeError(f"island {self.index} is already initialised (generation {self.generation})")
        fitness = self._count(fitness)
        if len(fitness) != len(genomes):
            raise ValueError(f"expected the fitness of {len(genomes)} initial genomes, got {len(fitness)}")
        self.archive.insert(genomes, fitness, self._new_ids(len(fitness)), self.index, 0)
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
        keys = StreamKeys(self.seed, self.index, generation, "breed")
        rng = keys if getattr(self.algorithm, "takes_stream_keys", False) else keys.generator()
        if self.on_device:
            from .device_operators import device_math

            with device_math(self.config.device_math):
                genomes = self.algorithm.ask(rng)
        else:
            genomes = self.algorithm.ask(rng)
        genomes = self._check_batch(genomes)
        round_integers(genomes, self.integer)      # integer genes bred continuously, scored and kept rounded
        self._pending = (generation, genomes)
        return genomes

    def _check_batch(self, genomes) -> np.ndarray:
        if not self.on_device:
            genomes = np.asarray(genomes)
            if (genomes.dtype == self.archive.dtype and genomes.ndim == 2 and genomes.shape[0]
                    and genomes.shape[1] == self.problem.dim):
                return genomes    # host rows as the archive stores them (the GA's own buffer)
        shape = tuple(genomes.shape)
        if len(shape) != 2 or shape[1] != self.problem.dim or shape[0] < 1:
            raise ValueError(f"expected algorithm {self.algorithm.name!r} to ask for genomes of shape "
                             f"(n >= 1, {self.problem.dim}), got {shape}")
        return self.archive.as_rows(genomes)

    def tell(self, fitness, *, evaluated: int | None = None) -> int:
        """Fitness (minimised) of the batch from :meth:`ask`; updates algorithm and archive.

        Args:
            fitness: the fitness of the batch, or of its first ``evaluated`` genomes.
            evaluated: how many genomes (from the first) were evaluated; default all.
                The algorithm sees the others as failed (+inf) and they never enter
                the archive nor count as evaluations (a budget's last batch).

        Returns:
            Number of children that entered the archive.
        """
        if self._pending is None:
            raise RuntimeError(f"island {self.index}: expected ask() before tell(), got no pending batch")
        generation, genomes = self._pending
        size = genomes.shape[0]
        n = size if evaluated is None else evaluated
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= size:
            raise ValueError(f"expected evaluated to be an int in [1, {size}], got {evaluated!r}")
        fitness, bad = sanitized_values(fitness, self.n_obj, self.problem.name, n)
        self._pending = None
        self._spend(n)
        self.nonfinite += bad
        return self._settle(generation, genomes, fitness, genomes[:n], fitness)

    def _settle(self, generation: int, genomes, told, rows, fitness) -> int:
        """The algorithm told ``told`` for its batch ``genomes`` (the unevaluated rest +inf),
        the archive offered ``rows`` of ``fitness``; returns the children that entered."""
        size, n = genomes.shape[0], len(fitness)
        if len(told) < size:
            told = np.concatenate([told, np.full((size - len(told),) + told.shape[1:], np.inf)])
        self.algorithm.tell(genomes, told)
        # validated once: the rows by ask, the fitness above
        if n == 0:
            entered = 0
            before = after = self.best_internal()
        elif self.archive.merges_in_one_call:
            entered, before, after = self.archive.insert_children(
                rows, fitness, first_id(self.index, self._next_id, n), generation)
            self._next_id += n
        else:
            before = self.best_internal()
            result = self.archive.insert_rows(rows, fitness, self._new_ids(n), self.index, generation)
            entered, after = len(result.entered), self.best_internal()
        self.stalled = 0 if after < before else self.stalled + 1
        self.children_accepted += entered
        self.generation = generation
        return entered

    def step(self, generation: int, limit: int | None = None) -> int:
        """Breed, evaluate and select one generation; returns the children accepted.

        Args:
            generation: the generation to run (after the last one).
            limit: evaluate at most this many children (>= 1; default: the whole batch);
                with fidelity, spend at most this many cost units.
        """
        if self.fidelity is not None:
            return screened_step(self, generation, limit)
        made_there = getattr(type(self.problem), "evaluates_deferred_rows", None)
        defer = made_there is not None and not self.on_device and made_there(self.problem)
        try:        # with defer, children bred as the problem makes them (mpievo.evo.pipeline)
            with pipeline.deferring() if defer else contextlib.nullcontext():
                genomes = self.ask(generation)
            n = genomes.shape[0] if limit is None else min(limit, genomes.shape[0])
            fitness = self.evaluate(genomes[:n])
        finally:
            pipeline.settle()           # every row bred before the algorithm and the archive read them
        return self.tell(fitness, evaluated=n)

    def run(self, generations: int) -> "Island":
        """Convenience for one island: initialise if needed, then step ``generations`` times."""
        if not self.initialized:
            self.initialize()
        for g in range(self.generation + 1, self.generation + 1 + generations):
            self.step(g)
        return self

    # --- results -----------------------------------------------------------------
    def best_internal(self) -> float:
        """The archive's best fitness as the engine sees it (minimised; inf when empty)."""
        return float(self.archive.fitness[self.archive.best_index()]) if self.archive.size else np.inf

    def best(self) -> tuple[np.ndarray, float]:
        """(genome, fitness in the user's sense) of the best archive member."""
        i = self.archive.best_index()
        encoded = genomes.encoding_of(self.problem)
        if encoded is None:
            genome = self.archive.row(i)
        else:   # the whole genome, decoded from a view of a host row (no row-sized copy)
            host = isinstance(self.archive.genomes, np.ndarray)
            genome = encoded.decode(self.archive.genomes[i] if host else self.archive.row(i))
        return genome, float(self.problem.to_user(self.archive.fitness[i]))

    def hypervolume(self) -> float | None:
        """Several objectives: the hypervolume of the archive's front to the problem's
        ``reference_point`` (:mod:`.moo.indicators`); None otherwise."""
        if self.n_obj == 1 or self.archive.size == 0:
            return None
        return hypervolume(self.archive.objectives[self.archive.front()], self.problem.reference_point)

    def diversity(self) -> float:
        """Mean distance of the members to their centroid, genes scaled by the box width,
        divided by sqrt(dim) (:func:`.diversity.archive_diversity`): 0 when all members
        coincide, ~0.29 for uniform random."""
        return archive_diversity(self.archive, self.problem, self.on_device)

    def counters(self) -> dict:
        """Plain-int counters (evaluations, nonfinite, ...)."""
        return {"generation": self.generation, "evaluations": self.evaluations,
                "nonfinite": self.nonfinite, "children_accepted": self.children_accepted,
                "immigrants_accepted": self.immigrants_accepted}

    # --- migration ---------------------------------------------------------------
    def member_hashes(self) -> np.ndarray:
        """uint64 hash of each member's genome: what a sender to this island excludes
        for elite-unique migration (``emigrants(..., exclude=)``)."""
        return self.archive.hashes()

    def emigrants(self, k: int, policy: str = "best", rng: np.random.Generator | None = None,
                  exclude: np.ndarray | None = None) -> Migrants:
        """Copies of ``k`` members (fewer when fewer are eligible).

        Args:
            k: number of emigrants.
            policy: selection policy (:data:`~.migration_policy.SELECTION_POLICIES`): ``best``
                (the k best, best first) or ``random`` (k distinct members).
            rng: required by ``random`` (e.g. ``stream(seed, index, g, "emigrate")``).
            exclude: the receiver's :meth:`member_hashes`; members with one of these
                hashes stay (elite-unique). None: every member may leave.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"expected k to be an int >= 0, got {k!r}")
        return choose_emigrants(self.archive, int(k), policy, rng, exclude)

    def immigrate(self, genomes, fitness, ids, origins, births=None, *, policy: str = "better",
                  max_replace: int | None = None, unique: bool = False) -> int:
        """Take migrants into the archive under ``policy``.

        Args:
            genomes: (k, dim) genomes (cast to this island's dtype).
            fitness: (k,) minimised fitness as computed on their origin island.
            ids, origins: (k,) int64 (origins may be one int for all).
            births: (k,) generations of birth; default: this island's generation.
            policy: replacement policy (:data:`~.migration_policy.REPLACEMENT_POLICIES`):
                ``worst`` (evict the worst members unconditionally), ``better`` (enter
                only when better than the worst member) or ``fair`` (like ``better``,
                for at most ``max_replace`` immigrants, the best).
            max_replace: ``fair`` only: most immigrants that may enter (default 1).
            unique: elite-unique: drop genomes the island holds and repeats first.

        Returns:
            Number of immigrants that entered the archive: none while the island's own
            children improved its best within its last ``immigration_patience``
            generations (``self.stalled`` counts them).
        """
        if not self.initialized:
            raise RuntimeError(f"island {self.index}: call initialize() or load_state_dict() first")
        limit = 1 if max_replace is None else max_replace
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0:
            raise ValueError(f"expected max_replace to be an int >= 0, got {max_replace!r}")
        migrants = checked_migrants(self.archive, self.problem, self.n_obj, genomes, fitness, ids, origins,
                                    self.generation if births is None else births)
        if self.n_obj > 1 and policy == "fair":
            raise ValueError("expected replacement 'better' or 'worst' for several objectives, got 'fair'")
        if self.stalled < self.config.immigration_patience:
            return 0       # still improving on its own: immigrants would only pull it off course
        entered = admit(self.archive, migrants, policy, int(limit), unique)
        self.immigrants_accepted += len(entered.fitness)
        if len(entered.fitness) and callable(getattr(self.algorithm, "migrate_in", None)):
            self.algorithm.migrate_in(entered.genomes, entered.fitness)
        return len(entered.fitness)

    # --- checkpoint --------------------------------------------------------------
    def state_dict(self, copy: bool = True) -> dict:
        """The island's state tree: nested dicts of numpy arrays and plain ints/floats/strs/bools,
        the shape a checkpoint stores (:mod:`mpievo.io`) and :meth:`load_state_dict` takes.

        ``{"format", "island": {index, seed, dim, next_id, counters, stalled},
        "algorithm": {"name", "state"}, "genome": the encoding's metadata (encoded genomes
        only), "archive"}``. Holds the archive, the algorithm's state and the counters;
        random generator state is not needed (streams are keyed by generation).
        ``copy=False``: the archive's genomes as a read-only view (see
        :meth:`Archive.state_dict`), for a checkpoint written before the island steps again.
        """
        if self._pending is not None:
            raise RuntimeError(f"island {self.index}: expected no pending ask() when saving, got one")
        state = {
            "format": STATE_FORMAT,
            "island": {"index": self.index, "seed": self.seed, "dim": self.problem.dim,
                       "next_id": self._next_id, **self.counters(), "stalled": self.stalled,
                       "fidelity_rows": self.fidelity_rows},
            "algorithm": {"name": str(self.algorithm.name), "state": self.algorithm.state_dict()},
        }
        encoded = genomes.encoding_of(self.problem)
        if encoded is not None:
            state["genome"] = encoded.metadata()
        state["archive"] = self.archive.state_dict(copy)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore an island saved by :meth:`state_dict` (exactly).

        Raises:
            ValueError: the state belongs to another index/seed/dim/algorithm or format.
        """
        island, algorithm = state.get("island", {}), state.get("algorithm", {})

        def expect(key, got, value):
            if got != value:
                raise ValueError(f"expected {key} = {value!r} in the island state, got {got!r}")
        expect("format", state.get("format"), STATE_FORMAT)
        encoded = genomes.encoding_of(self.problem)
        genome = state.get("genome", {})
        if encoded is not None or "encoding" in genome:     # dense states may lack it
            expect("genome/encoding", genome.get("encoding"), "dense" if encoded is None else encoded.genome)
        if encoded is not None:
            encoded.check_metadata(genome)
        expect("island/index", island.get("index"), self.index)
        expect("island/seed", island.get("seed"), self.seed)
        expect("island/dim", island.get("dim"), self.problem.dim)
        expect("algorithm/name", algorithm.get("name"), str(self.algorithm.name))
        self.archive.load_state_dict(state["archive"])
        self._init_algorithm()
        self.algorithm.load_state_dict(algorithm["state"])
        for key in ("generation", "evaluations", "nonfinite", "children_accepted", "immigrants_accepted"):
            setattr(self, key, int(island[key]))
        self._next_id = int(island["next_id"])
        self.stalled = int(island.get("stalled", 0))    # states from before the count: 0
        self.fidelity_rows = int(island.get("fidelity_rows", 0))
        self._pending = None
