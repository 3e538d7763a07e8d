"""NSGA-II (Deb, Pratap, Agarwal and Meyarivan 2002) as an island algorithm.

The island's :class:`~.archive.ParetoArchive` is the population: its merge is NSGA-II's
environmental selection (non-dominated sorting, then crowding distance), so this class
only breeds. Per generation, ``batch_size`` children:

1. binary tournaments among the members: the lower front wins, then the larger crowding
   distance, then the lower slot (two tournaments per pair of children);
2. simulated binary crossover (``sbx_eta``): a pair crosses with probability ``sbx_prob``
   (else its children are copies of the parents), each gene with probability 1/2; both
   children are kept, clipped to the box;
3. Deb's bounded polynomial mutation (``pm_eta``) of a child with probability ``pm_prob``
   (pymoo's 0.9), each of its genes with probability ``mutation_rate`` (None: 1/dim); see
   :mod:`.variation`.

All draws come from the generation's ``breed`` stream, and the state is the archive
(``state_dict`` is empty), so islands are deterministic per stream and resume exactly.
"""

from __future__ import annotations

import numpy as np

from .. import operators as ops
from .pareto import survivor_order
from .variation import CHILD_PROBABILITY, bounded_polynomial_mutation, sbx_pairs

#: the Pareto islands' default population (engine.capacity) and children per generation
POPULATION = 100


def tournament_winners(order_rank: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` binary-tournament winners among members ranked by ``order_rank`` (0 best).

    Draws: a (count, 2) integer array.
    """
    pairs = rng.integers(0, len(order_rank), (count, 2))
    first_wins = order_rank[pairs[:, 0]] <= order_rank[pairs[:, 1]]
    return np.where(first_wins, pairs[:, 0], pairs[:, 1])


class ParetoAlgorithm:
    """What the Pareto island algorithms share: the archive, the box, the mutation rate
    (``mutation_rate``, None: 1/dim) and :meth:`best`."""

    name = "pareto"
    multi_objective = True
    mutation_rate = None
    #: engine settings left unset: the population of pymoo's NSGA2 and SMSEMOA (and of Deb
    #: et al. 2002), one generation of as many children (see docs/guides/multi-objective.md)
    config_defaults = {"capacity": POPULATION, "batch_size": POPULATION}

    def attach(self, problem, archive) -> None:
        if getattr(archive, "n_obj", 1) < 2:
            raise ValueError(f"expected a problem with several objectives for {self.name}, got {problem!r}")
        self.archive = archive
        # the box in the archive's dtype, rounded inwards: clipped children stay inside once cast
        box = ops.box_arrays(problem.lower, problem.upper, archive.dtype)
        self.lower, self.upper = (np.asarray(b, dtype=np.float64) for b in box)
        self.rate = 1.0 / archive.dim if self.mutation_rate is None else float(self.mutation_rate)

    def best(self) -> tuple[np.ndarray, float]:
        i = self.archive.best_index()
        return self.archive.row(i), float(self.archive.fitness[i])


class NSGA2(ParetoAlgorithm):
    """NSGA-II island algorithm (see the module docstring).

    Example::

        result = mpievo.minimize(moo_problem("zdt1"), algorithm="nsga2", budget=20_000, islands=2)
        result.front["hypervolume"], result.front["objectives"].shape
    """

    name = "nsga2"

    def __init__(self, *, batch_size: int = 100, sbx_eta: float = 15.0, sbx_prob: float = 0.9,
                 pm_eta: float = 20.0, mutation_rate: float | None = None, pm_prob: float = CHILD_PROBABILITY):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"expected batch_size to be an int >= 1, got {batch_size!r}")
        for label, value in (("sbx_prob", sbx_prob), ("pm_prob", pm_prob)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"expected {label} in [0, 1], got {value!r}")
        self.batch_size, self.pm_prob = int(batch_size), float(pm_prob)
        self.sbx_eta, self.sbx_prob, self.pm_eta = float(sbx_eta), float(sbx_prob), float(pm_eta)
        self.mutation_rate = mutation_rate
        self.archive = None

    @classmethod
    def from_config(cls, config) -> "NSGA2":
        return cls(batch_size=config.batch_size, sbx_eta=config.sbx_eta, sbx_prob=config.sbx_prob,
                   pm_eta=config.pm_eta, mutation_rate=config.mutation_rate, pm_prob=config.pm_prob)

    def init(self, problem, archive, rng) -> None:
        self.attach(problem, archive)

    def parents(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Draws: binary tournaments for parents a, then b (:func:`tournament_winners`)."""
        order = survivor_order(self.archive.objectives)[0]
        position = np.empty(len(order), np.int64)
        position[order] = np.arange(len(order))
        return tournament_winners(position, count, rng), tournament_winners(position, count, rng)

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """Draw order: parents of ceil(n/2) pairs (:meth:`parents`); SBX
        (:func:`~.variation.sbx_pairs`); mutation (:func:`~.variation.bounded_polynomial_mutation`).
        A pair's two children are consecutive rows."""
        archive, n = self.archive, self.batch_size
        idx_a, idx_b = self.parents(rng, (n + 1) // 2)
        genomes = archive.genomes.astype(np.float64)
        first, second = sbx_pairs(genomes[idx_a], genomes[idx_b], rng, self.lower, self.upper,
                                  eta=self.sbx_eta, prob=self.sbx_prob)
        children = np.empty((2 * len(idx_a), archive.dim))
        children[0::2], children[1::2] = first, second
        children = children[:n]
        bounded_polynomial_mutation(children, rng, self.lower, self.upper, rate=self.rate, eta=self.pm_eta,
                                    child_prob=self.pm_prob)
        return children.astype(archive.dtype)

    def tell(self, genomes: np.ndarray, fitness: np.ndarray) -> None:
        """Nothing to learn: survival is the archive's merge."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"expected an empty nsga2 state (the archive is the population), got {sorted(state)}")
