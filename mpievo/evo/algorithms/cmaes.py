"""CMA-ES on an island, through the ``cma`` package (ask/tell).

``cma.CMAEvolutionStrategy`` draws its normals through its ``randn`` option; we pass
:class:`KeyedNormal`, which draws from the generation's keyed stream, so the run is
deterministic and never touches numpy's global random state. The box goes to cma's
``bounds`` option (its boundary transformation keeps solutions inside).

Start: the best archive member, step ``sigma0 * mean box width`` with per-gene
scaling by the box widths. When cma's termination criteria fire the strategy
restarts from the archive's best member with the initial step (deterministic,
counted in ``restarts``). Accepted immigrants are injected (``es.inject``), so they
join the next generation.

The checkpoint holds the pickled ``CMAEvolutionStrategy`` as a uint8 array (exact,
but tied to the cma version that wrote it).
"""

from __future__ import annotations

import math
import pickle

import numpy as np


class KeyedNormal:
    """``randn(*shape)`` drawing from whatever generator ``rng`` is set to."""

    def __init__(self):
        self.rng = None

    def __call__(self, *shape):
        if self.rng is None:
            raise RuntimeError("expected KeyedNormal.rng to be set before cma draws, got None")
        return self.rng.standard_normal(shape)

    def __getstate__(self):
        return {}  # the generator is per generation: never part of a checkpoint

    def __setstate__(self, state):
        self.rng = None


class CMAES:
    """CMA-ES island algorithm (see the module docstring).

    Args:
        popsize: solutions per generation; None for cma's default 4 + 3 ln(dim).
        sigma0: initial step relative to the mean box width.
    """

    name = "cmaes"

    def __init__(self, *, popsize: int | None = None, sigma0: float = 0.3):
        self.popsize = popsize
        self.sigma0 = float(sigma0)
        self.restarts = 0

    @classmethod
    def from_config(cls, config) -> "CMAES":
        return cls(popsize=config.cma_popsize, sigma0=config.cma_sigma0)

    def init(self, problem, archive, rng) -> None:
        self.archive = archive
        self.dtype = archive.dtype
        self.lower = problem.lower
        self.upper = problem.upper
        self.restarts = 0
        self.es = self._new_strategy(rng)
        self._asked = None

    def _new_strategy(self, rng):
        import cma

        width = self.upper - self.lower
        mean_width = float(np.mean(width))
        x0 = self.archive.genomes[self.archive.best_index()].astype(np.float64)
        randn = KeyedNormal()
        randn.rng = rng
        opts = {
            "bounds": [self.lower.tolist(), self.upper.tolist()],
            "CMA_stds": (width / mean_width).tolist(),
            "randn": randn,
            "seed": math.nan,
            "verbose": -9,
            "verb_log": 0,
            "verb_disp": 0,
            "tolflatfitness": 10**9,  # a flat plateau is no reason to stop: we restart instead
        }
        if self.popsize is not None:
            opts["popsize"] = int(self.popsize)
        return cma.CMAEvolutionStrategy(x0, self.sigma0 * mean_width, opts)

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        if self.es.stop():
            self.restarts += 1
            self.es = self._new_strategy(rng)
        # The generation's stream stays set until tell(), which may draw too.
        self.es.opts["randn"].rng = rng
        self._asked = self.es.ask()
        return np.asarray(self._asked, dtype=self.dtype)

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        finite = np.isfinite(fitness)
        if not finite.all():
            # cma needs finite values: rank invalid solutions just behind the worst valid one.
            worst = float(np.max(fitness[finite])) if finite.any() else 0.0
            fitness = np.where(finite, fitness, worst + 1.0 + abs(worst))
        try:
            self.es.tell(self._asked, fitness.tolist())
        finally:
            self.es.opts["randn"].rng = None
            self._asked = None

    def migrate_in(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Inject the immigrants better than the strategy's best into its next generation."""
        best = self.es.best.f if self.es.best.f is not None else np.inf
        better = np.flatnonzero(fitness < best)[: self.es.popsize - 1]
        if len(better):
            self.es.inject([g.astype(np.float64) for g in genomes[better]], force=True)

    def best(self) -> tuple[np.ndarray, float]:
        i = self.archive.best_index()
        return self.archive.genomes[i].copy(), float(self.archive.fitness[i])

    def state_dict(self) -> dict:
        blob = pickle.dumps(self.es, protocol=pickle.HIGHEST_PROTOCOL)
        return {"strategy": np.frombuffer(blob, dtype=np.uint8).copy(), "restarts": int(self.restarts)}

    def load_state_dict(self, state: dict) -> None:
        self.es = pickle.loads(np.asarray(state["strategy"], dtype=np.uint8).tobytes())
        self.restarts = int(state["restarts"])
