"""A :class:`ParetoArchive`: the island archive of a multi-objective island.

It is an :class:`~mpievo.evo.archive.Archive` whose members carry ``n_obj`` minimised
objectives (``objectives``, ``(size, n_obj)``) and whose merges are NSGA-II's
environmental selection: members and candidates are ordered by
:func:`~.pareto.survivor_order` (front, then crowding distance, then members before
candidates, earlier before later) and the first ``limit`` stay. The population of a
Pareto island is therefore its archive, and :meth:`ranking` (best first) is that order,
so migration's ``best`` selection sends emigrants by rank and crowding.

A candidate that a member dominates is ordered after it, so it can never take the slot
of a member that dominates it (migrants under the ``better`` replacement included).

``fitness`` (the scalar the logs, ``best`` and the run's target use) is the sum of a
member's objectives: the "best" member of a Pareto island is its compromise member with
the lowest sum; the front itself is :meth:`front`. Rows with a non-finite objective are
stored as all +inf.
"""

from __future__ import annotations

import numpy as np

from ..archive import Archive
from .pareto import nondominated, survivor_order


def sanitize_objectives(objectives) -> tuple[np.ndarray, int]:
    """(n, m) objectives as float64 with every row holding a NaN or infinity replaced by
    +inf, and the number of such rows (each one non-finite evaluation)."""
    f = np.asarray(objectives, dtype=np.float64)
    bad_rows = ~np.all(np.isfinite(f), axis=1)
    bad = int(np.count_nonzero(bad_rows))
    if bad:
        f = f.copy()
        f[bad_rows] = np.inf
    return f, bad


class ParetoArchive(Archive):
    """Archive of a multi-objective island (see the module docstring).

    Args:
        n_obj: objectives per member (>= 2); the others as :class:`Archive`.

    Example::

        from mpievo.evo import EngineConfig, Island
        from mpievo.evo.moo import moo_problem
        island = Island(0, moo_problem("zdt1"), EngineConfig(algorithm="nsga2", capacity=100, batch_size=100))
        archive = island.run(50).archive          # a ParetoArchive
        archive.objectives[archive.front()]       # (k, 2): the island's non-dominated points
    """

    def __init__(self, capacity: int, dim: int, dtype="float32", *, n_obj: int, **kwargs):
        if isinstance(n_obj, bool) or not isinstance(n_obj, (int, np.integer)) or n_obj < 2:
            raise ValueError(f"expected n_obj to be an int >= 2, got {n_obj!r}")
        self.n_obj = int(n_obj)
        self._objectives = np.full((int(capacity), self.n_obj), np.inf)
        #: ``survival(objectives, limit) -> kept rows`` of a merge; None: NSGA-II's (set by
        #: the algorithm, e.g. SMS-EMOA's hypervolume survival)
        self.survival = None
        super().__init__(capacity, dim, dtype, **kwargs)

    @property
    def objectives(self) -> np.ndarray:
        """(size, n_obj) minimised objectives (read-only view; what migrants carry)."""
        return self._objectives[:self.size]

    def _check_batch(self, genomes, fitness, ids, origins, births):
        genomes = self.as_rows(genomes)
        n = genomes.shape[0]
        objectives = np.asarray(fitness, dtype=np.float64)
        if objectives.shape != (n, self.n_obj):
            raise ValueError(f"expected objectives of shape ({n}, {self.n_obj}), got {objectives.shape}")
        objectives, _ = sanitize_objectives(objectives)
        return [genomes, objectives, *super()._check_batch(genomes, np.zeros(n), ids, origins, births)[2:]]

    def _write(self, slots, genomes, rows, fitness, ids, origins, births, hashes):
        self._objectives[slots] = fitness
        super()._write(slots, genomes, rows, fitness.sum(axis=1), ids, origins, births, hashes)

    def _merge_slots(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Truncation of members + candidates to ``limit`` (NSGA-II's, or ``survival``):
        the candidates that stay (ascending) and their slots (free slots first, then
        evicted members')."""
        size = self.size
        combined = np.concatenate([self.objectives, candidates])
        if self.survival is not None and len(combined) > self.limit:
            kept = self.survival(combined, self.limit)
        else:
            kept = survivor_order(combined)[0][:self.limit]
        entered = np.sort(kept[kept >= size] - size)
        evicted = np.setdiff1d(np.arange(size), kept)
        slots = np.concatenate([np.arange(size, self.limit), evicted])[:len(entered)]
        return entered, slots.astype(np.int64)

    def ranking(self) -> np.ndarray:
        """Member slots from best to worst: front, crowding distance, slot."""
        return survivor_order(self.objectives)[0]

    def front(self) -> np.ndarray:
        """Slots of the members no member dominates (invalid rows excluded), ascending."""
        valid = np.flatnonzero(np.isfinite(self.fitness))
        return valid[nondominated(self.objectives[valid])]

    def retain(self, slots) -> None:
        super().retain(slots)
        slots = np.asarray(slots, dtype=np.int64)
        self._objectives[:len(slots)] = self._objectives[slots]
        self._objectives[len(slots):] = np.inf

    def state_dict(self, copy: bool = True) -> dict:
        """As :meth:`Archive.state_dict`, with ``fitness`` the (size, n_obj) objectives."""
        return {**super().state_dict(copy), "fitness": self.objectives.copy()}
