"""CMA-ES on an island: an own numpy CMA-ES with IPOP/BIPOP restarts.

The strategy (:mod:`.cmaes_core`) is Hansen's (mu/mu_w, lambda)-CMA-ES with active
covariance update; the restart policies are in :mod:`.cmaes_restarts`. The first run
starts at the archive's best member with step ``sigma0`` (relative to the box width
per gene) and ``popsize`` samples (default ``4 + floor(3 ln dim)``). When a
termination criterion holds (tolfun, tolfunhist, tolx, conditioncov, noeffectcoord,
noeffectaxis, stagnation) the next ``ask`` restarts from a uniformly random point of
the box under the restart policy (``ipop`` by default), counted in ``restarts``.

Told points are the scored points: ``ask`` clips the samples into the box rounded
inwards to the archive's dtype and returns them in that dtype; ``tell`` updates with
exactly these genomes (cast back to float64), so a float32 island never tells the
strategy points it did not evaluate.

Box handling: clipping, and the clipped points are what the strategy learns from
(Lamarckian repair), told as injected solutions (their Mahalanobis step shortened,
see :mod:`.cmaes_core`). Chosen over pycma's boundary transformation or penalty
because the archive then holds exactly the scored points, the mean (a convex
combination of in-box points) never leaves the box, no penalty weight needs
adapting, and a repaired point cannot inflate sigma or C.

Integer genes (``problem.integer``): CMA-ES with margin (Hamano et al., GECCO 2022),
its mean correction. The island scores and keeps the samples with those genes rounded,
but the strategy learns from its continuous samples (rounded points would collapse the
variance of those genes onto a lattice); after each update the mean of an integer gene
is moved towards the nearest rounding threshold (``k +- 1/2``, on the side where the box
has a neighbour) until the marginal probability of crossing it is at least the margin
``alpha = 1 / (dim * popsize)``: ``|m - t| <= z_(1-alpha) sigma scale sqrt(C_jj)``. So
an integer gene can never freeze at one value while sigma shrinks. For binary genes
this is the paper's correction; for genes with neighbours on both sides the paper also
widens the gene's scale (its diagonal matrix ``A``), which we do not: only the nearer
threshold keeps the margin.

Immigrants (:meth:`CMAES.migrate_in`): those better than anything the current run
has told are kept, the best ``max(1, mu // 2)``, and join the next ``tell`` as
injected solutions in place of the worst samples (no re-evaluation). They pull the
mean by at most one typical step, so a good immigrant steers the run without
collapsing its distribution. A restart drops immigrants still pending.

Randomness: only from the ``rng`` given to ``ask`` (the generation's keyed stream):
the restart policy's draws, the new start point (``dim`` uniforms), then the
samples. ``state_dict`` is plain arrays and scalars (nothing pickled): the run
(mean, sigma, C, its eigensystem, the paths, fitness history), the restart counters
and the pending immigrants.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from .. import operators as ops
from .cmaes_core import Strategy, default_popsize
from .cmaes_restarts import POLICIES, Schedule, restart

#: the largest population a restart may reach when ``max_popsize`` is None, as a
#: multiple of the first (nine doublings, the IPOP limit of Hansen 2009)
DEFAULT_MAX_GROWTH = 2 ** 9
_RUN_KEYS = ("popsize", "mean", "sigma", "sigma0", "cov", "basis", "axes", "path_c", "path_sigma",
             "generation", "eigen_generation", "best_history", "median_history", "last_range",
             "best_fitness")


class CMAES:
    """CMA-ES island algorithm (see the module docstring).

    Args:
        popsize: samples of the first run; None for ``4 + floor(3 ln dim)``.
        sigma0: initial step relative to the box width, in (0, 1].
        restarts: restart policy, ``ipop``, ``bipop`` or ``none`` (same population).
        popsize_growth: population factor per large-regime restart (>= 1).
        max_popsize: the largest population restarts may reach; None for
            ``DEFAULT_MAX_GROWTH`` times the first.

    Example::

        from mpievo.evo import EngineConfig, Island, make_problem
        config = EngineConfig(algorithm="cmaes", cma_restarts="bipop")
        island = Island(0, make_problem("rastrigin", dim=10), config)
        island.run(100).best()             # or mpievo.minimize(..., algorithm="cmaes")
    """

    name = "cmaes"

    def __init__(self, *, popsize: int | None = None, sigma0: float = 0.3, restarts: str = "ipop",
                 popsize_growth: float = 2.0, max_popsize: int | None = None):
        if popsize is not None and (isinstance(popsize, bool) or not isinstance(popsize, (int, np.integer))
                                    or popsize < 2):
            raise ValueError(f"expected popsize to be None or an int >= 2, got {popsize!r}")
        if not 0.0 < float(sigma0) <= 1.0:
            raise ValueError(f"expected sigma0 in (0, 1], got {sigma0!r}")
        if restarts not in POLICIES:
            raise ValueError(f"expected restarts among {sorted(POLICIES)}, got {restarts!r}")
        if not float(popsize_growth) >= 1.0:
            raise ValueError(f"expected popsize_growth >= 1, got {popsize_growth!r}")
        if max_popsize is not None and (isinstance(max_popsize, bool)
                                        or not isinstance(max_popsize, (int, np.integer)) or max_popsize < 2):
            raise ValueError(f"expected max_popsize to be None or an int >= 2, got {max_popsize!r}")
        self.popsize = None if popsize is None else int(popsize)
        self.sigma0 = float(sigma0)
        self.restart_policy = restarts
        self.popsize_growth = float(popsize_growth)
        self.max_popsize = None if max_popsize is None else int(max_popsize)

    @classmethod
    def from_config(cls, config) -> "CMAES":
        return cls(popsize=config.cma_popsize, sigma0=config.cma_sigma0, restarts=config.cma_restarts,
                   popsize_growth=config.cma_popsize_growth, max_popsize=config.cma_max_popsize)

    @property
    def restarts(self) -> int:
        """Restarts since ``init``."""
        return self.schedule.restarts

    def init(self, problem, archive, rng) -> None:
        self.archive = archive
        self.dtype = archive.dtype
        self.lower, self.upper = problem.lower, problem.upper
        self.scale = np.array(problem.width)
        low, high = ops.box_arrays(problem.lower, problem.upper, archive.dtype)
        self._low, self._high = low.astype(np.float64), high.astype(np.float64)
        base = self.popsize or default_popsize(archive.dim)
        cap = self.max_popsize or base * DEFAULT_MAX_GROWTH
        self.schedule = Schedule(base, self.popsize_growth, max(cap, base))
        start = archive.genomes[archive.best_index()].astype(np.float64)
        self.strategy = Strategy(start, self.sigma0, base, self.scale)
        self._clear_immigrants()
        self._repaired = None
        self.integer = getattr(problem, "integer", None)     # CMA-ES with margin (module docstring)
        self._samples = None

    def start_local(self, sigma: float) -> None:
        """Replace the current run by a local one: from the archive's best member, step
        ``sigma`` (box-relative), the first run's population; the restart counters stay
        (a portfolio's finishing run, :mod:`mpievo.rules.budget`). Draws nothing.

        Example::

            from mpievo.evo import EngineConfig, Island, make_problem
            island = Island(0, make_problem("sphere", dim=5), EngineConfig(algorithm="cmaes")).run(20)
            island.algorithm.start_local(1e-4)        # polish the best found so far
        """
        start = self.archive.genomes[self.archive.best_index()].astype(np.float64)
        self.strategy = Strategy(start, float(sigma), self.schedule.base, self.scale)
        self._clear_immigrants()

    def _clear_immigrants(self) -> None:
        self._immigrants = np.empty((0, len(self.scale)))
        self._immigrant_fitness = np.empty(0)

    def restart(self, rng: np.random.Generator) -> None:
        """End the current run and start the next one now, as a termination criterion
        would (the policy's population and step, a uniformly random start; the draws of
        ``rng``): a portfolio restarting a losing island.

        Example::

            from mpievo.evo import EngineConfig, Island, make_problem
            from mpievo.evo.streams import stream
            island = Island(0, make_problem("rastrigin", dim=5), EngineConfig(algorithm="cmaes")).run(20)
            island.algorithm.restart(stream(0, 0, 21, "restart"))
        """
        self._restart(rng)

    def _restart(self, rng: np.random.Generator) -> None:
        run = restart(self.schedule, self.restart_policy, rng)
        start = rng.uniform(self.lower, self.upper)
        self.strategy = Strategy(start, self.sigma0 * run.sigma_factor, run.popsize, self.scale)
        self._clear_immigrants()

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        if self.strategy.stop_reason(self.dtype):
            self._restart(rng)
        x = self.strategy.ask(rng)
        self._repaired = np.any((x < self._low) | (x > self._high), axis=1)
        np.clip(x, self._low, self._high, out=x)
        self._samples = x if self.integer is not None else None    # the island rounds a copy
        return x.astype(self.dtype)

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        if self._repaired is None:
            raise RuntimeError("expected ask() before tell(), got no pending batch")
        if len(genomes) != len(self._repaired):
            raise ValueError(f"expected the {len(self._repaired)} genomes of the last ask, got {len(genomes)}")
        x = np.asarray(genomes, np.float64)          # exactly the scored (rounded) points
        if self._samples is not None:                # integer genes: the continuous samples
            x = x.copy()
            x[:, self.integer] = self._samples[:, self.integer]
        fitness = np.asarray(fitness, np.float64)
        injected = self._repaired
        if len(self._immigrant_fitness):
            x = np.concatenate([x, self._immigrants])
            fitness = np.concatenate([fitness, self._immigrant_fitness])
            injected = np.concatenate([injected, np.ones(len(self._immigrant_fitness), bool)])
            keep = np.argsort(fitness, kind="stable")[:len(genomes)]   # the worst samples make room
            x, fitness, injected = x[keep], fitness[keep], injected[keep]
        self.strategy.tell(x, fitness, injected)
        if self.integer is not None:
            keep_margin(self.strategy, self.integer, self._low, self._high)
        self.schedule.count(len(genomes))
        self._clear_immigrants()
        self._repaired = None

    def migrate_in(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Keep the immigrants better than the run's best for the next ``tell``."""
        better = np.asarray(fitness) < self.strategy.best_fitness
        pool = np.concatenate([self._immigrants, np.asarray(genomes, np.float64)[better]])
        pool_fitness = np.concatenate([self._immigrant_fitness, np.asarray(fitness, np.float64)[better]])
        chosen = np.argsort(pool_fitness, kind="stable")[:max(1, self.strategy.p.mu // 2)]
        self._immigrants = np.clip(pool[chosen], self._low, self._high)
        self._immigrant_fitness = pool_fitness[chosen]

    def best(self) -> tuple[np.ndarray, float]:
        i = self.archive.best_index()
        return self.archive.genomes[i].copy(), float(self.archive.fitness[i])

    def state_dict(self) -> dict:
        state = self.strategy.state_dict()
        state.update(self.schedule.state_dict())
        state["immigrants"] = self._immigrants.copy()
        state["immigrant_fitness"] = self._immigrant_fitness.copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` exactly.

        Raises:
            ValueError: keys missing (e.g. a checkpoint of the former pickled cma
                strategy, which is never unpickled) or arrays of the wrong shape.
        """
        required = _RUN_KEYS + tuple(self.schedule.state_dict()) + ("immigrants", "immigrant_fitness")
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"expected CMA-ES state keys {missing}, got a state with keys {sorted(state)}")
        self.strategy = Strategy.from_state(state, self.scale)
        self.schedule.load_state_dict(state)
        immigrants = np.array(state["immigrants"], np.float64)
        fitness = np.array(state["immigrant_fitness"], np.float64)
        if immigrants.shape != (len(fitness), len(self.scale)):
            raise ValueError(f"expected CMA-ES immigrants of shape ({len(fitness)}, {len(self.scale)}), "
                             f"got {immigrants.shape}")
        self._immigrants, self._immigrant_fitness = immigrants, fitness
        self._repaired = None


def keep_margin(strategy, integer: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
    """CMA-ES with margin's mean correction (module docstring), in place: each integer gene's
    mean at most ``z_(1 - alpha)`` marginal standard deviations from its nearer rounding
    threshold, ``alpha = 1 / (dim * popsize)``.

    Example::

        keep_margin(cmaes.strategy, np.array([0, 3]), low, high)   # genes 0 and 3 integer
    """
    p = strategy.p
    reach = NormalDist().inv_cdf(1.0 - 1.0 / (p.dim * p.popsize))
    mean = strategy.mean[integer]
    std = strategy.sigma * strategy.scale[integer] * np.sqrt(np.diagonal(strategy.cov)[integer])
    value = np.clip(np.rint(mean), np.ceil(low[integer]), np.floor(high[integer]))
    below = np.where(value > np.ceil(low[integer]), value - 0.5, -np.inf)      # thresholds with a neighbour
    above = np.where(value < np.floor(high[integer]), value + 0.5, np.inf)
    threshold = np.where(mean - below <= above - mean, below, above)
    finite = np.isfinite(threshold)
    gap = mean - threshold
    far = finite & (np.abs(gap) > reach * std)
    strategy.mean[integer[far]] = threshold[far] + np.sign(gap[far]) * reach * std[far]
