"""The base models of ``delta`` and ``seeded`` genomes: a ``(count, dim)`` array held once.

A :class:`BaseModels` describes where the bases come from (an array, a ``.npy``
file, or a function that fills an array) without holding them: the parallel layer
decides where they live. Under MPI the ranks of a node share one copy in a
shared-memory window (:func:`mpievo.parallel.shared_bases.share_bases`); a single process
loads them into its own memory on first use. Either way :meth:`attach` hands the
filled array over and the encodings read :attr:`array` (read-only).

Checkpoints store the bases by :attr:`reference` and :attr:`checksum` (BLAKE2b of
the raw bytes, shape and dtype), never the bases themselves; a resume with other
bases is refused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..kernels.host import BFLOAT16

#: dtypes bases may have: half-precision models' sources stay in their dtype (2 bytes a gene)
BASES_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BFLOAT16)
#: bytes hashed at a time (the bases may be far larger than memory we want to copy)
_HASH_CHUNK = 64 << 20


def checksum(array: np.ndarray) -> str:
    """BLAKE2b-128 (hex) of ``array``'s shape, dtype and bytes, hashed in chunks."""
    h = hashlib.blake2b(digest_size=16)
    kind = array.dtype.str if array.dtype.kind != "V" else array.dtype.name   # bfloat16 is '<V2'
    h.update(f"{array.shape}|{kind}|".encode())
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    for start in range(0, flat.size, _HASH_CHUNK):
        h.update(flat[start:start + _HASH_CHUNK])
    return h.hexdigest()


class BaseModels:
    """Base models for delta/seeded genomes (see the module docstring).

    Args:
        source: an array ``(count, dim)`` or ``(dim,)`` (one base); a path to a ``.npy``
            file of such an array (read memory-mapped, copied once per node); or a
            callable ``load(out)`` that fills a ``(count, dim)`` array (then ``shape``
            and ``dtype`` are required).
        shape, dtype: of the bases; taken from an array or file when not given.
        reference: what a checkpoint records as the bases' origin (default: the
            path, or ``"in-memory"``).

    Example::

        import numpy as np
        bases = BaseModels(np.zeros((2, 1000), np.float32))      # two base models of 1000 genes
        problem = Problem(f, 1000, -1, 1, bases=bases)             # engine.genome = "delta" or "seeded"
    """

    def __init__(self, source, *, shape: tuple[int, int] | None = None, dtype=None,
                 reference: str | None = None):
        self._source = source
        self._array: np.ndarray | None = None
        self._checksum: str | None = None
        if callable(source):
            if shape is None or dtype is None:
                raise ValueError("expected shape and dtype with a loader function, got "
                                 f"shape={shape!r}, dtype={dtype!r}")
            self.reference = reference or getattr(source, "__qualname__", "loader")
        else:
            if isinstance(source, (str, Path)):
                peek = np.load(source, mmap_mode="r")
                self.reference = reference or str(Path(source).resolve())
            else:
                peek = np.asarray(source)
                self.reference = reference or "in-memory"
            shape = peek.shape if peek.ndim == 2 else (1,) + peek.shape
            dtype = peek.dtype if dtype is None else dtype
        shape = tuple(int(n) for n in shape)
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"expected bases of shape (count >= 1, dim >= 1), got {shape}")
        self.shape = shape
        self.dtype = np.dtype(dtype)
        if self.dtype not in BASES_DTYPES:
            raise TypeError(f"expected bases of dtype float32, float64, float16 or bfloat16, got {self.dtype}")

    @property
    def count(self) -> int:
        return self.shape[0]

    @property
    def dim(self) -> int:
        return self.shape[1]

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"BaseModels({self.reference!r}, shape={self.shape}, dtype={self.dtype.name})"

    def load_into(self, out: np.ndarray) -> None:
        """Fill ``out`` (``shape``, ``dtype``) from the source."""
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError(f"expected an array of shape {self.shape} and dtype {self.dtype}, "
                             f"got {out.shape} {out.dtype}")
        if callable(self._source):
            self._source(out)
            return
        data = (np.load(self._source, mmap_mode="r") if isinstance(self._source, (str, Path))
                else np.asarray(self._source))
        out[...] = data.reshape(self.shape)

    def attach(self, array: np.ndarray, digest: str | None = None) -> None:
        """Use ``array`` (already filled by :meth:`load_into`, e.g. in a shared window)
        as the bases; ``digest`` is its :func:`checksum` when the caller has it."""
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ValueError(f"expected bases of shape {self.shape} and dtype {self.dtype}, "
                             f"got {array.shape} {array.dtype}")
        view = array.view()
        view.flags.writeable = False
        self._array = view
        self._checksum = digest
        self._device = None

    def detach(self) -> None:
        """Forget the attached array (before the memory it lives in is freed); a later
        use loads the bases again."""
        self._array = None

    def on_device(self, row: int | None = None):
        """The bases (or base ``row`` only) on this process's GPU (a Numba device array),
        copied on first use in bounded chunks and kept: one copy per process, shared by
        every island and fitness of the process over these bases (a rank drives one GPU).
        A row is a view of the whole when that is already there, so no base is on the
        GPU twice."""
        if row is not None and row not in range(self.shape[0]):
            raise IndexError(f"expected a base row in 0..{self.shape[0] - 1}, got {row}")
        bases = self.array             # first: loading attaches, which empties the cache
        cache = getattr(self, "_device", None)
        if cache is None:
            cache = self._device = {}
        if None in cache:
            return cache[None] if row is None else cache[None][row]
        if row not in cache:
            from mpievo.kernels.cuda import rows as cuda_rows

            host = bases if row is None else bases[row]
            if self.dtype.itemsize == 2:     # half bases: float32 on the device (its kernels' dtype)
                cache[row] = _widened_on_device(host)
            else:
                cache[row] = cuda_rows.from_host(np.ascontiguousarray(host))
        return cache[row]

    @property
    def attached(self) -> bool:
        return self._array is not None

    @property
    def array(self) -> np.ndarray:
        """The bases ``(count, dim)``, read-only; loaded into this process on first use
        when nothing was attached."""
        if self._array is None:
            own = np.empty(self.shape, self.dtype)
            self.load_into(own)
            self.attach(own)
        return self._array

    @property
    def checksum(self) -> str:
        if self._checksum is None:
            self._checksum = checksum(self.array)
        return self._checksum


def _widened_on_device(host: np.ndarray):
    """A float32 device copy of half-precision host rows, widened in chunks of
    :data:`_HASH_CHUNK` bytes on the host (no genome-sized float32 host copy)."""
    from numba import cuda

    from ..kernels.cuda import rows as cuda_rows
    from .half import widen_into

    out = cuda.device_array(host.shape, np.float32)
    flat, dst = host.reshape(-1), out.reshape(-1)
    step = _HASH_CHUNK // 4
    for start in range(0, flat.size, step):
        part = flat[start:start + step]
        cuda_rows.from_host(widen_into(part, np.empty(part.shape, np.float32)), dst[start:start + part.size])
    return out


def as_bases(value) -> BaseModels | None:
    """``value`` as :class:`BaseModels` (None stays None)."""
    if value is None or isinstance(value, BaseModels):
        return value
    return BaseModels(value)


