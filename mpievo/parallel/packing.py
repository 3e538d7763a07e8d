"""Fixed binary layout of migrants, so that transfers need no pickling.

Migrants travel along edges (source island -> destination island). Every edge
carries at most ``k`` migrants, so sender and receiver both know its size in
advance and the receiver can preallocate. One edge is a records block::

    count    int64            migrants actually present (<= k)
    fitness  float64[k, m]    minimised fitness (m = 1) or objectives (m = n_obj)
    ids      int64[k]
    births   int64[k]         generation each migrant was born in
    origins  int64[k]         island each migrant was born on

and a genome array ``dtype[k, dim]``. Between one pair of ranks, per migration, the
records blocks of all edges travel in one byte buffer (ascending (source,
destination) order), followed by each edge's genome array as its own message (same
order). Genomes are not copied into or out of a buffer: the sender sends the
emigrants' genome array itself (a zero-padded copy only when fewer than k leave),
the receiver receives into the genome array it hands on. A device island's
genomes stay device arrays here (``Communicator.exchange`` moves them on its device
path), and a device island receives into a device array.
"""

from __future__ import annotations

import numpy as np

from ..evo import device
from ..evo.migration_policy import Migrants


def empty_migrants(dim: int, dtype, n_obj: int = 1) -> Migrants:
    """A batch with no migrant."""
    return Migrants(np.empty((0, dim), dtype), np.empty((0,) if n_obj == 1 else (0, n_obj)), np.empty(0, np.int64),
                    np.empty(0, np.int64), np.empty(0, np.int64))


def migrant_count(migrants: Migrants) -> int:
    """Number of migrants in a batch."""
    return int(migrants.fitness.shape[0])


def concat_migrants(batches: list[Migrants], dim: int, dtype, n_obj: int = 1) -> Migrants:
    """One batch from several (in the given order); genomes cast to ``dtype``. A single
    batch of that dtype is returned as it is (no copy)."""
    if not batches:
        return empty_migrants(dim, dtype, n_obj)
    if len(batches) == 1:
        genomes = batches[0].genomes
        if device.is_device_array(genomes):
            return batches[0]._replace(genomes=device.to_device(genomes, dtype))
        return batches[0]._replace(genomes=genomes.astype(dtype, copy=False))
    return Migrants(device.concat([b.genomes for b in batches], dim, dtype),
                    *(np.concatenate([b[f] for b in batches]) for f in range(1, 5)))


class EdgeLayout:
    """Layout of one edge for ``k`` migrants of ``dim`` genes: a records block of
    ``nbytes`` bytes and a ``(k, dim)`` genome array.

    Args:
        k: migrants per edge (>= 0).
        dim: genes per genome (>= 1).
        dtype: genome dtype (float32, float64, bfloat16 or float16).
        n_obj: values per migrant's fitness (objectives of a Pareto island; 1: a scalar).
    """

    def __init__(self, k: int, dim: int, dtype, n_obj: int = 1):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"expected k >= 0 migrants per edge, got {k!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"expected dim >= 1, got {dim!r}")
        if isinstance(n_obj, bool) or not isinstance(n_obj, int) or n_obj < 1:
            raise ValueError(f"expected n_obj >= 1, got {n_obj!r}")
        self.k, self.dim, self.dtype, self.n_obj = k, dim, np.dtype(dtype), n_obj
        self.nbytes = 8 + (3 + n_obj) * 8 * k   # a multiple of 8: blocks stay aligned one after another

    def empty_genomes(self, on_device: bool = False):
        """A genome array to receive an edge's genomes into (a device array for a
        device island)."""
        if on_device:
            from numba import cuda

            return cuda.device_array((self.k, self.dim), self.dtype)
        return np.empty((self.k, self.dim), self.dtype)

    def pack(self, block: np.ndarray, migrants: Migrants) -> np.ndarray:
        """Write the records of ``migrants`` (at most k) into ``block`` (uint8,
        ``nbytes`` long) and return the genome array to send: the migrants' own when
        it is already ``(k, dim)`` C-contiguous of the layout's dtype, else a
        zero-padded copy.

        Raises:
            ValueError: more than k migrants or a genome of the wrong width.
        """
        n = migrant_count(migrants)
        if n > self.k:
            raise ValueError(f"expected at most {self.k} migrants per edge, got {n}")
        genomes = migrants.genomes
        if tuple(genomes.shape) != (n, self.dim):
            raise ValueError(f"expected migrant genomes of shape ({n}, {self.dim}), "
                             f"got {tuple(genomes.shape)}")
        count, fitness, ids, births, origins = self._views(block)
        count[0] = n
        fitness[:n], ids[:n] = migrants.fitness, migrants.ids
        births[:n], origins[:n] = migrants.births, migrants.origins
        if device.is_device_array(genomes):
            return self._device_genomes(genomes, n)
        if n == self.k and genomes.dtype == self.dtype and genomes.flags.c_contiguous:
            return genomes
        padded = np.zeros((self.k, self.dim), self.dtype)
        padded[:n] = genomes
        return padded

    def _device_genomes(self, genomes, n: int):
        """A device island's emigrants as sent: as they are when k of the layout's
        dtype (emigrants are fresh contiguous copies), else in a (k, dim) device array
        whose rows past n are not sent data (the receiver reads the count)."""
        genomes = device.to_device(genomes, self.dtype)
        if n == self.k:
            return genomes
        from mpievo.kernels.cuda import rows as cuda_rows

        padded = self.empty_genomes(on_device=True)
        if n:
            cuda_rows.copy_rows(genomes, np.arange(n), padded, np.arange(n))
        return padded

    def unpack(self, block: np.ndarray, genomes: np.ndarray) -> Migrants:
        """The migrants of ``block`` and the received ``genomes`` (records copied, so the
        block may be reused; genomes a view of ``genomes``).

        Raises:
            ValueError: a count outside [0, k] (a corrupted or mismatched message), or
                a genome array of the wrong shape or dtype.
        """
        count, fitness, ids, births, origins = self._views(block)
        n = int(count[0])
        if not 0 <= n <= self.k:
            raise ValueError(f"expected a migrant count in [0, {self.k}], got {n} "
                             "(sender and receiver disagree on the layout)")
        if tuple(genomes.shape) != (self.k, self.dim) or np.dtype(genomes.dtype) != self.dtype:
            raise ValueError(f"expected genomes of shape ({self.k}, {self.dim}) and dtype {self.dtype}, "
                             f"got {tuple(genomes.shape)} {genomes.dtype}")
        return Migrants(genomes[:n], *(a[:n].copy() for a in (fitness, ids, origins, births)))

    def _views(self, block: np.ndarray):
        if block.dtype != np.uint8 or block.shape != (self.nbytes,):
            raise ValueError(f"expected a uint8 block of {self.nbytes} bytes, got "
                             f"{block.dtype} of shape {block.shape}")
        k, m = self.k, self.n_obj
        count = block[:8].view(np.int64)
        fitness = block[8:8 + 8 * k * m].view(np.float64)
        fitness = fitness if m == 1 else fitness.reshape(k, m)
        ints = block[8 + 8 * k * m:].view(np.int64).reshape(3, k)
        return count, fitness, ints[0], ints[1], ints[2]


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
