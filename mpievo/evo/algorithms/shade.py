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

Like jDE the population is the algorithm's own: it starts from the best archive
members (random genomes with +inf fitness fill the rest) and takes immigrants through
:meth:`SHADE.migrate_in`. All randomness comes from the ``rng`` given to ``ask``;
the state is plain arrays and numbers.
"""

from __future__ import annotations

import numpy as np

from .. import operators as ops
from .de import JDE, seed_population

SCALE = 0.1              # spread of the F (Cauchy) and CR (normal) samples
SHADE_POPULATION = 100   # SHADE's N (no budget)
LSHADE_POPULATION_PER_DIM = 18   # L-SHADE's N_init / dim


def lehmer_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """Weighted Lehmer mean ``sum(w v^2) / sum(w v)`` (SHADE's mean of F)."""
    return float(np.sum(weights * values * values) / np.sum(weights * values))


def memory_update(f_values: np.ndarray, cr_values: np.ndarray, improvements: np.ndarray) -> tuple[float, float]:
    """(new M_F, new M_CR) from the successful F and CR weighted by their improvements."""
    weights = improvements / np.sum(improvements)
    return lehmer_mean(f_values, weights), float(np.sum(weights * cr_values))


def sample_cr(means: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``N(mean, 0.1)`` clipped to [0, 1] (draws: len(means) normals)."""
    return np.clip(rng.normal(means, SCALE), 0.0, 1.0)


def sample_f(means: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``Cauchy(mean, 0.1)`` truncated to 1, drawn again while <= 0 (draws: one
    standard Cauchy per value, then one per value still <= 0, round after round)."""
    f = means + SCALE * rng.standard_cauchy(len(means))
    bad = np.flatnonzero(f <= 0.0)
    while len(bad):
        f[bad] = means[bad] + SCALE * rng.standard_cauchy(len(bad))
        bad = bad[f[bad] <= 0.0]
    return np.minimum(f, 1.0)


def midpoint_bounds(trial: np.ndarray, parent: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:
    """Genes outside the box go halfway between the parent's gene and the bound, in place."""
    # genes the first line fixes lie below their parent, so the second leaves them alone
    np.copyto(trial, (lower + parent) / 2, where=trial < lower)
    np.copyto(trial, (upper + parent) / 2, where=trial > upper)


def partners(n: int, pool: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """r1 in [0, n) other than i, r2 in [0, pool) other than i and r1 (pool >= n >= 2
    and pool >= 3; draws: n integers for r1, then n for r2)."""
    i = np.arange(n)
    r1 = (i + 1 + rng.integers(0, n - 1, n)) % n
    r2 = rng.integers(0, pool - 2, n)
    # skip the two excluded indices in increasing order: uniform over the rest
    r2 += r2 >= np.minimum(i, r1)
    r2 += r2 >= np.maximum(i, r1)
    return r1, r2


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
    """

    name = "shade"

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
        self.x, self.fitness = seed_population(archive, n, rng, self.lower, self.upper)
        self.external = np.empty((0, dim), archive.dtype)
        self.memory_f = np.full(self.memory, 0.5)
        self.memory_cr = np.full(self.memory, 0.5)
        self.memory_index = 0
        self.evaluations = int(archive.size)   # the evaluated initial population
        self._pending = None

    def archive_cap(self, n: int) -> int:
        return int(np.rint(self.archive_rate * n))

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """Draw order: memory slots (n), CR (n normals), F (Cauchy, with redraws), pbest
        ranks (n), r1 and r2 (:func:`partners`), crossover (n x dim), j_rand (n), and
        the archive's survival keys (|A| + n)."""
        x = self.x
        n, dim = x.shape
        slots = rng.integers(0, self.memory, n)
        cr = sample_cr(self.memory_cr[slots], rng)
        f = sample_f(self.memory_f[slots], rng)
        top = max(2, int(np.rint(self.pbest * n)))
        best = np.argsort(self.fitness, kind="stable")[rng.integers(0, top, n)]
        r1, r2 = partners(n, n + len(self.external), rng)
        pool = np.concatenate([x, self.external]) if len(self.external) else x
        step = f.astype(x.dtype)[:, None]
        mutant = x + step * (x[best] - x) + step * (x[r1] - pool[r2])
        cross = rng.random((n, dim)) < cr[:, None]
        cross[np.arange(n), rng.integers(0, dim, n)] = True
        trial = np.where(cross, mutant, x)
        midpoint_bounds(trial, x, self.lower, self.upper)
        self._pending = (f, cr, rng.random(len(self.external) + n))
        return trial

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        if self._pending is None:
            raise RuntimeError("expected ask() before tell(), got no pending batch")
        f, cr, keys = self._pending
        self._pending = None
        if len(fitness) != len(self.fitness):
            raise ValueError(f"expected the {len(self.fitness)} genomes of the last ask, got {len(fitness)}")
        strict = fitness < self.fitness
        gain = self.fitness[strict] - fitness[strict]   # +inf where the parent was a filler
        scored = np.isfinite(gain)
        success_f, success_cr = f[strict][scored], cr[strict][scored]
        losers = self.x[strict]
        loser_keys = keys[len(self.external):][strict]
        keep = fitness <= self.fitness
        self.x[keep] = genomes[keep]
        self.fitness[keep] = fitness[keep]
        if scored.any():
            new_f, new_cr = memory_update(success_f, success_cr, gain[scored])
            self.memory_f[self.memory_index] = new_f
            self.memory_cr[self.memory_index] = new_cr
            self.memory_index = (self.memory_index + 1) % self.memory
        self.evaluations += len(fitness)
        self._shrink(linear_size(self.evaluations, self.n_init, self.min_population, self.max_evaluations))
        self._archive(losers, np.concatenate([keys[:len(self.external)], loser_keys]))

    def _shrink(self, size: int) -> None:
        """Keep the best ``size`` members (in their order); ties: the earlier member."""
        if size < len(self.fitness):
            keep = np.sort(np.argsort(self.fitness, kind="stable")[:size])
            self.x, self.fitness = self.x[keep], self.fitness[keep]

    def _archive(self, losers: np.ndarray, keys: np.ndarray) -> None:
        """Add the replaced parents to A; if it overflows, the members with the
        smallest keys stay (a uniformly random subset, in their order)."""
        candidates = np.concatenate([self.external, losers])
        cap = self.archive_cap(len(self.fitness))
        if len(candidates) > cap:
            candidates = candidates[np.sort(np.argsort(keys, kind="stable")[:cap])]
        self.external = candidates

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
        self.x, self.fitness, self.external = x.copy(), fitness.copy(), external.copy()
        self.memory_f = np.array(state["memory_f"], np.float64)
        self.memory_cr = np.array(state["memory_cr"], np.float64)
        self.memory_index = int(state["memory_index"])
        self.evaluations = int(state["evaluations"])
        self._pending = None


def _int_at_least(value, minimum: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= minimum


def _number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
