"""Pareto dominance for minimised objectives: non-dominated sorting and crowding.

Objectives are an ``(n, m)`` float64 array, one row per genome, every column
minimised; a row of +inf (an invalid evaluation) is dominated by every finite row.
Everything is vectorised numpy over the ``(n, n)`` dominance matrix (populations of a
few hundred; the matrix of 1,000 rows is 1 MB), and every order is deterministic:
ties go to the lower row index.

``survivor_order`` is NSGA-II's (Deb et al. 2002) ranking: by front, then by crowding
distance (larger first) inside the front, so its first ``k`` rows are the ``k``
survivors of NSGA-II's environmental selection.
"""

from __future__ import annotations

import numpy as np


def dominance(objectives: np.ndarray) -> np.ndarray:
    """(n, n) bool: ``[i, j]`` is True when row i dominates row j (no worse in every
    objective, better in one).

    Example:
        >>> import numpy as np
        >>> dominance(np.array([[1., 2.], [2., 3.], [2., 1.]]))
        array([[False,  True, False],
               [False, False, False],
               [False,  True, False]])
    """
    f = np.asarray(objectives, dtype=np.float64)
    a, b = f[:, None, :], f[None, :, :]
    return np.all(a <= b, axis=2) & np.any(a < b, axis=2)


def dominated_by_any(candidates: np.ndarray, residents: np.ndarray) -> np.ndarray:
    """(n,) bool: True for each candidate row dominated by at least one resident row."""
    c, r = np.asarray(candidates, np.float64)[:, None, :], np.asarray(residents, np.float64)[None, :, :]
    return np.any(np.all(r <= c, axis=2) & np.any(r < c, axis=2), axis=1)


def front_ranks(objectives: np.ndarray) -> np.ndarray:
    """(n,) int64: 0 for the non-dominated rows, 1 for those dominated only by rank 0, ...

    Example:
        >>> import numpy as np
        >>> front_ranks(np.array([[1., 4.], [2., 2.], [3., 3.], [4., 1.]]))
        array([0, 0, 1, 0])
    """
    dom = dominance(objectives)
    n = dom.shape[0]
    ranks = np.full(n, -1, np.int64)
    dominators = dom.sum(axis=0)
    rank = 0
    current = np.flatnonzero(dominators == 0)
    while len(current):
        ranks[current] = rank
        dominators = dominators - dom[current].sum(axis=0)
        dominators[ranks >= 0] = -1      # placed rows never come back
        current = np.flatnonzero(dominators == 0)
        rank += 1
    return ranks


def nondominated(objectives: np.ndarray) -> np.ndarray:
    """(n,) bool: the rows no other row dominates.

    Example:
        >>> import numpy as np
        >>> nondominated(np.array([[1., 4.], [2., 2.], [3., 3.], [4., 1.]]))
        array([ True,  True, False,  True])
    """
    return ~np.any(dominance(objectives), axis=0)


def crowding_distances(objectives: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """(n,) float64 crowding distance of each row inside its front: the sum over objectives
    of the gap between its neighbours, divided by the front's range; the extremes of
    every objective get +inf. Objectives with no finite range add nothing.

    Example:
        >>> import numpy as np
        >>> objectives = np.array([[1., 4.], [2., 2.], [3., 3.], [4., 1.]])
        >>> crowding_distances(objectives, front_ranks(objectives))
        array([inf,  2., inf, inf])
    """
    f = np.asarray(objectives, dtype=np.float64)
    n, m = f.shape
    out = np.zeros(n)
    for rank in np.unique(ranks):
        members = np.flatnonzero(ranks == rank)
        if len(members) <= 2:
            out[members] = np.inf
            continue
        values = f[members]
        for j in range(m):
            order = np.argsort(values[:, j], kind="stable")
            column = values[order, j]
            span = column[-1] - column[0]
            out[members[order[[0, -1]]]] = np.inf
            if np.isfinite(span) and span > 0:
                out[members[order[1:-1]]] += (column[2:] - column[:-2]) / span
    return out


def survivor_order(objectives: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows from best to worst by (front rank, larger crowding distance, lower index).

    Returns:
        (order, ranks, crowding) with ranks and crowding per row (not reordered).

    Example:
        >>> import numpy as np
        >>> order, ranks, crowding = survivor_order(np.array([[1., 4.], [2., 2.], [3., 3.], [4., 1.]]))
        >>> order                                  # the extremes first, the dominated row last
        array([0, 3, 1, 2])
    """
    ranks = front_ranks(objectives)
    crowding = crowding_distances(objectives, ranks)
    order = np.lexsort((np.arange(len(ranks)), -crowding, ranks))
    return order, ranks, crowding
