"""Success-history adaptive DE: SHADE (Tanabe & Fukunaga 2013), optionally with
L-SHADE's linear population size reduction (Tanabe & Fukunaga 2014).

Per generation, for every member ``x_i`` of the population:

1. pick a memory slot ``r_i`` uniformly among the ``H`` slots of the historical
   memories ``M_F`` and ``M_CR`` (all 0.5 at the start); draw
   ``CR_i ~ N(M_CR[r_i], 0.1)`` clipped to [0, 1] and ``F_i ~ Cauchy(M_F[r_i], 0.1)``,
   truncated to 1 above and drawn again while <= 0;
2. mutate with current-to-pbest/1 and the external archive ``A``:
   ``v = x_i + F_i (x_pbest - x_i) + F_i (x_r1 - x~_r2)``, ``x_pbest`` uniform among
   the ``max(2, round(p N))`` best members, ``x_r1`` a member other than ``x_i``,
   ``x~_r2`` a member or archived genome other than ``x_i`` and ``x_r1``;
3. cross binomially with ``x_i`` (at least gene ``j_rand`` from ``v``); a gene outside
   the box goes to the midpoint between the parent's gene and the violated bound
   (the paper's rule: it keeps the step's direction and never sticks to the bound).

A trial replaces its parent when not worse. Strict successes put the parent into
``A`` (random members leave while ``|A| > round(archive_rate N)``) and give their
``F_i``, ``CR_i`` and improvement ``d_i = f(parent) - f(trial)`` to the memory update:
with weights ``w = d / sum(d)``, slot ``k`` becomes the weighted Lehmer mean
``sum(w F^2) / sum(w F)`` (M_F) and the weighted arithmetic mean ``sum(w CR)``
(M_CR), then ``k`` moves on cyclically. Parents with +inf fitness (the fill-up below)
have no finite improvement and stay out of the update.

L-SHADE: with a budget of ``max_evaluations`` (this island's evaluations, its
initial population included), after each generation the population shrinks to
``round(N_init + (N_min - N_init) nfe / max_evaluations)`` (never below ``N_min``)
by dropping its worst members, so it reaches ``N_min`` when the budget is spent and
stays there. Without a budget (None) the size stays fixed: plain SHADE.

Default population (``population=None``): ``18 dim`` with a budget (L-SHADE's
``N_init``: the reduction needs a large start), else 100 (SHADE's ``N``: a fixed size
that converges in an open-ended island run). ``H = 6``, ``p = 0.11`` and
``archive_rate = 2.6`` are L-SHADE's tuned values. The memory update is SHADE's; the
L-SHADE extensions of it (Lehmer mean and a terminal value for CR) are not used.

A generation is one compiled step (:func:`mpievo.kernels.de_step.shade_trials`, whose
docstring maps its counter-based draws: F is drawn from the truncated Cauchy by inversion,
which has the law of redrawing while <= 0) and the selection another
(:func:`~mpievo.kernels.de_step.shade_select`, which also files the beaten parents in A;
A's row order is not kept, partners are drawn uniformly from it).

Like jDE the population is the algorithm's own: it starts from the best archive
members (random genomes with +inf fitness fill the rest) and takes immigrants through
:meth:`SHADE.migrate_in`. All randomness comes from the ``rng`` given to ``ask``;
the state is plain arrays and numbers.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import de_step
from mpievo.kernels.de_step import SCALE  # spread of the F (Cauchy) and CR (normal) samples

from .. import operators as ops
from ..streams import CounterStart
from .de import JDE, seed_population

SHADE_POPULATION = 100   # SHADE's N (no budget)
LSHADE_POPULATION_PER_DIM = 18   # L-SHADE's N_init / dim


def linear_size(evaluations: int, initial: int, minimum: int, budget: int | None) -> int:
    """L-SHADE's population size after ``evaluations``; ``initial`` without a budget."""
    if budget is None:
        return initial
    planned = initial + (minimum - initial) * min(evaluations, budget) / budget
    return max(minimum, int(np.rint(planned)))


