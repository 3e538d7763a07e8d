"""The island-algorithm protocol and the factory that builds algorithms.

An island algorithm proposes batches of genomes and learns from their fitness. The
:class:`~mpievo.evo.island.Island` owns the archive and the evaluations; per
generation it calls::

    X = algorithm.ask(rng)         # rng = stream(seed, island, generation, "breed")
    f = problem.evaluate(X)        # minimised, non-finite replaced by +inf
    algorithm.tell(X, f)
    archive.insert(X, f, ...)      # the island's elite archive (used for migration)

Protocol (duck-typed; :class:`IslandAlgorithm` spells it out):

``init(problem, archive, rng)``
    Set up for ``problem`` (a :class:`~mpievo.evo.problems.Problem`). ``archive``
    already holds the evaluated initial population; keep a reference when breeding
    from it (the GA does). Must not evaluate anything. Called again before
    ``load_state_dict`` on restart.
``ask(rng) -> ndarray``
    An (n, dim) batch inside the box, of the archive's dtype. All randomness from
    ``rng``. The array may be reused by the next ``ask``.
``tell(genomes, fitness)``
    The batch just asked for and its fitness (float64, minimised, +inf = invalid).
``state_dict() -> dict`` / ``load_state_dict(state)``
    Everything that ``init`` does not rebuild, as numpy arrays and plain scalars or
    strings (stored in HDF5); the round trip must be exact.
``best() -> (genome, fitness)``
    The best genome the algorithm knows.
``migrate_in(genomes, fitness)`` (optional)
    Immigrants the island accepted into its archive, for algorithms whose population
    is not the archive (DE, CMA-ES).

A class may define ``from_config(config: EngineConfig)``; otherwise the factory
calls it with no argument. User algorithms are given as a class, an instance or a
``"module:Class"`` string (see ``examples/custom_problem.py``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..problems import load_object

REQUIRED_METHODS = ("init", "ask", "tell", "state_dict", "load_state_dict", "best")


@runtime_checkable
class IslandAlgorithm(Protocol):
    """What an island algorithm provides (see the module docstring).

    Example::

        from mpievo.evo import IslandAlgorithm, make_algorithm
        isinstance(make_algorithm("ga"), IslandAlgorithm)      # True: it has every method

    A complete algorithm of your own, run by ``mpievo.minimize``, is in
    ``examples/custom_algorithm.py`` (guide: docs/guides/custom-algorithm.md).
    """

    name: str

    def init(self, problem, archive, rng: np.random.Generator) -> None: ...

    def ask(self, rng: np.random.Generator) -> np.ndarray: ...

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def best(self) -> tuple[np.ndarray, float]: ...


def check_algorithm(obj) -> None:
    """Raise TypeError naming the protocol methods ``obj`` lacks.

    Example::

        check_algorithm(object())    # TypeError: ... got object lacking ['init', 'ask', ...]
    """
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(f"expected an island algorithm with methods {list(REQUIRED_METHODS)}, "
                        f"got {type(obj).__name__} lacking {missing}")


def algorithm_classes() -> dict:
    """Built-in name -> class (a fresh dict; imported lazily to keep imports light)."""
    from .cmaes import CMAES
    from .de import JDE
    from .es import ES
    from .ga import GeneticAlgorithm
    from .shade import SHADE
    from ..moo.nsga2 import NSGA2
    from ..moo.moead import MOEAD
    from ..moo.smsemoa import SMSEMOA

    return {"ga": GeneticAlgorithm, "de": JDE, "jde": JDE, "cmaes": CMAES, "shade": SHADE, "nsga2": NSGA2,
            "smsemoa": SMSEMOA, "moead": MOEAD, "es": ES}


def make_algorithm(spec, config=None):
    """Build an island algorithm.

    Args:
        spec: a built-in name ("ga", "de"/"jde", "cmaes", "shade", "es", "nsga2", "smsemoa", "moead"), a ``"module:Class"``
            string, a class, or an instance (returned as is).
        config: a resolved :class:`~mpievo.evo.engine_config.EngineConfig` for ``from_config``.

    Raises:
        ValueError: unknown name or import failure.
        TypeError: the object does not follow the protocol.

    Example::

        make_algorithm("shade", EngineConfig(shade_population=50).resolve(0, 1))   # a SHADE with N_init 50
        make_algorithm("custom_algorithm:HillClimber")     # a user class, by "module:Class"
    """
    if isinstance(spec, str):
        classes = algorithm_classes()
        if spec in classes:
            spec = classes[spec]
        elif ":" in spec:
            spec = load_object(spec)
        else:
            raise ValueError(f"expected an algorithm among {sorted(classes)} or 'module:Class', got {spec!r}")
    if isinstance(spec, type):
        factory = getattr(spec, "from_config", None)
        obj = factory(config) if (factory is not None and config is not None) else spec()
    else:
        obj = spec
    check_algorithm(obj)
    return obj
