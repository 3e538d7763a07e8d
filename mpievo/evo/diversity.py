"""How spread an island's members are: the mean distance of the members to their
centroid, each gene scaled by the box's width, divided by sqrt(dim) (0 when all members
coincide, ~0.29 for members uniform in the box). The portfolio's finishing and restart
rules read it (:mod:`mpievo.parallel.scheme`); a log point reports it.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import operators as kernels
from . import genomes, half


def archive_diversity(archive, problem, on_device: bool = False) -> float:
    """The diversity (module docstring) of ``archive``'s members for ``problem``'s box;
    seeded genomes are measured on the genomes their recipes make, half-precision rows
    widened a tile at a time (no float32 copy), device rows on the device.

    Example::

        archive_diversity(island.archive, island.problem)     # what Island.diversity() returns
    """
    if archive.size == 0:
        return 0.0
    of_rows = getattr(genomes.encoding_of(problem), "diversity", None)
    if of_rows is not None:      # seeded: rows are recipes, measured on their genomes
        return of_rows(archive.genomes)
    width = problem.width
    if on_device:
        from mpievo.kernels.cuda import rows as cuda_rows

        out = cuda_rows.centroid_distances(_measured_rows(archive, on_device), width)
    elif half.is_half(archive.dtype):    # widened a tile at a time: no float32 copy
        out = half.centroid_distances(archive.genomes, width, np.empty(archive.size))
    else:
        out = np.empty(archive.size)
        kernels.centroid_distances(_measured_rows(archive, on_device), width, out)  # no float64 copy
    return float(np.mean(out) / np.sqrt(problem.dim))


def _measured_rows(archive, on_device: bool):
    """The members' rows as the distance kernels read them: half-precision rows widened
    to float32 (a copy; Numba has no bfloat16), others as they are."""
    rows = archive.genomes
    if not half.is_half(archive.dtype):
        return rows
    if on_device:
        from mpievo.kernels.cuda import half as cuda_half

        return cuda_half.widen_rows(rows, np.arange(rows.shape[0]), archive.dtype)
    return half.widen_into(rows, np.empty(rows.shape, np.float32))
