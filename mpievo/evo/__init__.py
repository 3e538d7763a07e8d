"""mpievo.evo: the evolutionary engine of one island (no MPI here, ever).

Building blocks:

* :class:`Island` (:mod:`.island`) -- archive + algorithm + problem; the object the
  parallel layer drives: ``initialize()``, ``step(g)`` (or ``ask(g)``/``tell(f)`` to
  evaluate elsewhere), ``emigrants(k, policy, rng, exclude)``, ``immigrate(...)``,
  ``diversity()``, ``counters()``, ``best()``, ``state_dict()``/``load_state_dict()``.
* Migration policies (:mod:`.migration_policy`) -- selection (``best``, ``random``) and
  replacement (``worst``, ``better``, ``fair``) as plain callables, elite-unique
  filtering, :class:`MigrationPolicy`; the parallel layer only transports migrants.
* :class:`Archive` (:mod:`.archive`) -- fixed-capacity elite set: genomes, fitness,
  ids (``island * 2**40 + counter``), births, origins; keep-the-best merge up to a
  limit (the population in use, which GA restarts grow).
* Operators (:mod:`.operators`) -- selection, crossover, mutation, box handling; plain
  callables vectorised over a batch, each taking an explicit Generator.
* Algorithms (:mod:`.algorithms`) -- ``ga`` (default; restarts with a growing
  population when it stagnates), ``de`` (jDE), ``shade`` (SHADE/L-SHADE), ``cmaes``; the protocol for user
  algorithms is in :mod:`.algorithms.base` (a worked one: docs/guides/custom-algorithm.md).
* Several objectives (:mod:`.moo`) -- problems ``f(X) -> (n, n_obj)`` (ZDT, DTLZ, WFG, user
  ones), the ``nsga2``, ``smsemoa`` and ``moead`` islands over a :class:`~.moo.ParetoArchive`,
  hypervolumes.
* :class:`StagnationMonitor` (:mod:`.stagnation`) -- generations without progress of
  a population's best and median fitness (what triggers the GA's restarts).
* Problems (:mod:`.problems`) -- batch fitness ``f(X) -> (n,)`` over a box; built-in
  benchmarks (shifted/rotated), user callables or ``"module:function"``.
* Genome encodings (:mod:`.genomes`, ``engine.genome``) -- ``dense`` rows, ``delta``
  rows against a base model, ``seeded`` recipes over base models
  (:class:`BaseModels`, ``Problem(..., bases=...)``), materialised for the fitness.
* :class:`EngineConfig` (:mod:`.engine_config`) -- validated settings; any setting may be a
  per-island list or callable (:func:`resolve_param`).
* :func:`stream` (:mod:`.streams`) -- random generators keyed by
  ``(seed, island, generation, purpose)``: same seed, same results, any rank layout.

The engine minimises; maximisation problems are negated inside and turned back by
``Problem.to_user`` / ``Island.best``. Non-finite fitness ranks worst and is counted.

Example::

    from mpievo.evo import EngineConfig, Island, make_problem
    island = Island(0, make_problem("rastrigin", dim=10), EngineConfig(), seed=1)
    island.run(200)
    genome, value = island.best()
"""

from .archive import Archive, Insertion
from .archive_records import ID_STRIDE, make_ids, sanitize_fitness
from .algorithms import CMAES, JDE, SHADE, GeneticAlgorithm, IslandAlgorithm, make_algorithm
from .engine_config import EngineConfig
from .genomes import BaseModels
from .island import Island
from .migration_policy import REPLACEMENT_POLICIES, SELECTION_POLICIES, MigrationPolicy, Migrants
from .params import resolve_param
from .builtin_functions import BUILTIN_PROBLEMS
from .problems import Problem, builtin_problem, check_fitness, make_problem
from .stagnation import StagnationMonitor
from .streams import PURPOSES, stream

__all__ = [
    "Archive", "Insertion", "ID_STRIDE", "make_ids", "sanitize_fitness",
    "IslandAlgorithm", "GeneticAlgorithm", "JDE", "SHADE", "CMAES", "make_algorithm",
    "EngineConfig", "resolve_param", "BaseModels",
    "Island", "Migrants", "MigrationPolicy", "SELECTION_POLICIES", "REPLACEMENT_POLICIES",
    "Problem", "BUILTIN_PROBLEMS", "builtin_problem", "make_problem", "check_fitness",
    "StagnationMonitor",
    "PURPOSES", "stream",
]
