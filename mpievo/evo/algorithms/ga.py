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

With interpolation crossover and tournament or uniform selection on a host archive
of genomes below :data:`~mpievo.evo.operators.COUNTER_DIM` genes, a generation is one
compiled step (:func:`mpievo.kernels.ga_step.breed_generation`): parent selection,
per-child counter-based draws (keyed by the generation's stream, see
:mod:`mpievo.kernels.ga_step`), crossover, mutation and box in one dispatch, and the
step-size rule after evaluation another (:func:`~mpievo.kernels.ga_step.adapt_step`,
which every configuration uses). Other settings (rank selection, other crossovers,
device or recipe rows, larger genomes) draw from the numpy stream and run
:func:`mpievo.evo.operators.breed` or the operators one after the other.
Half-precision archives (``engine.dtype`` bfloat16 or float16) breed float32 copies
of the parents used and round each child once (:mod:`mpievo.evo.half`).

Restarts (IPOP-like, on by default). The success rule shrinks ``sigma`` until the
population sits in one local minimum; on a multimodal problem nothing improves
after that. A :class:`~mpievo.evo.stagnation.StagnationMonitor` watches the best
and the median fitness of the breeding members; after ``stagnation_patience``
generations in which neither improved by more than ``stagnation_tol`` times the
*fitness scale* -- the spread ``median - best`` of the first bred generation since
the start or the last restart, see :mod:`~mpievo.evo.stagnation` -- the GA restarts
at its next ``ask``. Differences of fitness values only: the same run on ``f`` and
``f + c`` restarts at the same generations.

1. the archive keeps its best ``restart_elite`` members (the best is never lost),
   and its limit -- the population in use -- grows by ``restart_growth``, up to
   the archive's capacity (start small with ``population``): a larger population
   settles in a better minimum;
2. uniform random genomes fill the freed slots (one batch per generation; these
   generations do not count towards stagnation), and ``sigma`` goes back to
   ``mutation_sigma``;
3. until the next restart parents come only from the *fresh pool*: members born on
   this island since the restart, and members from anywhere better than the best at
   the restart by ``restart_margin`` times the fitness scale of the run that stalled
   (a new minimum, found here or on another island). The kept elite and immigrants
   from islands still in the old minimum stay out of breeding -- within a few
   generations they would take the fresh population over and lead it back into the
   old minimum -- and members outside the pool beyond the best ``restart_elite`` of
   them are dropped, so that they cannot crowd the archive.

Immigrants better than the margin join the pool and breed at once, and
interpolation crossover between them and the fresh members explores the whole
segment between two minima, so no step-size boost is needed for them.

The default job of ``mpievo run`` (100-D shifted rotated rastrigin, 2 islands of a
256..8192 population, 32,000 generations) ends near 5-8 instead of stalling at
79.6 after 2% of the run with one 256-member population.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from mpievo.kernels import ga_step
from mpievo.kernels.counter_operators import rate_threshold

from .. import half
from .. import operators as ops
from ..stagnation import StagnationMonitor
from ..streams import CounterStart, as_generator

STEP_ADAPTATIONS = ("success", "self")
GENES_PER_CHILD = 10.0  # default mutation rate: min(1, GENES_PER_CHILD / dim)


