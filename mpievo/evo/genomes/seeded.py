"""``engine.genome = "seeded"``: an individual is its recipe, not its parameters.

A recipe (Uber's deep-GA / OpenAI-ES encoding, with merge weights) says how to make a
genome from the problem's ``B`` base models::

    genome = clip(sum_b w[b] * base[b] + sum_t coef[t] * scale * noise(key[t], rate[t]))

``scale`` is the box width (as for the GA's mutation steps) and ``noise(key, rate)`` a
standard normal on each gene that the term mutates (each with probability ``rate``),
made by the counter-based generator from the key alone (:mod:`mpievo.kernels.recipes`),
so every rank materialises a recipe bit for bit alike, on any rank count.

Row layout (float64, ``B + 3 * K`` values; ``K = engine.recipe_terms``): the ``B``
weights, then ``K`` terms ``(key, coef, rate)``, used terms first in ascending key,
unused ones all zero. Keys are ints below 2**53 (exact in float64). A migrant or a
checkpointed member is this row: ``8 * (B + 3K)`` bytes whatever the genome's size.

Breeding (the GA with interpolation crossover; :class:`RecipeOperators`):
``child = omega*a + (1-omega)*b`` merges the parents' recipes -- weights and term
coefficients combine linearly, terms present in one parent keep ``omega`` or
``1 - omega`` of their coefficient -- then the child's mutation adds a term
``(fresh key, step, rate)``.

Compaction (documented rule): a child whose merged recipe would hold more than ``K``
terms keeps its own new term and the ``K - 1`` inherited terms of largest
``|coef|`` (ties: the smaller key); terms whose coefficient became 0 are dropped. The
child *is* its compacted recipe -- it is materialised and evaluated after compaction --
so compaction is part of breeding, not an approximation of a stored genome. Old terms
of one lineage weigh ``omega**k`` after ``k`` merges with another lineage, so the
terms dropped are the ones that weigh least.

Restarts (the GA's refill) draw fresh recipes: Dirichlet(1) weights over the bases
plus one term at the GA's initial step. Islands start from the bases themselves
(member ``i`` is base ``i mod B``), the members past the first ``B`` with one term
at the initial step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpievo.kernels import recipes as kernels
from ..operators import draw_omega
from ..problems import Problem
from ..base_models import BaseModels
from ..operators import box_arrays
from .encoded import EncodedProblem

#: term keys are drawn from [1, KEY_LIMIT) (0 marks an unused term)
KEY_LIMIT = 2 ** 53
#: the row box (rows are recipes, not points in a box: the engine never clips them)
_UNBOXED = np.finfo(np.float64).max / 4


@dataclass(frozen=True)
class RecipeLayout:
    """Where the parts of a recipe row are: ``bases`` weights, then ``terms`` triples."""

    bases: int
    terms: int

    @property
    def width(self) -> int:
        return self.bases + 3 * self.terms

    def weights(self, row: np.ndarray) -> np.ndarray:
        return row[:self.bases]

    def term_table(self, row: np.ndarray) -> np.ndarray:
        """(K, 3) view of (key, coef, rate); used terms have key > 0."""
        return row[self.bases:].reshape(self.terms, 3)

    def used_terms(self, row: np.ndarray) -> np.ndarray:
        table = self.term_table(row)
        return table[table[:, 0] > 0]

    def write(self, out: np.ndarray, weights: np.ndarray, terms: np.ndarray) -> None:
        """``out`` := the row of ``weights`` and ``terms`` (m <= K rows of (key, coef, rate))."""
        if len(terms) > self.terms:
            raise ValueError(f"expected at most {self.terms} recipe terms, got {len(terms)}")
        out[:self.bases] = weights
        table = self.term_table(out)
        table[:] = 0.0
        table[:len(terms)] = terms[np.argsort(terms[:, 0], kind="stable")]


def merge(layout: RecipeLayout, a: np.ndarray, b: np.ndarray, omega: float,
          new_term: np.ndarray | None, out: np.ndarray) -> None:
    """``out`` := the recipe of ``omega*a + (1-omega)*b`` plus ``new_term`` (compacted
    by the module's rule)."""
    ta, tb = layout.used_terms(a), layout.used_terms(b)
    keys = np.union1d(ta[:, 0], tb[:, 0])
    coef = np.zeros(len(keys))
    rate = np.zeros(len(keys))
    for table, w in ((ta, omega), (tb, 1.0 - omega)):
        at = np.searchsorted(keys, table[:, 0])
        coef[at] += w * table[:, 1]
        rate[at] = table[:, 2]
    terms = np.column_stack([keys, coef, rate])[coef != 0.0]
    room = layout.terms - (new_term is not None)
    if len(terms) > room:
        keep = np.lexsort((terms[:, 0], -np.abs(terms[:, 1])))[:room]
        terms = terms[keep]
    if new_term is not None:
        terms = np.vstack([terms, new_term[None, :]])
    layout.write(out, omega * layout.weights(a) + (1.0 - omega) * layout.weights(b), terms)


class RecipeOperators:
    """The GA's operators on recipe rows (bound by the GA in place of the dense ones)."""

    def __init__(self, layout: RecipeLayout, initial_step: float):
        self.layout = layout
        self.initial_step = float(initial_step)

    @staticmethod
    def place(arr):
        return arr

    @staticmethod
    def empty(shape, dtype) -> np.ndarray:
        return np.zeros(shape, np.float64)

    def interpolate_crossover(self, genomes, idx_a, idx_b, rng, lower, upper, out=None, *, omega=None):
        """Merged recipes ``omega*a + (1-omega)*b`` (no mutation term)."""
        out = np.zeros((len(idx_a), self.layout.width)) if out is None else out[:len(idx_a)]
        w = draw_omega(rng, len(idx_a), omega, np.float64)
        for i, (ia, ib) in enumerate(zip(idx_a, idx_b)):
            merge(self.layout, genomes[ia], genomes[ib], float(w[i]), None, out[i])
        return out

    def breed(self, genomes, idx_a, idx_b, rng, lower, upper, out=None, *, omega=None, rate: float,
              steps, scale, bounds: str = "clip"):
        """Crossover then mutation as recipes (draws: omega per child, then one key per
        child). Returns (children, per-child count of mutation terms added: 1, or 0 at
        rate 0)."""
        n = len(idx_a)
        out = np.zeros((n, self.layout.width)) if out is None else out[:n]
        w = draw_omega(rng, n, omega, np.float64)
        keys = rng.integers(1, KEY_LIMIT, n, dtype=np.int64)
        steps = np.broadcast_to(np.asarray(steps, np.float64), (n,))
        mutate = rate > 0.0
        for i in range(n):
            term = np.array([keys[i], steps[i], rate]) if mutate and steps[i] > 0 else None
            merge(self.layout, genomes[idx_a[i]], genomes[idx_b[i]], float(w[i]), term, out[i])
        counts = np.full(n, int(mutate), np.int64)
        return out, counts

    def uniform_genomes(self, rng, lower, upper, out):
        """Fresh recipes (module docstring: restarts), one per row of ``out``."""
        n = out.shape[0]
        weights = rng.dirichlet(np.ones(self.layout.bases), n)
        keys = rng.integers(1, KEY_LIMIT, n, dtype=np.int64)
        for i in range(n):
            term = np.array([[keys[i], self.initial_step, 1.0]])
            self.layout.write(out[i], weights[i], term)
        return out


class SeededProblem(EncodedProblem):
    """The user's ``problem`` over recipe rows (module docstring)."""

    genome = "seeded"

    def __init__(self, problem: Problem, bases: BaseModels, *, dtype, budget: int, terms: int,
                 initial_step: float, rate: float, on_device: bool = False):
        self.layout = RecipeLayout(bases.count, int(terms))
        self.on_device = bool(on_device)   # materialise and evaluate on the rank's GPU
        self._placed = None                # (bases, scale, lower, upper, block) on the device
        self.initial_rate = float(rate)
        super().__init__(problem, bases, row_dim=self.layout.width, row_lower=-_UNBOXED,
                         row_upper=_UNBOXED, row_dtype=np.float64, dtype=dtype, budget=budget,
                         initial=self._initial_recipes)   # a hook, so wrappers keep it
        self.operators = RecipeOperators(self.layout, initial_step)
        self._box = box_arrays(problem.lower, problem.upper, dtype)
        lower, upper = self._box
        self._scale = (np.broadcast_to(upper[:1] - lower[:1], lower.shape) if lower.strides == (0,)
                       else upper - lower)              # the box width: a view for a uniform box

    def _initial_recipes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Member ``i`` is base ``i mod B``; members past the first ``B`` add one term."""
        rows = np.zeros((n, self.layout.width))
        keys = rng.integers(1, KEY_LIMIT, n, dtype=np.int64)
        for i in range(n):
            weights = np.zeros(self.layout.bases)
            weights[i % self.layout.bases] = 1.0
            terms = np.zeros((0, 3))
            if i >= self.layout.bases and self.initial_rate > 0:
                terms = np.array([[keys[i], self.operators.initial_step, self.initial_rate]])
            self.layout.write(rows[i], weights, terms)
        return rows

    def materialize_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        rows = np.asarray(rows, np.float64)
        layout = self.layout
        kernels.materialize_rows(self._float_bases(), rows[:, :layout.bases],
                                 rows[:, layout.bases:].reshape(len(rows), layout.terms, 3),
                                 self._scale, *self._box, out)

    def _float_bases(self) -> np.ndarray:
        """The bases as the recipe kernels read them: half-precision bases (a half model's
        sources, kept in their dtype) widened once to a float32 copy of this process."""
        bases = self.bases.array
        if bases.dtype.itemsize != 2:
            return bases
        if getattr(self, "_widened", None) is None or self._widened[0] is not bases.base:
            from ..half import widen_into

            self._widened = (bases.base, widen_into(bases, np.empty(bases.shape, np.float32)))
        return self._widened[1]

    def _evaluate_rows(self, rows: np.ndarray) -> np.ndarray:
        """User values of the genomes of ``rows``; on the GPU for a device problem: the
        children are materialised there (:mod:`mpievo.kernels.cuda.recipes`, the host's
        bits) and the user's function gets them as device arrays."""
        if not self.on_device:
            return super()._evaluate_rows(rows)
        from mpievo.kernels.cuda import recipes as cuda_recipes

        from .. import device

        bases, scale, lower, upper, block = self._device_arrays()
        values = np.empty(rows.shape[0])
        for start in range(0, rows.shape[0], self.block_rows):
            part = np.asarray(rows[start:start + self.block_rows], np.float64)
            for i, row in enumerate(part):
                cuda_recipes.materialize(bases, self.layout.weights(row), self.layout.used_terms(row),
                                         scale, lower, upper, block, i)
            fitness = device.evaluate(self.inner, block[:len(part)])
            values[start:start + len(part)] = self.inner.to_user(fitness)
        return values

    def _device_arrays(self) -> tuple:
        """The bases (:meth:`BaseModels.on_device`: once per process), scale, box (one
        element each when uniform) and the evaluation block on the GPU."""
        if self._placed is None:
            from numba import cuda

            from mpievo.kernels.cuda.reduce import bound_to_device

            self._placed = (self.bases.on_device(), *(bound_to_device(a) for a in (self._scale, *self._box)),
                            cuda.device_array((self.block_rows, self.genome_dim), self.dtype))
        return self._placed

    def diversity(self, rows: np.ndarray) -> float:
        """:meth:`Island.diversity <mpievo.evo.island.Island.diversity>` of the whole
        genomes of ``rows`` (each decoded twice unless cached: centroid, then distances;
        a delta island's rows need none: the measure ignores the base's translation)."""
        n = rows.shape[0]
        if n == 0:
            return 0.0
        width = self.inner.width
        centroid = np.zeros(self.genome_dim)
        for row in rows:
            centroid += self.decode(row)
        centroid /= n
        distances = [np.sqrt(np.sum(((self.decode(row) - centroid) / width) ** 2)) for row in rows]
        return float(np.mean(distances) / np.sqrt(self.genome_dim))

    def metadata(self) -> dict:
        meta = super().metadata()
        meta["recipe_terms"] = self.layout.terms
        return meta
