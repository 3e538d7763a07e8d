"""An :class:`~mpievo.evo.archive.Archive` whose genomes live on the GPU.

The records (fitness, ids, births, origins, hashes) stay on the host: they are a few
numbers per member, and every decision -- which candidates enter, which slots they
take, who migrates -- is made there, exactly as on a host archive, so a device
archive keeps the same members as a host archive given the same fitness. Only the
row moves run on the device (:mod:`mpievo.kernels.cuda.rows`): copying children
into slots, compacting on ``retain``, hashing and comparing rows for ``unique``.

Genomes given from the host (an initial population from a problem's ``initial``
hook, immigrants from a host island, a checkpoint) are copied to the device in
bounded chunks; :meth:`host_genomes` (checkpoints) copies them back the same way.
"""

from __future__ import annotations

import numpy as np

from . import device
from .archive import Archive
from .archive_records import row_hashes
from .half import is_half


class DeviceArchive(Archive):
    """Archive with a Numba device array ``(capacity, dim)`` of genomes (same arguments)."""

    on_device = True

    def _allocate(self):
        from numba import cuda

        # uninitialised: slots past ``size`` are never read (no host-sized zeros to upload)
        return cuda.device_array((self.capacity, self.dim), self.dtype)

    def as_rows(self, genomes, name: str = "genomes"):
        """``genomes`` (device or host) as device rows of this archive's dtype."""
        shape = tuple(genomes.shape)
        if len(shape) != 2 or shape[1] != self.dim:
            raise ValueError(f"expected {name} of shape (n, {self.dim}), got {shape}")
        return device.to_device(genomes, self.dtype)

    def take(self, slots):
        from mpievo.kernels.cuda import rows as cuda_rows

        return cuda_rows.take_rows(self.genomes, np.asarray(slots, dtype=np.int64))

    def row(self, slot: int) -> np.ndarray:
        return self._genomes[int(slot)].copy_to_host()

    def host_genomes(self) -> np.ndarray:
        from mpievo.kernels.cuda import rows as cuda_rows

        return cuda_rows.to_host(self.genomes)

    def _row_hashes(self, genomes) -> np.ndarray:
        from mpievo.kernels.cuda import rows as cuda_rows

        if is_half(self.dtype):   # the device hash knows float32/64 only: hashed on the host
            return row_hashes(device.to_host(genomes))
        return cuda_rows.hash_rows(genomes)

    def _rows_equal(self, a, ia, b, ib) -> np.ndarray:
        from mpievo.kernels.cuda import rows as cuda_rows

        ia, ib = np.asarray(ia, np.int64), np.asarray(ib, np.int64)
        if len(ia) == 0:
            return np.zeros(0, bool)
        if is_half(self.dtype):   # the rows of hash matches (few), compared on the host
            a, b = (device.to_host(device.take(rows, i)) for rows, i in ((a, ia), (b, ib)))
            return np.all(a == b, axis=1)
        return cuda_rows.rows_equal(a, ia, b, ib)

    def _copy_rows(self, genomes, rows, slots) -> None:
        from mpievo.kernels.cuda import rows as cuda_rows

        if len(rows):
            cuda_rows.copy_rows(genomes, np.asarray(rows, np.int64), self._genomes,
                                np.asarray(slots, np.int64))

    def _retain_rows(self, slots) -> None:
        from mpievo.kernels.cuda import rows as cuda_rows

        if len(slots):
            cuda_rows.retain_rows(self._genomes, np.asarray(slots, np.int64))