def breeding_box(problem, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The host ``(lower, upper, scale)`` the GA breeds rows of ``dtype`` in: the box in
    the rows' dtype, rounded inwards (:func:`~mpievo.evo.operators.box_arrays`), and the
    box's width; half-precision rows breed in float32 (:mod:`mpievo.evo.half`): the box
    rounded inwards in the half type, widened exactly. Uniform boxes stay broadcast views.

    Example:
        >>> from mpievo.evo import make_problem
        >>> lower, upper, scale = breeding_box(make_problem("sphere", dim=3), "bfloat16")
        >>> lower.dtype.name, scale.dtype.name, scale.shape
        ('float32', 'float32', (3,))
    """
    lower, upper = ops.box_arrays(problem.lower, problem.upper, half.genome_dtype(dtype))
    compute = half.compute_dtype(dtype)
    if half.is_half(dtype):
        lower, upper = ops.cast_bound(lower, compute), ops.cast_bound(upper, compute)
    return lower, upper, ops.cast_bound(problem.width, compute)   # uniform: a broadcast view


class GeneticAlgorithm:
    """Archive GA (see the module docstring); arguments as in :class:`EngineConfig`.

    Example::

        from mpievo.evo import EngineConfig, Island, make_problem
        island = Island(0, make_problem("rastrigin", dim=10), EngineConfig(algorithm="ga", batch_size=64))
        island.run(100).best()             # (genome, fitness); or mpievo.minimize(..., algorithm="ga")
    """

    name = "ga"
    takes_stream_keys = True   # ask() gets StreamKeys: the compiled step needs no numpy generator

    def __init__(self, *, batch_size: int = 128, selection: str = "tournament",
                 tournament_size: int = 2, rank_pressure: float = 1.5,
                 crossover: str = "interpolate", omega: float | None = None,
                 swap_prob: float = 0.5, blend_alpha: float = 0.5, sbx_eta: float = 15.0,
                 mutation_rate: float | None = None, mutation_sigma: float = 0.1,
                 sigma_tau: float | None = None, step_adaptation: str = "success",
                 bounds: str = "clip", stagnation_patience: int = 200, stagnation_tol: float = 1e-4,
                 restart_elite: int = 1, restart_growth: float = 2.0, restart_margin: float = 1e-3):
        if step_adaptation not in STEP_ADAPTATIONS:
            raise ValueError(f"expected step_adaptation among {STEP_ADAPTATIONS}, got {step_adaptation!r}")
        if crossover not in ops.CROSSOVERS:
            raise ValueError(f"expected crossover among {ops.CROSSOVERS}, got {crossover!r}")
        if selection not in ops.SELECTIONS:
            raise ValueError(f"expected selection among {ops.SELECTIONS}, got {selection!r}")
        if isinstance(restart_elite, bool) or not isinstance(restart_elite, int) or restart_elite < 1:
            raise ValueError(f"expected restart_elite to be an int >= 1, got {restart_elite!r}")
        if not restart_growth >= 1.0:
            raise ValueError(f"expected restart_growth >= 1, got {restart_growth!r}")
        if not restart_margin >= 0.0:
            raise ValueError(f"expected restart_margin >= 0, got {restart_margin!r}")
        self.batch_size = int(batch_size)
        # contestants per parent of the compiled step (None: rank selection, not compiled)
        self._tournament = {"tournament": int(tournament_size), "uniform": 1}.get(selection)
        self.ops = ops  # the host's operators; init() switches to the device's for a device archive
        self.select = {
            "uniform": ops.uniform_selection,
            "tournament": partial(ops.tournament_selection, size=tournament_size),
            "rank": partial(ops.rank_selection, pressure=rank_pressure),
        }[selection]
        self.crossover_name = crossover
        self.omega = omega
        self._crossover_params = {"interpolate": {"omega": omega}, "uniform": {"swap_prob": swap_prob},
                                  "blend": {"alpha": blend_alpha}, "sbx": {"eta": sbx_eta}}[crossover]
        self._bind_operators(ops)
        self.mutation_rate = mutation_rate
        self.initial_sigma = float(mutation_sigma)
        self.sigma_tau = sigma_tau
        self.step_adaptation = step_adaptation
        self.bounds = bounds
        self.monitor = StagnationMonitor(int(stagnation_patience), float(stagnation_tol))
        self.restart_elite = restart_elite
        self.restart_growth = float(restart_growth)
        self.restart_margin = float(restart_margin)
        self.sigma = self.initial_sigma
        self.archive = None
        self._half = None    # HalfBreeding of a half-precision archive (init)
        self._reset_restarts()

    def _bind_operators(self, module) -> None:
        """Use the operators of ``module`` (:mod:`mpievo.evo.operators` or its device twin)."""
        self.ops = module
        crossover = getattr(module, f"{self.crossover_name}_crossover")
        self.crossover = partial(crossover, **self._crossover_params)

    @classmethod
    def from_config(cls, config) -> "GeneticAlgorithm":
        """Build from a resolved :class:`~mpievo.evo.engine_config.EngineConfig`."""
        return cls(batch_size=config.batch_size, selection=config.selection,
                   tournament_size=config.tournament_size, rank_pressure=config.rank_pressure,
                   crossover=config.crossover, omega=config.omega, swap_prob=config.swap_prob,
                   blend_alpha=config.blend_alpha, sbx_eta=config.sbx_eta,
                   mutation_rate=config.mutation_rate, mutation_sigma=config.mutation_sigma,
                   sigma_tau=config.sigma_tau, step_adaptation=config.step_adaptation,
                   bounds=config.bounds, stagnation_patience=config.stagnation_patience,
                   stagnation_tol=config.stagnation_tol, restart_elite=config.restart_elite,
                   restart_growth=config.restart_growth, restart_margin=config.restart_margin)

    def _reset_restarts(self) -> None:
        self.restarts = 0
        self.restart_best = math.inf   # best fitness when the last restart began
        self.restart_bar = math.inf    # members from elsewhere better than this join the pool
        self.birth_floor = 0           # members born here at or after it are fresh
        self.refilling = False         # sampling uniformly until the archive is full again
        self.monitor.reset()
        self._pool = None

    def init(self, problem, archive, rng) -> None:
        self.archive = archive
        dim = getattr(problem, "genome_dim", archive.dim)  # genes, also of encoded rows
        self.rate = (min(1.0, GENES_PER_CHILD / dim) if self.mutation_rate is None
                     else float(self.mutation_rate))
        mutated = max(1.0, self.rate * dim)
        self.tau = 1.0 / math.sqrt(2.0 * mutated) if self.sigma_tau is None else float(self.sigma_tau)
        if getattr(problem, "operators", None) is not None:   # seeded rows: recipe operators
            self._bind_operators(problem.operators)
        elif archive.on_device:
            from .. import device_operators

            self._bind_operators(device_operators)
        else:
            self._bind_operators(ops)
        self._half = half.HalfBreeding(archive.dtype, on_device=archive.on_device) if half.is_half(
            archive.dtype) else None
        self.lower, self.upper, self.scale = (self.ops.place(a) for a in breeding_box(problem, archive.dtype))
        self.sigma = self.initial_sigma
        self._reset_restarts()
        self._children = self.ops.empty((self.batch_size, archive.dim), archive.dtype)
        self._steps = np.empty(0)
        self._counts = np.empty(0, np.int64)
        compiled = (not archive.on_device and getattr(problem, "operators", None) is None
                    and self.crossover_name == "interpolate"
                    and self._tournament is not None and not ops.counter_based(archive.dim))
        self._step = _CompiledStep(self, archive) if compiled else None

    # --- restarts ----------------------------------------------------------------
    def _restart(self) -> None:
        """Keep the elite, grow the population, and start a fresh pool (module docstring)."""
        archive = self.archive
        self.restart_best = float(archive.fitness.min())
        self.restart_bar = self.restart_best - self.monitor.scaled(self.restart_margin)
        self.birth_floor = int(archive.births.max()) + 1
        limit = min(archive.capacity, max(archive.limit, math.ceil(archive.limit * self.restart_growth)))
        archive.truncate(max(1, min(self.restart_elite, limit - 1)))
        archive.set_limit(limit)
        self.sigma = self.initial_sigma
        self.monitor.reset()
        self.refilling = True
        self.restarts += 1

    def breeding_pool(self) -> np.ndarray:
        """Archive slots parents may come from now: the fresh pool after a restart (see
        the module docstring), otherwise -- or while the pool is empty -- every member."""
        pool = np.flatnonzero(self._fresh_mask()) if self.restarts else np.empty(0, np.int64)
        return pool if len(pool) else np.arange(self.archive.size)

    def _fresh_mask(self) -> np.ndarray:
        archive = self.archive
        return (archive.fitness < self.restart_bar) | (
            (archive.origins == archive.island) & (archive.births >= self.birth_floor))

    def _fresh_pool(self) -> np.ndarray:
        """Slots of the parents after a restart (see the module docstring); drops the
        members outside the pool beyond the best ``restart_elite`` of them."""
        archive = self.archive
        fresh = self._fresh_mask()
        pool = np.flatnonzero(fresh)
        outsiders = len(fresh) - len(pool)
        if outsiders > self.restart_elite:
            stale = np.flatnonzero(~fresh)
            keep = stale[np.lexsort((stale, archive.fitness[stale]))[:self.restart_elite]]
            archive.retain(np.concatenate([pool, np.sort(keep)]))
            pool = np.arange(len(pool))
        return pool

    def _refill(self, rng: np.random.Generator) -> np.ndarray:
        """Uniform random genomes in the box (after a restart, while the archive has room)."""
        out = self.ops.uniform_genomes(rng, self.lower, self.upper, self._work())
        self._steps = np.empty(0)
        self._counts = np.zeros(len(out), np.int64)
        return self._rounded(out)

    def _work(self):
        """Where children are bred: the children, or float32 ones for half-precision rows."""
        return self._children if self._half is None else self._half.work(self._children.shape)

    def _rounded(self, out):
        """The children of ``out`` in the archive's dtype (half types: rounded once)."""
        return out if self._half is None else self._half.round_into(out, self._children)

    # --- ask / tell --------------------------------------------------------------
    def ask(self, rng) -> np.ndarray:
        """``rng``: a Generator or :class:`~mpievo.evo.streams.StreamKeys`. The compiled
        step draws from the counter-based generator (:mod:`mpievo.kernels.ga_step`).
        Otherwise the draw order is: 2n parents (a then b), step sizes (``self`` only),
        crossover, (box), mutation; right after a restart, while the archive has room:
        n * dim uniforms."""
        if self.monitor.stagnated:
            self._restart()
        n, archive = self.batch_size, self.archive
        self._pool = None
        if self.refilling:
            if archive.size < archive.limit:
                return self._refill(as_generator(rng))
            self.refilling = False
        if self.restarts:
            pool = self._fresh_pool()
            if len(pool):
                self._pool = pool
        if self._step is not None:
            out, self._steps, self._counts = self._step.breed(rng, self._work(), self._pool)
            return self._rounded(out)
        rng = as_generator(rng)
        if self._pool is None:
            parents = self.select(archive.fitness, 2 * n, rng)
        else:
            parents = self._pool[self.select(archive.fitness[self._pool], 2 * n, rng)]
        genomes = archive.genomes
        idx_a, idx_b = parents[:n], parents[n:]
        fused = (self._half is not None and self.crossover_name == "interpolate"
                 and self._half.fuses(archive.dim))   # one pass: mpievo.evo.half.HalfBreeding.breed
        if self._half is not None and not fused:   # float32 copies of the parents used
            genomes, idx_a, idx_b = self._half.parents(genomes, idx_a, idx_b)
        if self.step_adaptation == "self":
            steps = ops.self_adapt_steps(self.sigma, n, rng, tau=self.tau)
        else:
            steps = np.full(n, self.sigma)
        if fused:
            out, self._counts = self._half.breed(genomes, idx_a, idx_b, rng, self.lower, self.upper,
                                                 self._children, omega=self.omega, rate=self.rate,
                                                 steps=steps, scale=self.scale, bounds=self.bounds)
            self._steps = steps
            return out
        out = self._work()
        if self.crossover_name == "interpolate":
            _, counts = self.ops.breed(genomes, idx_a, idx_b, rng, self.lower, self.upper, out,
                                  omega=self.omega, rate=self.rate, steps=steps,
                                  scale=self.scale, bounds=self.bounds)
        else:
            self.crossover(genomes, idx_a, idx_b, rng, self.lower, self.upper, out)
            self.ops.apply_bounds(out, self.lower, self.upper, rng, mode=self.bounds)
            counts = self.ops.gaussian_mutation(out, rng, self.lower, self.upper, rate=self.rate,
                                           steps=steps, scale=self.scale, bounds=self.bounds)
        self._steps, self._counts = steps, counts
        return self._rounded(out)

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Adapt ``sigma`` and watch for stagnation (call before the children enter the archive)."""
        members = self._breeding_fitness()
        counts = self._counts if len(self._counts) else np.zeros(len(fitness), np.int64)
        steps = self._steps if len(self._steps) else np.full(len(fitness), self.sigma)
        # success rule against the (upper) median of the breeding members, or self-adaptation
        sigma, median, best = ga_step.adapt_step(fitness, counts, steps, members, self.sigma,
                                                 self.step_adaptation == "self")
        self.sigma = float(sigma)
        # The refill after a restart is not judged: it may take more generations than
        # the patience, and the monitor starts afresh with the first bred generation.
        if self.monitor.patience and not self.refilling:
            self.monitor.update(float(best), float(median))

    def _breeding_fitness(self) -> np.ndarray:
        """Fitness of the members parents come from (the fresh pool after a restart)."""
        if self._pool is not None:
            return self.archive.fitness[self._pool]
        if self.restarts:
            return self.archive.fitness[self._fresh_mask()]  # refilling, or an empty pool
        return self.archive.fitness

    def best(self) -> tuple[np.ndarray, float]:
        i = self.archive.best_index()
        return self.archive.row(i), float(self.archive.fitness[i])

    def state_dict(self) -> dict:
        state = {"sigma": float(self.sigma), "restarts": int(self.restarts),
                 "restart_best": float(self.restart_best), "restart_bar": float(self.restart_bar),
                 "birth_floor": int(self.birth_floor),
                 "refilling": bool(self.refilling)}
        state.update({f"stagnation_{k}": v for k, v in self.monitor.state_dict().items()})
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; states saved before restarts existed load as never
        restarted, and those saved before the fitness scale keep their relative margin
        and take the scale from their next generation."""
        self.sigma = float(state["sigma"])
        self.restarts = int(state.get("restarts", 0))
        self.restart_best = float(state.get("restart_best", math.inf))
        relative_bar = (self.restart_best - self.restart_margin * abs(self.restart_best)
                        if math.isfinite(self.restart_best) else math.inf)
        self.restart_bar = float(state.get("restart_bar", relative_bar))
        self.birth_floor = int(state.get("birth_floor", 0))
        self.refilling = bool(state.get("refilling", False))
        if "stagnation_stalled" in state:
            self.monitor.load_state_dict({k[len("stagnation_"):]: v for k, v in state.items()
                                          if k.startswith("stagnation_")})


class _CompiledStep:
    """The GA's generation as one compiled dispatch (module docstring): the box and the
    gene scale as contiguous arrays (no stride-0 views: the kernel's loads vectorise;
    a uniform box is read as two scalars), the mutation plan and the per-child outputs,
    allocated once. Half-precision rows: two dispatches around the widening of the
    parents used (:mod:`mpievo.evo.half`)."""

    def __init__(self, ga: GeneticAlgorithm, archive):
        dim, n = archive.dim, ga.batch_size
        compute = half.compute_dtype(archive.dtype)
        self.ga, self.archive = ga, archive
        self.lower, self.upper, self.scale = (np.ascontiguousarray(a, compute)
                                              for a in (ga.lower, ga.upper, ga.scale))
        self.uniform = bool(np.all(self.lower == self.lower[0]) and np.all(self.upper == self.upper[0]))
        self.mode = ops.bound_code(ga.bounds)
        self.threshold = np.uint64(rate_threshold(ga.rate))
        self.inv_log_q = 1.0 / math.log1p(-ga.rate) if 0.0 < ga.rate < 1.0 else 0.0
        self.dense = ga.rate >= ops.DENSE_RATE
        self.blocks = ga_step.generation_blocks(n, dim, self.mode, self.dense, ga._tournament)
        self.omega = -1.0 if ga.omega is None else float(ga.omega)
        self.idx_a, self.idx_b = np.empty(n, np.int64), np.empty(n, np.int64)
        self.omegas, self.steps = np.empty(n, compute), np.empty(n, compute)
        self.counts = np.empty(n, np.int64)
        self.everyone = np.empty(0, np.int64)
        self._start = CounterStart()

    def breed(self, rng, out: np.ndarray, pool) -> tuple:
        """Breed ``out`` from the archive's members (``rng``: StreamKeys or a Generator,
        whose counter blocks it takes; ``pool``: the slots parents may come from, None:
        all); returns (children, steps, counts)."""
        ga, archive = self.ga, self.archive
        key, base = self._start(rng, self.blocks)
        tau = ga.tau if ga.step_adaptation == "self" else 0.0
        pool = self.everyone if pool is None else pool
        plan = (self.lower, self.upper, self.scale, self.uniform, self.mode, self.threshold, self.inv_log_q,
                self.dense, key, base)
        draws = (self.idx_a, self.idx_b, self.omegas, self.steps)
        if ga._half is None:
            ga_step.breed_generation(archive.genomes, archive.fitness, pool, ga._tournament, self.omega,
                                     ga.sigma, tau, *plan, *draws, out, self.counts)
        else:
            ga_step.draw_children(archive.fitness, pool, ga._tournament, self.omega, ga.sigma, tau,
                                  archive.dim, self.mode, self.dense, key, base, *draws)
            genomes, idx_a, idx_b = ga._half.parents(archive.genomes, self.idx_a, self.idx_b)
            ga_step.breed_children(genomes, idx_a, idx_b, self.omegas, self.steps, *plan, out, self.counts)
        return out, self.steps, self.counts
