"""MOEA/D (Zhang and Li 2007): SBX variation as in that paper and pymoo's ``MOEAD``, or
DE variation (Li and Zhang 2009's MOEA/D-DE, pygmo's ``moead``).

The objectives are decomposed into ``N`` Tchebycheff subproblems ``g(f | w, z) =
max_k w_k |f_k - z_k|``, one per weight vector ``w`` (``N`` = the initial population;
2 objectives: an even grid, more: the corners, then a Halton sequence mapped onto the
simplex), ``z`` the best value of every objective seen. Subproblem ``i`` holds one
solution; its neighbourhood is the ``neighbours`` subproblems of the closest weights.

Per generation, ``batch_size`` children, subproblems taken in a shuffled order:

1. mating pool: subproblem ``i``'s neighbourhood with probability ``NEIGHBOURHOOD_MATING``
   (else every subproblem);
2. ``variation = "sbx"`` (the default): SBX (``sbx_eta``, ``sbx_prob``; defaults 20 and
   1, Zhang and Li 2007's and pymoo's) of two distinct members r1, r2 of the pool, one of
   the two children at random (pymoo's); ``"de"``: DE/rand/1 ``x_i + F (x_r1 - x_r2)``,
   binomial crossover with ``CR`` (one gene always from the mutant), a gene beyond the
   box drawn between the bound and ``x_i``'s gene (pygmo's repair); then polynomial
   mutation (``pm_eta``) of a child with probability ``pm_prob`` (pymoo's 0.9), each of
   its genes with probability ``mutation_rate`` (None: 1/dim);
3. on :meth:`tell`, in the order asked: ``z`` takes the child's objectives, and the child
   replaces the solution of at most ``REPLACEMENT_LIMIT`` subproblems of its pool whose
   ``g`` it lowers, offered its own subproblem first, then the others in a drawn order.

Unlike pygmo, whose later children of a generation breed from its earlier replacements,
a generation's children all breed from the subproblems' solutions before it (one batch
to evaluate). The island's :class:`~.archive.ParetoArchive` takes every child through
NSGA-II's environmental selection, as for :mod:`.nsga2`: it is the island's front for
output and migration, the subproblems' solutions live in the algorithm's state.
Immigrants that enter the archive are offered to the subproblems as children of the
subproblem they improve most. Draws come from the generation's ``breed`` stream only.
"""

from __future__ import annotations

import numpy as np

from .nsga2 import POPULATION, ParetoAlgorithm
from .variation import CHILD_PROBABILITY, bounded_polynomial_mutation, sbx_pairs

#: pygmo moead's defaults: DE's F and CR, the chance of mating in the neighbourhood, and
#: the most subproblems one child may take over ("preserve diversity")
DE_F, DE_CR, NEIGHBOURHOOD_MATING, REPLACEMENT_LIMIT = 0.5, 1.0, 0.9, 2
#: the ways to breed a child (see the module docstring)
VARIATIONS = ("sbx", "de")
#: a zero weight counts as this much (Tchebycheff would ignore that objective)
MIN_WEIGHT = 1e-6


def halton(count: int, dims: int) -> np.ndarray:
    """The first ``count`` points (from index 1) of the Halton sequence in ``dims`` dimensions."""
    primes = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47][:dims]
    if len(primes) < dims:
        raise ValueError(f"expected at most 15 Halton dimensions, got {dims}")
    out = np.zeros((count, dims))
    for d, base in enumerate(primes):
        index = np.arange(1, count + 1)
        scale = 1.0
        while np.any(index > 0):
            scale /= base
            out[:, d] += scale * (index % base)
            index //= base
    return out


def weight_vectors(count: int, n_obj: int, rotation=None) -> np.ndarray:
    """``count`` weight vectors on the unit simplex (rows sum to 1): the ``n_obj`` corners
    and evenly spread interior points (a grid for two objectives, the Halton sequence for
    more), deterministic. ``rotation`` (``n_obj - 1`` numbers in [0, 1)) moves the interior
    points by a Cranley-Patterson rotation (each coordinate + its rotation, modulo the
    spacing for two objectives, modulo 1 for the Halton points): as evenly spread, but
    other directions, so islands rotated apart cover the front between each other's.

    Example:
        >>> weight_vectors(4, 2)[:, 0].tolist()
        [0.0, 0.3333333333333333, 0.6666666666666666, 1.0]
        >>> weight_vectors(4, 2, rotation=[0.75])[:, 0].round(4).tolist()
        [0.0, 0.25, 0.5833, 1.0]
    """
    if count < n_obj:
        raise ValueError(f"expected a population of at least {n_obj} for moead's weights, got {count}")
    shift = np.zeros(n_obj - 1) if rotation is None else np.asarray(rotation, dtype=np.float64)
    if shift.shape != (n_obj - 1,) or not np.all((shift >= 0) & (shift < 1)):
        raise ValueError(f"expected a rotation of {n_obj - 1} numbers in [0, 1), got {rotation!r}")
    if n_obj == 2:
        t = np.linspace(0.0, 1.0, count)
        # interior point i at (i + shift - 1/2 rounded into [-1/2, 1/2)) / (count - 1): inside (0, 1)
        t[1:-1] += ((shift[0] + 0.5) % 1.0 - 0.5) / (count - 1)
        return np.column_stack([t, 1.0 - t])
    # sorted coordinates of a point in the cube cut [0, 1] into n_obj spacings: the simplex
    cuts = np.sort((halton(count - n_obj, n_obj - 1) + shift) % 1.0, axis=1)
    inner = np.diff(np.hstack([np.zeros((len(cuts), 1)), cuts, np.ones((len(cuts), 1))]), axis=1)
    return np.vstack([np.eye(n_obj), inner])