class SHADE:
    """SHADE / L-SHADE island algorithm (see the module docstring).

    Args:
        population: initial population ``N_init``; None for the default above.
        memory: memory size ``H`` (>= 1).
        pbest: fraction ``p`` of the population that ``x_pbest`` comes from, in (0, 1].
        archive_rate: external archive size relative to the population (>= 0).
        min_population: ``N_min`` of the reduction (>= 4).
        max_evaluations: the island's evaluation budget for the reduction; None: none.

    Example::

        from mpievo.evo import EngineConfig, Island, make_problem
        config = EngineConfig(algorithm="shade", shade_max_evaluations=20_000)    # L-SHADE's reduction
        island = Island(0, make_problem("rastrigin", dim=10), config)
        island.run(100).best()             # or mpievo.minimize(..., algorithm="shade")
    """

    name = "shade"
    takes_stream_keys = True   # ask() gets StreamKeys: the compiled step needs no numpy generator

    def __init__(self, *, population: int | None = None, memory: int = 6, pbest: float = 0.11,
                 archive_rate: float = 2.6, min_population: int = 4, max_evaluations: int | None = None):
        for key, value, ok, expected in (
                ("population", population, population is None or _int_at_least(population, 4), "None or an int >= 4"),
                ("memory", memory, _int_at_least(memory, 1), "an int >= 1"),
                ("pbest", pbest, _number(pbest) and 0.0 < pbest <= 1.0, "a number in (0, 1]"),
                ("archive_rate", archive_rate, _number(archive_rate) and archive_rate >= 0.0, "a number >= 0"),
                ("min_population", min_population, _int_at_least(min_population, 4), "an int >= 4"),
                ("max_evaluations", max_evaluations, max_evaluations is None or _int_at_least(max_evaluations, 1),
                 "None or an int >= 1")):
            if not ok:
                raise ValueError(f"expected {key} to be {expected}, got {value!r}")
        if population is not None and population < min_population:
            raise ValueError(f"expected population >= min_population ({min_population}), got {population}")
        self.initial_population = population
        self.memory = int(memory)
        self.pbest = float(pbest)
        self.archive_rate = float(archive_rate)
        self.min_population = int(min_population)
        self.max_evaluations = max_evaluations

    @classmethod
    def from_config(cls, config) -> "SHADE":
        return cls(population=config.shade_population, memory=config.shade_memory, pbest=config.shade_pbest,
                   archive_rate=config.shade_archive_rate, min_population=config.shade_min_population,
                   max_evaluations=config.shade_max_evaluations)

    def start_size(self, dim: int) -> int:
        """``N_init`` for ``dim`` genes (see the module docstring)."""
        if self.initial_population is not None:
            return self.initial_population
        if self.max_evaluations is None:
            return max(SHADE_POPULATION, self.min_population)
        return max(LSHADE_POPULATION_PER_DIM * dim, self.min_population)

    def init(self, problem, archive, rng) -> None:
        n, dim = self.start_size(archive.dim), archive.dim
        self.n_init = n
        self.lower, self.upper = ops.box_arrays(problem.lower, problem.upper, archive.dtype)
        self.x, self.fitness = seed_population(archive, n, rng, self.lower, self.upper,
                                               getattr(problem, "integer", None))
        self._external, self.archived = np.empty((0, dim), archive.dtype), 0
        self._lower, self._upper = (np.ascontiguousarray(a) for a in (self.lower, self.upper))
        self._start, self._trial = CounterStart(), None
        self.memory_f = np.full(self.memory, 0.5)
        self.memory_cr = np.full(self.memory, 0.5)
        self.memory_index = 0
        self.evaluations = int(archive.size)   # the evaluated initial population
        self._pending = None

    def archive_cap(self, n: int) -> int:
        return int(np.rint(self.archive_rate * n))

    @property
    def external(self) -> np.ndarray:
        """The external archive ``A``: the genomes its rows in use hold (a view)."""
        return self._external[:self.archived]

    def ask(self, rng) -> np.ndarray:
        """The generation's trials (``rng``: StreamKeys or a Generator, whose counter
        blocks it takes); the array is reused by the next ask of the same size."""
        x = self.x
        n, dim = x.shape
        if self._trial is None or self._trial.shape != x.shape:   # L-SHADE shrinks the population
            self._trial = np.empty_like(x)
        top = max(2, int(np.rint(self.pbest * n)))
        best = np.argsort(self.fitness, kind="stable")[:top]
        f, cr, keys = np.empty(n), np.empty(n), np.empty(self.archived + n)
        key, base = self._start(rng, de_step.shade_blocks(n, dim, self.archived))
        de_step.shade_trials(x, self._external, self.archived, best, self.memory_f, self.memory_cr,
                             self._lower, self._upper, key, base, self._trial, f, cr, keys)
        self._pending = (f, cr, keys)
        return self._trial

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        if self._pending is None:
            raise RuntimeError("expected ask() before tell(), got no pending batch")
        f, cr, keys = self._pending
        self._pending = None
        if len(fitness) != len(self.fitness):
            raise ValueError(f"expected the {len(self.fitness)} genomes of the last ask, got {len(fitness)}")
        genomes, fitness = np.asarray(genomes, self.x.dtype), np.asarray(fitness, np.float64)
        n = len(fitness)
        self.evaluations += n
        size = linear_size(self.evaluations, self.n_init, self.min_population, self.max_evaluations)
        cap = self.archive_cap(size)
        self._reserve(max(self.archived, min(cap, self.archived + n)))
        success_f, success_cr, gains = np.empty(n), np.empty(n), np.empty(n)
        succeeded, self.archived = de_step.shade_select(genomes, fitness, f, cr, keys, self.x, self.fitness,
                                                        self._external, self.archived, cap,
                                                        success_f, success_cr, gains)
        if succeeded:
            new_f, new_cr = de_step.memory_update(success_f, success_cr, gains, succeeded)
            self.memory_f[self.memory_index] = new_f
            self.memory_cr[self.memory_index] = new_cr
            self.memory_index = (self.memory_index + 1) % self.memory
        self._shrink(size)

    def _reserve(self, rows: int) -> None:
        """At least ``rows`` rows for A, grown by doubling (no reallocation per generation) up
        to the largest A can be (that of the initial population)."""
        if rows > len(self._external):
            size = min(max(rows, 2 * len(self._external)), max(rows, self.archive_cap(self.n_init)))
            grown = np.empty((size, self.x.shape[1]), self.x.dtype)
            grown[:self.archived] = self.external
            self._external = grown

    def _shrink(self, size: int) -> None:
        """Keep the best ``size`` members (in their order); ties: the earlier member."""
        if size < len(self.fitness):
            keep = np.sort(np.argsort(self.fitness, kind="stable")[:size])
            self.x, self.fitness = self.x[keep], self.fitness[keep]

    def migrate_in(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Immigrants replace the worst members they beat, as in :meth:`JDE.migrate_in`."""
        JDE.migrate_in(self, genomes, fitness)

    def best(self) -> tuple[np.ndarray, float]:
        i = int(np.argmin(self.fitness))
        return self.x[i].copy(), float(self.fitness[i])

    def state_dict(self) -> dict:
        return {"x": self.x.copy(), "fitness": self.fitness.copy(), "archive": self.external.copy(),
                "memory_f": self.memory_f.copy(), "memory_cr": self.memory_cr.copy(),
                "memory_index": int(self.memory_index), "evaluations": int(self.evaluations)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` exactly (after ``init`` with the same settings).

        Raises:
            ValueError: keys missing, or arrays that do not fit these settings.
        """
        missing = [k for k in ("x", "fitness", "archive", "memory_f", "memory_cr", "memory_index", "evaluations")
                   if k not in state]
        if missing:
            raise ValueError(f"expected SHADE state keys {missing}, got a state with keys {sorted(state)}")
        x, fitness = np.asarray(state["x"]), np.asarray(state["fitness"], np.float64)
        external = np.asarray(state["archive"])
        dim, dtype = self.x.shape[1], self.x.dtype
        n = len(x)
        if x.shape != (n, dim) or x.dtype != dtype or not self.min_population <= n <= self.n_init \
                or fitness.shape != (n,):
            raise ValueError(f"expected a SHADE population of {self.min_population}..{self.n_init} x {dim} "
                             f"{dtype} with one fitness each, got {x.shape} {x.dtype} and {fitness.shape}")
        if external.ndim != 2 or external.shape[1] != dim or external.dtype != dtype:
            raise ValueError(f"expected a SHADE archive of shape (k, {dim}) {dtype}, got {external.shape} "
                             f"{external.dtype}")
        for key in ("memory_f", "memory_cr"):
            if np.shape(state[key]) != (self.memory,):
                raise ValueError(f"expected {key} of shape ({self.memory},), got {np.shape(state[key])}")
        self.x, self.fitness = x.copy(), fitness.copy()
        self._external, self.archived = external.copy(), len(external)
        self.memory_f = np.array(state["memory_f"], np.float64)
        self.memory_cr = np.array(state["memory_cr"], np.float64)
        self.memory_index = int(state["memory_index"])
        self.evaluations = int(state["evaluations"])
        self._pending = None


def _int_at_least(value, minimum: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= minimum


def _number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
