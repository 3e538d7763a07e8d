"""The records an archive keeps beside its genomes, apart from the archive itself:
member ids (unique across islands), row versions (equal versions are equal bytes, so a
checkpoint writes a row once: :mod:`mpievo.io.rows`), fitness with non-finite values
ranked worst, and row hashes (duplicate detection).
"""

from __future__ import annotations

import threading

import numpy as np

from mpievo.kernels import operators as kernels
from .half import GENOME_DTYPES, genome_dtype

_DTYPES = tuple(genome_dtype(name) for name in GENOME_DTYPES)
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}

_version_lock = threading.Lock()
_next_version = 1


def fresh_versions(count: int) -> np.ndarray:
    """``count`` row versions never handed out before in this process (int64, ascending).

    Example:
        >>> a, b = fresh_versions(2), fresh_versions(1)
        >>> bool(b[0] > a[1])
        True
    """
    global _next_version
    with _version_lock:
        start = _next_version
        _next_version += int(count)
    return np.arange(start, start + int(count), dtype=np.int64)


class VersionedRows(np.ndarray):
    """A read-only view of an archive's genomes that knows their row versions.

    ``row_versions[i]`` is the version of row ``i`` (see the module docstring); arrays
    derived from the view (slices, casts) do not carry them.

    Example:
        >>> from mpievo.evo.archive import Archive
        >>> archive = Archive(4, 3)
        >>> archive.replace([0, 1], np.ones((2, 3)), [1.0, 2.0], [7, 8], 0, 0)
        >>> rows = archive.state_dict(copy=False)["genomes"]
        >>> rows.row_versions.shape
        (2,)
    """

    row_versions: np.ndarray | None = None

    @classmethod
    def of(cls, rows: np.ndarray, versions: np.ndarray) -> "VersionedRows":
        """A read-only view of ``rows`` (n, dim) carrying a copy of ``versions`` (n,)."""
        view = rows.view(cls)
        view.row_versions = np.array(versions, dtype=np.int64)
        view.flags.writeable = False
        return view

    def __array_finalize__(self, obj) -> None:
        self.row_versions = None


#: ids are island_index * ID_STRIDE + counter, unique across islands.
ID_STRIDE = 2**40


def first_id(island_index: int, start: int, count: int) -> int:
    """The first of the ids ``island_index * 2**40 + [start, start + count)``.

    Raises:
        OverflowError: the island's counter would pass 2**40.
    """
    if start + count > ID_STRIDE:
        raise OverflowError(f"expected fewer than {ID_STRIDE} genomes per island, got {start + count}")
    return island_index * ID_STRIDE + start


def make_ids(island_index: int, start: int, count: int) -> np.ndarray:
    """Ids ``island_index * 2**40 + [start, start + count)`` (raises as :func:`first_id`).

    Example::

        make_ids(3, 0, 2)        # array([3298534883328, 3298534883329]): island 3's first two ids
    """
    return np.arange(count, dtype=np.int64) + np.int64(first_id(island_index, start, count))


def sanitize_fitness(fitness) -> tuple[np.ndarray, int]:
    """Fitness as float64 with every non-finite value replaced by +inf.

    Returns:
        (fitness, number of non-finite values); the input is not modified.

    Example::

        sanitize_fitness(np.array([1.0, np.nan, -np.inf]))     # (array([ 1., inf, inf]), 2)
    """
    f = np.asarray(fitness, dtype=np.float64)
    finite = np.isfinite(f)
    bad = f.size - int(np.count_nonzero(finite))
    if bad:
        f = np.where(finite, f, np.inf)
    return f, bad


def row_hashes(genomes: np.ndarray) -> np.ndarray:
    """A uint64 hash of each row's values (-0.0 and 0.0 hash alike)."""
    genomes = np.ascontiguousarray(genomes)
    if genomes.dtype not in _DTYPES:
        raise TypeError(f"expected genomes of a dtype among {GENOME_DTYPES}, got {genomes.dtype}")
    bits = (genomes + genomes.dtype.type(0)).view(_BITS[genomes.dtype.itemsize])
    out = np.empty(genomes.shape[0], np.uint64)
    kernels.hash_rows(bits, out)
    return out