def tchebycheff(objectives: np.ndarray, weights: np.ndarray, ideal: np.ndarray) -> np.ndarray:
    """``g`` of each row of ``objectives`` under the same row of ``weights`` (or one row)."""
    return np.max(np.maximum(weights, MIN_WEIGHT) * np.abs(objectives - ideal), axis=-1)


class MOEAD(ParetoAlgorithm):
    """MOEA/D island algorithm (see the module docstring).

    Example::

        result = mpievo.minimize(moo_problem("zdt1"), algorithm="moead", budget=20_000, islands=2)
    """

    name = "moead"
    #: a population of 100 (the other Pareto islands'), a tenth of it bred per generation:
    #: the references (Zhang and Li; pygmo's and pymoo's loops) breed one child at a time,
    #: each updating the subproblems before the next; a whole population per batch breeds
    #: from older solutions (DE, ZDT1, 30 genes, 2 islands, 20,000 evaluations, seed 0:
    #: hypervolume 0.03 with batches of 100, 0.81 of 10, 0.83 of 1 at about 6 times the
    #: wall time of 10; SBX: 10 above 100 on 11 of 13 problems, docs/guides/multi-objective.md);
    #: SBX as Zhang and Li 2007 and pymoo's MOEAD (index 20, every pair)
    config_defaults = {"capacity": POPULATION, "batch_size": 10, "sbx_eta": 20.0, "sbx_prob": 1.0}

    def __init__(self, *, batch_size: int = 100, neighbours: int = 20, pm_eta: float = 20.0,
                 mutation_rate: float | None = None, variation: str = "sbx", sbx_eta: float = 20.0,
                 sbx_prob: float = 1.0, pm_prob: float = CHILD_PROBABILITY):
        for label, value, low in (("batch_size", batch_size, 1), ("neighbours", neighbours, 2)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"expected {label} to be an int >= {low}, got {value!r}")
        if variation not in VARIATIONS:
            raise ValueError(f"expected variation among {VARIATIONS}, got {variation!r}")
        for label, value in (("sbx_prob", sbx_prob), ("pm_prob", pm_prob)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"expected {label} in [0, 1], got {value!r}")
        self.batch_size, self.neighbours, self.pm_prob = int(batch_size), int(neighbours), float(pm_prob)
        self.pm_eta, self.mutation_rate = float(pm_eta), mutation_rate
        self.variation, self.sbx_eta, self.sbx_prob = variation, float(sbx_eta), float(sbx_prob)
        self.archive = None
        self._asked = None

    @classmethod
    def from_config(cls, config) -> "MOEAD":
        return cls(batch_size=config.batch_size, neighbours=config.moead_neighbours, pm_eta=config.pm_eta,
                   mutation_rate=config.mutation_rate, variation=config.moead_variation,
                   sbx_eta=config.sbx_eta, sbx_prob=config.sbx_prob, pm_prob=config.pm_prob)

    def init(self, problem, archive, rng) -> None:
        """Subproblem ``i`` starts with the archive's member ``i`` (the initial population)."""
        self.attach(problem, archive)
        self.solutions = archive.genomes.astype(np.float64)
        self.objectives = archive.objectives.copy()
        # each island its own rotation of the weights (drawn from the island's algorithm
        # stream, so the same again on resume): islands search between each other's directions
        self.weights = weight_vectors(len(self.solutions), archive.n_obj, rotation=rng.random(archive.n_obj - 1))
        distance = np.linalg.norm(self.weights[:, None] - self.weights[None], axis=2)
        #: every subproblem's subproblems, closest weights first (itself first)
        self.closest = np.argsort(distance, axis=1, kind="stable")
        self.pool_size = min(self.neighbours, len(self.weights))
        # the best of every objective seen is in the archive (its extremes have infinite
        # crowding), so the ideal point needs no place in the state
        objectives = archive.objectives[np.all(np.isfinite(archive.objectives), axis=1)]
        self.ideal = objectives.min(axis=0) if len(objectives) else np.full(archive.n_obj, np.inf)

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """Draw order: subproblem permutations (enough for the batch), mating in the
        neighbourhood (n,), the two partners (n,) and (n,); SBX
        (:func:`~.variation.sbx_pairs`) then which child (n,), or DE's crossover (n, dim),
        forced gene (n,) and repair (n, dim); the mutation
        (:func:`~.variation.bounded_polynomial_mutation`), the replacement order (n, N)."""
        n, count = self.batch_size, len(self.weights)
        order = np.concatenate([rng.permutation(count) for _ in range(-(-n // count))])[:n]
        local = rng.random(n) < NEIGHBOURHOOD_MATING
        pool = np.where(local, self.pool_size, count)
        first = (rng.random(n) * pool).astype(np.int64)
        second = (rng.random(n) * (pool - 1)).astype(np.int64)
        second += second >= first                              # distinct from the first
        partners = self.closest[order[:, None], np.column_stack([first, second])]
        x = self.solutions
        if self.variation == "sbx":
            first, second = sbx_pairs(x[partners[:, 0]], x[partners[:, 1]], rng, self.lower, self.upper,
                                      eta=self.sbx_eta, prob=self.sbx_prob)
            children = np.where((rng.random(n) < 0.5)[:, None], first, second)
        else:
            children = self._de_children(rng, x[order], x[partners[:, 0]] - x[partners[:, 1]])
        bounded_polynomial_mutation(children, rng, self.lower, self.upper, rate=self.rate, eta=self.pm_eta,
                                    child_prob=self.pm_prob)
        # the order in which each child's pool is offered it: its own subproblem, then the
        # others at random (by random keys over each pool)
        keys = rng.random((n, count))
        keys[:, 0] = -1.0
        keys[np.arange(count)[None, :] >= pool[:, None]] = np.inf
        self._asked = (order, pool, np.argsort(keys, axis=1, kind="stable"))
        return children.astype(self.archive.dtype)

    def _de_children(self, rng: np.random.Generator, base: np.ndarray, difference: np.ndarray) -> np.ndarray:
        """DE/rand/1 with binomial crossover; a gene beyond the box lands between the bound
        and the base's gene (pygmo's repair)."""
        n, dim = base.shape
        mutant = base + DE_F * difference
        cross = rng.random((n, dim)) < DE_CR
        cross[np.arange(n), rng.integers(0, dim, n)] = True
        step = rng.random((n, dim))
        mutant = np.where(mutant < self.lower, self.lower + step * (base - self.lower), mutant)
        mutant = np.where(mutant > self.upper, self.upper - step * (self.upper - base), mutant)
        return np.clip(np.where(cross, mutant, base), self.lower, self.upper)

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Update the ideal point, then let each child replace up to REPLACEMENT_LIMIT
        solutions of its pool, in the order asked."""
        order, pool, offered = self._asked
        self._asked = None
        fitness = np.asarray(fitness, dtype=np.float64)
        valid = np.all(np.isfinite(fitness), axis=1)
        if valid.any():
            self.ideal = np.minimum(self.ideal, fitness[valid].min(axis=0))
        for i in np.flatnonzero(valid):
            self._offer(genomes[i], fitness[i], self.closest[order[i], offered[i, :pool[i]]])

    def migrate_in(self, genomes, fitness) -> None:
        """Immigrants (already in the archive) are children of the subproblem they improve most."""
        fitness = np.asarray(fitness, dtype=np.float64).reshape(len(genomes), -1)
        for genome, f in zip(np.asarray(genomes), fitness):
            if not np.all(np.isfinite(f)):
                continue
            self.ideal = np.minimum(self.ideal, f)
            gain = tchebycheff(f, self.weights, self.ideal) - tchebycheff(self.objectives, self.weights, self.ideal)
            self._offer(genome, f, self.closest[int(np.argmin(gain)), :self.pool_size])

    def _offer(self, genome, objectives, candidates: np.ndarray) -> None:
        weights = self.weights[candidates]
        better = (tchebycheff(objectives, weights, self.ideal)
                  < tchebycheff(self.objectives[candidates], weights, self.ideal))
        taken = candidates[better][:REPLACEMENT_LIMIT]
        self.solutions[taken] = genome
        self.objectives[taken] = objectives

    def state_dict(self) -> dict:
        return {"solutions": self.solutions.copy(), "objectives": self.objectives.copy()}

    def load_state_dict(self, state: dict) -> None:
        expected = {"solutions": self.solutions.shape, "objectives": self.objectives.shape}
        got = {key: np.shape(state.get(key)) for key in expected}
        if set(state) != set(expected) or got != expected:
            raise ValueError(f"expected a moead state with shapes {expected}, got {got}")
        self.solutions = np.array(state["solutions"], dtype=np.float64)
        self.objectives = np.array(state["objectives"], dtype=np.float64)
