"""How spread an island's members are: the mean distance of the members to their
centroid, each gene scaled by the box's width, divided by sqrt(dim) (0 when all members
coincide, ~0.29 for members uniform in the box). The portfolio's finishing and restart
rules read it (:mod:`mpievo.parallel.scheme`); a log point reports it.

Genomes of more than :data:`MEASURED_GENES` genes (models) are measured on every k-th
gene, k = ceil(dim / MEASURED_GENES): the same genes every time, so the figure is as
deterministic as the exact one, and a log point of a 124 M-gene bfloat16 archive of 4
members costs milliseconds instead of a second (the exact measure reads every row once).
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import operators as kernels
from . import genomes, half

#: above this many genes, diversity is measured on an evenly strided subset of this size
MEASURED_GENES = 1 << 20


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
    if not on_device and problem.dim > MEASURED_GENES:
        step = -(-problem.dim // MEASURED_GENES)
        rows = np.ascontiguousarray(archive.genomes[:archive.size, ::step])
        return _host_diversity(rows, np.ascontiguousarray(np.broadcast_to(width, (problem.dim,))[::step]))
    if not on_device:
        return _host_diversity(archive.genomes, width)
    from mpievo.kernels.cuda import rows as cuda_rows

    out = cuda_rows.centroid_distances(_device_rows(archive), width)
    return float(np.mean(out) / np.sqrt(problem.dim))


def _host_diversity(rows: np.ndarray, width) -> float:
    """The diversity of host ``rows`` (n, d) with gene widths ``width``: half-precision rows
    widened a tile at a time (no float32 copy), others read as they are (no float64 copy)."""
    out = np.empty(rows.shape[0])
    if half.is_half(rows.dtype):
        half.centroid_distances(rows, width, out)
    else:
        kernels.centroid_distances(rows, width, out)
    return float(np.mean(out) / np.sqrt(rows.shape[1]))


def _device_rows(archive):
    """The members' device rows as the distance kernel reads them: half-precision rows
    widened to float32 (a copy; Numba has no bfloat16), others as they are."""
    rows = archive.genomes
    if not half.is_half(archive.dtype):
        return rows
    from mpievo.kernels.cuda import half as cuda_half

    return cuda_half.widen_rows(rows, np.arange(rows.shape[0]), archive.dtype)
