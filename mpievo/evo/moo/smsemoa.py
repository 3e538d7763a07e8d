"""SMS-EMOA (Beume, Naujoks and Emmerich 2007) as an island algorithm.

Like :mod:`.nsga2` it breeds with SBX and polynomial mutation from the island's
:class:`~.archive.ParetoArchive`, but

* parents are drawn uniformly from the members (no tournament), and
* survival is by hypervolume: whole fronts are kept while they fit; from the front that
  does not fit, the member with the smallest hypervolume contribution (moocore's
  ``hv_contributions``) leaves, the contributions are computed again, and so on until
  the population fits. Equal contributions: the newer row leaves first.

The contributions are measured on that front normalised per objective to [0, 1] (its
own best and worst), to the reference point ``1 + REFERENCE_OFFSET`` in every
objective, as pymoo's SMS-EMOA does, so survival does not depend on the objectives'
units. (The worst point + 1 in raw units made the extremes of a front whose objectives
span hundreds, early on DTLZ1 and ZDT4, contribute almost nothing, and the same run in
other units a different run; ``docs/benchmarks/moo.md`` has the grid before and after.)

``batch_size`` 1 is the original steady-state algorithm; larger batches remove several
members per generation one at a time. Needs moocore (``pip install 'mpievo[moo]'``).
"""

from __future__ import annotations

import numpy as np

from .nsga2 import NSGA2
from .pareto import front_ranks

#: the reference point's margin beyond the worst point, in units of the front's range
#: per objective: nadir + 10 %, the margin of the usual 1.1 x nadir for fronts from 0
REFERENCE_OFFSET = 0.1


def hypervolume_survivors(objectives: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` rows SMS-EMOA keeps (see the module docstring), ascending."""
    import moocore

    ranks = front_ranks(objectives)
    kept = []
    for rank in range(int(ranks.max()) + 1 if len(ranks) else 0):
        front = np.flatnonzero(ranks == rank)
        room = limit - len(kept)
        if room == 0:
            break
        if len(front) > room:
            kept += list(_reduce_front(moocore, objectives, front, room))
            break
        kept += list(front)
    return np.sort(np.asarray(kept, dtype=np.int64))


def _reduce_front(moocore, objectives: np.ndarray, front: np.ndarray, room: int) -> np.ndarray:
    """``room`` members of one front, removing the least hypervolume contributor each time."""
    front = front.copy()
    if not np.all(np.isfinite(objectives[front])):    # the invalid rows' front: keep the oldest
        return front[:room]
    points = normalized(objectives[front])
    reference = np.full(objectives.shape[1], 1.0 + REFERENCE_OFFSET)
    while len(front) > room:
        contributions = moocore.hv_contributions(points, ref=reference)
        leaving = np.lexsort((-front, contributions))[0]
        front, points = np.delete(front, leaving), np.delete(points, leaving, axis=0)
    return front


def normalized(points: np.ndarray) -> np.ndarray:
    """``points`` scaled per objective to [0, 1] by their own minimum and maximum (an
    objective with one value: 0)."""
    low, high = points.min(axis=0), points.max(axis=0)
    return (points - low) / np.where(high > low, high - low, 1.0)


class SMSEMOA(NSGA2):
    """SMS-EMOA island algorithm (see the module docstring); settings as :class:`NSGA2`.

    Example::

        result = mpievo.minimize(moo_problem("dtlz2", n_obj=3), algorithm="smsemoa", budget=20_000, islands=2)
    """

    name = "smsemoa"

    def init(self, problem, archive, rng) -> None:
        try:
            import moocore  # noqa: F401
        except ImportError as err:
            raise ValueError("expected moocore for smsemoa (pip install 'mpievo[moo]'), got an ImportError") from err
        super().init(problem, archive, rng)
        archive.survival = hypervolume_survivors

    def parents(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Draws: two (count,) integer arrays (parents a, then b), uniform over the members."""
        size = self.archive.size
        return rng.integers(0, size, count), rng.integers(0, size, count)
