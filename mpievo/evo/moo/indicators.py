"""Quality of a front: the hypervolume (moocore's), and the merge of several fronts.

The hypervolume of a set of minimised points is the volume they dominate up to a
``reference_point``; points that do not dominate it add nothing. It is computed by
moocore (``pip install 'mpievo[moo]'``), not here: :func:`hypervolume` is None without it.
"""

from __future__ import annotations

import numpy as np

from .pareto import nondominated


def hypervolume(points, reference_point) -> float | None:
    """The hypervolume of ``points`` ((n, m), minimised) up to ``reference_point`` ((m,)),
    0.0 for no point inside; None when moocore is not installed or there is no
    reference point.

    Example::

        hypervolume(np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([2.0, 2.0]))   # 3.0
    """
    if reference_point is None:
        return None
    try:
        import moocore
    except ImportError:
        return None
    ref = np.asarray(reference_point, dtype=np.float64)
    points = np.asarray(points, dtype=np.float64).reshape(-1, len(ref))
    inside = points[np.all(points < ref, axis=1)]
    return float(moocore.hypervolume(inside, ref=ref)) if len(inside) else 0.0


def merged_front(objectives, *columns) -> tuple[np.ndarray, ...]:
    """The non-dominated rows of several fronts stacked in ``objectives`` (invalid rows and
    repeated points dropped, the first copy kept), with the same rows of ``columns``.

    Example::

        objectives, islands = merged_front(np.array([[1.0, 2.0], [2.0, 3.0], [2.0, 1.0]]), np.array([0, 1, 1]))
        objectives, islands      # the rows [1, 2] and [2, 1], from islands 0 and 1
    """
    objectives = np.asarray(objectives, dtype=np.float64)
    keep = np.flatnonzero(np.all(np.isfinite(objectives), axis=1))
    _, first = np.unique(objectives[keep], axis=0, return_index=True)
    keep = keep[np.sort(first)]
    keep = keep[nondominated(objectives[keep])]
    return (objectives[keep], *(np.asarray(c)[keep] for c in columns))
