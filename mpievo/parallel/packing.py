"""Fixed binary layout of migrants, so that transfers need no pickling.

Migrants travel along edges (source island -> destination island). Every edge
carries at most ``k`` migrants, so sender and receiver both know the size of its
block in advance and the receiver can preallocate its buffer. One block is::

    count    int64            migrants actually present (<= k)
    fitness  float64[k]       minimised fitness
    ids      int64[k]
    births   int64[k]         generation each migrant was born in
    origins  int64[k]         island each migrant was born on
    genomes  dtype[k, dim]    then zero padding to a multiple of 8 bytes

All blocks between one pair of ranks are concatenated, in ascending (source,
destination) order, into one byte buffer: one message per rank pair per migration.
"""

from __future__ import annotations

import numpy as np

from ..evo.migration import Migrants

_ALIGN = 8


def empty_migrants(dim: int, dtype) -> Migrants:
    """A batch with no migrant."""
    return Migrants(np.empty((0, dim), dtype), np.empty(0), np.empty(0, np.int64),
                    np.empty(0, np.int64), np.empty(0, np.int64))


def migrant_count(migrants: Migrants) -> int:
    """Number of migrants in a batch."""
    return int(migrants.fitness.shape[0])


def concat_migrants(batches: list[Migrants], dim: int, dtype) -> Migrants:
    """One batch from several (in the given order); genomes cast to ``dtype``."""
    if not batches:
        return empty_migrants(dim, dtype)
    return Migrants(np.concatenate([b.genomes.astype(dtype, copy=False) for b in batches]),
                    *(np.concatenate([b[f] for b in batches]) for f in range(1, 5)))


class EdgeLayout:
    """Byte layout of one edge's block for ``k`` migrants of ``dim`` genes.

    Args:
        k: migrants per edge (>= 0).
        dim: genes per genome (>= 1).
        dtype: genome dtype (float32 or float64).
    """

    def __init__(self, k: int, dim: int, dtype):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"expected k >= 0 migrants per edge, got {k!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"expected dim >= 1, got {dim!r}")
        self.k, self.dim, self.dtype = k, dim, np.dtype(dtype)
        self._records = 8 + 4 * 8 * k
        genome_bytes = k * dim * self.dtype.itemsize
        self.nbytes = self._records + -(-genome_bytes // _ALIGN) * _ALIGN

    def pack(self, block: np.ndarray, migrants: Migrants) -> None:
        """Write ``migrants`` (at most k) into ``block`` (uint8, ``nbytes`` long).

        Raises:
            ValueError: more than k migrants or a genome of the wrong width.
        """
        n = migrant_count(migrants)
        if n > self.k:
            raise ValueError(f"expected at most {self.k} migrants per edge, got {n}")
        if migrants.genomes.shape != (n, self.dim):
            raise ValueError(f"expected migrant genomes of shape ({n}, {self.dim}), "
                             f"got {migrants.genomes.shape}")
        count, fitness, ids, births, origins, genomes = self._views(block)
        count[0] = n
        fitness[:n], ids[:n] = migrants.fitness, migrants.ids
        births[:n], origins[:n] = migrants.births, migrants.origins
        genomes[:n] = migrants.genomes

    def unpack(self, block: np.ndarray) -> Migrants:
        """Read the migrants of ``block`` (copies; the block may be reused afterwards).

        Raises:
            ValueError: a count outside [0, k] (a corrupted or mismatched message).
        """
        count, fitness, ids, births, origins, genomes = self._views(block)
        n = int(count[0])
        if not 0 <= n <= self.k:
            raise ValueError(f"expected a migrant count in [0, {self.k}], got {n} "
                             "(sender and receiver disagree on the layout)")
        return Migrants(genomes[:n].copy(), fitness[:n].copy(), ids[:n].copy(),
                        origins[:n].copy(), births[:n].copy())

    def _views(self, block: np.ndarray):
        if block.dtype != np.uint8 or block.shape != (self.nbytes,):
            raise ValueError(f"expected a uint8 block of {self.nbytes} bytes, got "
                             f"{block.dtype} of shape {block.shape}")
        k = self.k
        words = block[:self._records]
        count = words[:8].view(np.int64)
        fitness = words[8:8 + 8 * k].view(np.float64)
        ints = words[8 + 8 * k:].view(np.int64).reshape(3, k)
        genomes = block[self._records:self._records + k * self.dim * self.dtype.itemsize]
        return count, fitness, ints[0], ints[1], ints[2], genomes.view(self.dtype).reshape(k, self.dim)


class HashLayout:
    """Byte layout of a receiver's member hashes (elite-unique migration), ``capacity`` slots.

    One block: ``count int64`` then ``uint64[capacity]``.
    """

    def __init__(self, capacity: int):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"expected capacity >= 1, got {capacity!r}")
        self.capacity = capacity
        self.nbytes = 8 * (capacity + 1)

    def pack(self, block: np.ndarray, hashes: np.ndarray) -> None:
        n = int(hashes.shape[0])
        if n > self.capacity:
            raise ValueError(f"expected at most {self.capacity} hashes, got {n}")
        words = block.view(np.uint64)
        words[0] = n
        words[1:1 + n] = hashes

    def unpack(self, block: np.ndarray) -> np.ndarray:
        words = block.view(np.uint64)
        n = int(words[0])
        if n > self.capacity:
            raise ValueError(f"expected at most {self.capacity} hashes, got {n}")
        return words[1:1 + n].copy()
