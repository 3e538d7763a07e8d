"""The archive GA: breed from the island's elite archive, keep the best.

Per generation: pick ``batch_size`` parent pairs from the archive (tournament,
uniform or rank selection), cross them over (interpolation ``omega*a + (1-omega)*b``
by default), mutate a few genes of each child with a Gaussian step and put them back
in the box. The island then merges the children into the archive ((mu + lambda)
selection with mu = capacity).

Step size ``sigma`` (relative to the box width), two controls:

* ``success`` (default): a success rule. ``p`` = fraction of the mutated children
  better than the archive's median member; ``sigma *= exp(0.5 (p - 0.2))`` each
  generation, so steps grow while more than a fifth of the children succeed and
  shrink otherwise. All children of a generation share ``sigma``.
* ``self``: mutative self-adaptation. Each child carries its own step
  ``sigma * exp(tau * N(0, 1))``; after evaluation ``sigma`` becomes the geometric
  mean of the steps of the best quarter of the mutated children.

With sparse mutation (one gene per child on average, 60,000 evaluations, shifted
10- to 30-D problems; 300,000 on 1000-D sphere) the success rule ended 4x (1000-D
sphere) to 10^5..10^8x (ackley, ellipsoid, griewank) lower than self-adaptation and
matched it with dense mutation, hence the default.

Mutation rate: by default ``min(1, 10/dim)`` per gene, i.e. about ten genes per
child: every gene for small problems, sparse (cheap) for large ones.

With interpolation crossover the crossover, mutation and box handling run in one
fused Numba kernel (:func:`mpievo.evo.operators.breed`); other crossovers run the
same operators one after the other.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from .. import operators as ops

_SIGMA_RANGE = (1e-30, 1.0)
STEP_ADAPTATIONS = ("success", "self")
SUCCESS_TARGET = 0.2
SUCCESS_RATE = 0.5
GENES_PER_CHILD = 10.0  # default mutation rate: min(1, GENES_PER_CHILD / dim)


class GeneticAlgorithm:
    """Archive GA (see the module docstring); arguments as in :class:`EngineConfig`."""

    name = "ga"

    def __init__(self, *, batch_size: int = 128, selection: str = "tournament",
                 tournament_size: int = 2, rank_pressure: float = 1.5,
                 crossover: str = "interpolate", omega: float | None = None,
                 swap_prob: float = 0.5, blend_alpha: float = 0.5, sbx_eta: float = 15.0,
                 mutation_rate: float | None = None, mutation_sigma: float = 0.1,
                 sigma_tau: float | None = None, step_adaptation: str = "success",
                 bounds: str = "clip"):
        if step_adaptation not in STEP_ADAPTATIONS:
            raise ValueError(f"expected step_adaptation among {STEP_ADAPTATIONS}, got {step_adaptation!r}")
        if crossover not in ops.CROSSOVERS:
            raise ValueError(f"expected crossover among {ops.CROSSOVERS}, got {crossover!r}")
        if selection not in ops.SELECTIONS:
            raise ValueError(f"expected selection among {ops.SELECTIONS}, got {selection!r}")
        self.batch_size = int(batch_size)
        self.select = {
            "uniform": ops.uniform_selection,
            "tournament": partial(ops.tournament_selection, size=tournament_size),
            "rank": partial(ops.rank_selection, pressure=rank_pressure),
        }[selection]
        self.crossover_name = crossover
        self.omega = omega
        self.crossover = {
            "interpolate": partial(ops.interpolate_crossover, omega=omega),
            "uniform": partial(ops.uniform_crossover, swap_prob=swap_prob),
            "blend": partial(ops.blend_crossover, alpha=blend_alpha),
            "sbx": partial(ops.sbx_crossover, eta=sbx_eta),
        }[crossover]
        self.mutation_rate = mutation_rate
        self.initial_sigma = float(mutation_sigma)
        self.sigma_tau = sigma_tau
        self.step_adaptation = step_adaptation
        self.bounds = bounds
        self.sigma = self.initial_sigma
        self.archive = None

    @classmethod
    def from_config(cls, config) -> "GeneticAlgorithm":
        """Build from a resolved :class:`~mpievo.evo.config.EngineConfig`."""
        return cls(batch_size=config.batch_size, selection=config.selection,
                   tournament_size=config.tournament_size, rank_pressure=config.rank_pressure,
                   crossover=config.crossover, omega=config.omega, swap_prob=config.swap_prob,
                   blend_alpha=config.blend_alpha, sbx_eta=config.sbx_eta,
                   mutation_rate=config.mutation_rate, mutation_sigma=config.mutation_sigma,
                   sigma_tau=config.sigma_tau, step_adaptation=config.step_adaptation,
                   bounds=config.bounds)

    def init(self, problem, archive, rng) -> None:
        self.archive = archive
        dim = archive.dim
        self.rate = (min(1.0, GENES_PER_CHILD / dim) if self.mutation_rate is None
                     else float(self.mutation_rate))
        mutated = max(1.0, self.rate * dim)
        self.tau = 1.0 / math.sqrt(2.0 * mutated) if self.sigma_tau is None else float(self.sigma_tau)
        self.lower, self.upper = ops.box_arrays(problem.lower, problem.upper, archive.dtype)
        self.scale = (self.upper - self.lower).astype(archive.dtype)
        self.sigma = self.initial_sigma
        self._children = np.empty((self.batch_size, dim), archive.dtype)
        self._steps = np.empty(0)
        self._counts = np.empty(0, np.int64)

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """Draw order: 2n parents (a then b), step sizes (``self`` only), crossover, (box), mutation."""
        n, archive = self.batch_size, self.archive
        genomes = archive.genomes
        parents = self.select(archive.fitness, 2 * n, rng)
        idx_a, idx_b = parents[:n], parents[n:]
        if self.step_adaptation == "self":
            steps = ops.self_adapt_steps(self.sigma, n, rng, tau=self.tau)
        else:
            steps = np.full(n, self.sigma)
        out = self._children
        if self.crossover_name == "interpolate":
            _, counts = ops.breed(genomes, idx_a, idx_b, rng, self.lower, self.upper, out,
                                  omega=self.omega, rate=self.rate, steps=steps,
                                  scale=self.scale, bounds=self.bounds)
        else:
            self.crossover(genomes, idx_a, idx_b, rng, self.lower, self.upper, out)
            ops.apply_bounds(out, self.lower, self.upper, rng, mode=self.bounds)
            counts = ops.gaussian_mutation(out, rng, self.lower, self.upper, rate=self.rate,
                                           steps=steps, scale=self.scale, bounds=self.bounds)
        self._steps, self._counts = steps, counts
        return out

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Adapt ``sigma`` (call before the children enter the archive)."""
        mutated = np.flatnonzero(self._counts)
        if len(mutated) == 0:
            return
        if self.step_adaptation == "self":
            k = max(1, len(mutated) // 4)
            best = mutated[np.argpartition(fitness[mutated], k - 1)[:k]]
            sigma = math.exp(float(np.mean(np.log(self._steps[best]))))
        else:
            members = self.archive.fitness
            reference = np.partition(members, len(members) // 2)[len(members) // 2]  # (upper) median
            success = np.count_nonzero(fitness[mutated] < reference) / len(mutated)
            sigma = self.sigma * math.exp(SUCCESS_RATE * (success - SUCCESS_TARGET))
        self.sigma = min(max(sigma, _SIGMA_RANGE[0]), _SIGMA_RANGE[1])

    def best(self) -> tuple[np.ndarray, float]:
        i = self.archive.best_index()
        return self.archive.genomes[i].copy(), float(self.archive.fitness[i])

    def state_dict(self) -> dict:
        return {"sigma": float(self.sigma)}

    def load_state_dict(self, state: dict) -> None:
        self.sigma = float(state["sigma"])
