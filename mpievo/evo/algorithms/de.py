"""Self-adaptive differential evolution (jDE, Brest et al. 2006), DE/rand/1/bin.

Each population member ``i`` carries its own ``F_i`` and ``CR_i``. Per generation,
with probability ``tau_f`` a trial's F is renewed to U(0.1, 1.0) and with probability
``tau_cr`` its CR to U(0, 1); the trial ``x_r1 + F (x_r2 - x_r3)`` (r1, r2, r3
distinct and different from i) is crossed binomially with ``x_i`` and put back in the
box. A trial replaces its target when not worse, and then keeps its F and CR.

A generation is one compiled step (:func:`mpievo.kernels.de_step.jde_trials`, whose
docstring maps its counter-based draws) and the selection another
(:func:`~mpievo.kernels.de_step.jde_select`).

The population is the algorithm's own (the island's archive is its elite memory): it
starts from the best archive members (random genomes with +inf fitness fill the rest)
and takes in immigrants through :meth:`JDE.migrate_in`.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import de_step

from .. import operators as ops
from ..streams import CounterStart


def seed_population(archive, n: int, rng: np.random.Generator, lower, upper,
                    integer=None) -> tuple[np.ndarray, np.ndarray]:
    """A DE population of ``n``: the archive's best members, the rest uniform in the box
    (those unevaluated: fitness +inf; ``integer`` genes rounded). Returns (genomes, fitness)."""
    ranked = archive.ranking()[:n]
    x = np.empty((n, archive.dim), archive.dtype)
    fitness = np.full(n, np.inf)
    x[:len(ranked)] = archive.genomes[ranked]
    fitness[:len(ranked)] = archive.fitness[ranked]
    if n > len(ranked):
        x[len(ranked):] = rng.uniform(lower, upper, (n - len(ranked), archive.dim))
        np.clip(x, lower, upper, out=x)
        ops.round_integers(x[len(ranked):], integer)
    return x, fitness


class JDE:
    """jDE island algorithm (see the module docstring).

    Example::

        from mpievo.evo import EngineConfig, Island, make_problem
        island = Island(0, make_problem("rastrigin", dim=10), EngineConfig(algorithm="de", de_population=40))
        island.run(100).best()             # or mpievo.minimize(..., algorithm="de")
    """

    name = "de"
    takes_stream_keys = True   # ask() gets StreamKeys: the compiled step needs no numpy generator

    def __init__(self, *, population: int = 32, tau_f: float = 0.1, tau_cr: float = 0.1,
                 bounds: str = "clip"):
        if population < 4:
            raise ValueError(f"expected a DE population >= 4, got {population}")
        self.population = int(population)
        self.tau_f = float(tau_f)
        self.tau_cr = float(tau_cr)
        self.bounds = bounds

    @classmethod
    def from_config(cls, config) -> "JDE":
        return cls(population=config.de_population, tau_f=config.de_tau_f,
                   tau_cr=config.de_tau_cr, bounds=config.bounds)

    def init(self, problem, archive, rng) -> None:
        self.lower, self.upper = ops.box_arrays(problem.lower, problem.upper, archive.dtype)
        self.x, self.fitness = seed_population(archive, self.population, rng, self.lower, self.upper,
                                               getattr(problem, "integer", None))
        n = self.population
        self.f_scale = np.full(n, 0.5)
        self.cr = np.full(n, 0.9)
        self._setup_step(self.x)

    def _setup_step(self, x: np.ndarray) -> None:
        """What the compiled step takes besides the state: the box as contiguous arrays, the
        box mode's code, the trial buffers (allocated once)."""
        self._lower, self._upper = (np.ascontiguousarray(a) for a in (self.lower, self.upper))
        self._mode = ops.bound_code(self.bounds)
        self._trial = np.empty_like(x)
        self._trial_f, self._trial_cr = np.empty(len(x)), np.empty(len(x))
        self._start = CounterStart()

    def ask(self, rng) -> np.ndarray:
        """The generation's trials (``rng``: StreamKeys or a Generator, whose counter
        blocks it takes); the array is reused by the next ask."""
        n, dim = self.x.shape
        key, base = self._start(rng, de_step.jde_blocks(n, dim))
        de_step.jde_trials(self.x, self.f_scale, self.cr, self.tau_f, self.tau_cr, self._lower, self._upper,
                           self._mode, key, base, self._trial, self._trial_f, self._trial_cr)
        return self._trial

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        genomes, fitness = np.asarray(genomes, self.x.dtype), np.asarray(fitness, np.float64)
        de_step.jde_select(genomes, fitness, self._trial_f, self._trial_cr, self.x, self.fitness,
                           self.f_scale, self.cr)

    def migrate_in(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Immigrants replace the worst members they beat (best immigrant vs worst member)."""
        order_in = np.lexsort((np.arange(len(fitness)), fitness))
        order_pop = np.lexsort((np.arange(len(self.fitness)), self.fitness))[::-1]
        k = min(len(order_in), len(order_pop))
        better = fitness[order_in[:k]] < self.fitness[order_pop[:k]]
        src, dst = order_in[:k][better], order_pop[:k][better]
        self.x[dst] = genomes[src]
        self.fitness[dst] = fitness[src]

    def best(self) -> tuple[np.ndarray, float]:
        i = int(np.argmin(self.fitness))
        return self.x[i].copy(), float(self.fitness[i])

    def state_dict(self) -> dict:
        return {"x": self.x.copy(), "fitness": self.fitness.copy(),
                "f_scale": self.f_scale.copy(), "cr": self.cr.copy()}

    def load_state_dict(self, state: dict) -> None:
        x = np.asarray(state["x"])
        if x.shape != self.x.shape or x.dtype != self.x.dtype:
            raise ValueError(f"expected DE population of shape {self.x.shape} and dtype {self.x.dtype}, "
                             f"got {x.shape} {x.dtype}")
        self.x[...] = x
        self.fitness[...] = state["fitness"]
        self.f_scale[...] = state["f_scale"]
        self.cr[...] = state["cr"]
