"""Persistent device buffers of one island's breeding: allocated once, reused every generation.

A generation's small inputs -- parent indices, interpolation weights, step sizes --
and its mutation counts would otherwise cost one device allocation and one
synchronous upload from pageable memory each (every such upload first waits for
the GPU), plus an allocation for the counts. A :class:`BreedWorkspace` packs them
into one pinned host buffer that mirrors one device buffer::

    idx_a | idx_b | counts (int64, n each) | omega | steps (genome dtype, n each)

and moves them in one asynchronous upload on the island's own stream (the counts
section goes up as zeros: no separate clear), then one download of the counts.
Sections are 8-byte aligned views of the two buffers, made once.

:func:`scratch` keeps the temporaries of the built-in problems' evaluation (partial
sums, the fitness before its download) and the box's counters per thread, so neither
evaluating nor bounding allocates.

The island's stream is an ordinary (blocking) CUDA stream, so work on it is ordered
with the legacy default stream that the archive's row moves and the built-in
problems use (with Numba's per-thread default stream, which gives no such order,
the workspace uses that stream instead); the counts download synchronises it, so a
generation's breeding is complete when :meth:`BreedWorkspace.read_counts` returns.
Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .reduce import is_device

_INDEX = np.dtype(np.int64)


def island_stream():
    """A new stream for one island's breeding: one ordered with the legacy default stream,
    or the per-thread default stream where Numba uses that (NUMBA_CUDA_PER_THREAD_DEFAULT_STREAM)
    and a new stream would run unordered with the archive's and evaluation's work."""
    from numba import cuda
    from numba.cuda.core import config

    if getattr(config, "CUDA_PER_THREAD_DEFAULT_STREAM", False):
        return cuda.per_thread_default_stream()
    return cuda.stream()


def _sections(n: int, dtype: np.dtype) -> tuple[dict, int]:
    """name -> (byte offset, dtype) of the packed layout, and its total bytes."""
    layout, offset = {}, 0
    for name, section_dtype in (("idx_a", _INDEX), ("idx_b", _INDEX), ("counts", _INDEX),
                                ("omega", dtype), ("steps", dtype)):
        layout[name] = (offset, section_dtype)
        offset += -(-n * section_dtype.itemsize // 8) * 8   # keep the next section aligned
    return layout, offset


class BreedWorkspace:
    """Device buffers for breeding ``n`` children of genome dtype ``dtype`` (float32/64).

    Args:
        n: children per generation (>= 1).
        dtype: the genome dtype the weights and step sizes are in.
        stream: numba stream to work on (default: :func:`island_stream`).

    Raises:
        ValueError: n < 1. TypeError: not float32 or float64.
    """

    def __init__(self, n: int, dtype, *, stream=None):
        from numba import cuda

        dtype = np.dtype(dtype)
        if n < 1:
            raise ValueError(f"expected a workspace for n >= 1 children, got {n}")
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"expected a float32 or float64 genome dtype, got {dtype}")
        self.n, self.dtype = int(n), dtype
        layout, nbytes = _sections(self.n, dtype)
        self._host = cuda.pinned_array(nbytes, np.uint8)
        self._device = cuda.device_array(nbytes, np.uint8)
        self.stream = island_stream() if stream is None else stream

        def view(buffer, name):
            offset, section_dtype = layout[name]
            return buffer[offset:offset + self.n * section_dtype.itemsize].view(section_dtype)

        self.host = {name: view(self._host, name) for name in layout}
        self.device = {name: view(self._device, name) for name in layout}

    def fits(self, n: int, dtype) -> bool:
        """True when this workspace is laid out for ``n`` children of ``dtype``."""
        return n == self.n and np.dtype(dtype) == self.dtype

    def require(self, n: int, dtype) -> "BreedWorkspace":
        """This workspace, when it fits ``n`` children of ``dtype``.

        Raises:
            ValueError: it is laid out for another number of children or dtype.
        """
        if not self.fits(n, dtype):
            raise ValueError(f"expected a workspace for {n} children of {np.dtype(dtype)}, got one for "
                             f"{self.n} of {self.dtype}")
        return self

    def upload(self, steps=None, idx_a=None, idx_b=None, omega=None) -> dict:
        """Pack the host inputs given (None: not used this call) and upload them with zeroed
        counts in one transfer on :attr:`stream`; device arrays given are used as they are.

        Returns:
            name -> the (n,) device array to launch with, for "counts" and each input
            given.

        Raises:
            ValueError: an input of another length.
        """
        # the previous upload may still be reading the pinned buffer (breeding without
        # mutation never downloads the counts): wait for it before writing (idle: cheap)
        self.stream.synchronize()
        given = {"steps": steps, "idx_a": idx_a, "idx_b": idx_b, "omega": omega}
        used = {"counts": self.device["counts"]}
        for name, value in given.items():
            if value is None:
                continue
            if is_device(value):
                used[name] = value
                continue
            value = np.asarray(value)
            if value.shape != (self.n,):
                raise ValueError(f"expected {name} of shape ({self.n},), got {value.shape}")
            self.host[name][:] = value   # cast to the section's dtype, as the kernels take it
            used[name] = self.device[name]
        self.host["counts"][:] = 0
        self._device.copy_to_device(self._host, stream=self.stream)
        return used

    def read_counts(self, out: np.ndarray) -> np.ndarray:
        """The counts section downloaded into host ``out`` ((n,) int64); waits for the stream."""
        self.device["counts"].copy_to_host(self.host["counts"], stream=self.stream)
        self.stream.synchronize()
        out[:] = self.host["counts"]
        return out


# ------------------------------------------------------------------ scratch
#: scratch arrays kept per thread (least recently used dropped first)
SCRATCH_ENTRIES = 16
_LOCAL = threading.local()


def scratch(name: str, shape: tuple, dtype, stream=0):
    """A device array for a temporary result, reused by this thread's later calls with
    the same ``name``, shape, dtype and stream instead of allocating again.

    Reuse is safe where the previous holder is done with it by the time work queued
    after it on the same stream runs: a kernel's partial results, or a result that is
    downloaded before its function returns. Each thread has its own arrays (islands in
    threads never share one); the stream is kept alive with its entry, so its ``id``
    is never reused while the entry exists.
    """
    from numba import cuda

    entries = getattr(_LOCAL, "entries", None)
    if entries is None:
        entries = _LOCAL.entries = OrderedDict()
    key = (name, tuple(int(s) for s in shape), np.dtype(dtype).str, id(stream))
    found = entries.get(key)
    if found is None:
        found = entries[key] = (stream, cuda.device_array(key[1], key[2], stream=stream))
        if len(entries) > SCRATCH_ENTRIES:
            entries.popitem(last=False)
    else:
        entries.move_to_end(key)
    return found[1]


def zeroed_counter(name: str, stream=0):
    """A (1,) int64 device counter set to 0: a :func:`scratch` array, so one upload and no
    allocation (for counts that are read back before their function returns)."""
    counter = scratch(name, (1,), np.int64, stream)
    counter.copy_to_device(np.zeros(1, np.int64), stream=stream)
    return counter


def staged_index(host: np.ndarray, name: str, stream=0):
    """Host int64 indices on the device, in a scratch array of a power-of-two length (at
    least 64; a view of ``len(host)``): one upload, an allocation only when a longer
    index is first met. For indices read by kernels queued on ``stream`` before the
    next call with this name (stream order keeps the next upload behind them)."""
    size = max(64, 1 << max(len(host) - 1, 0).bit_length())
    dev = scratch(f"index {name}", (size,), np.int64, stream)[:len(host)]
    if len(host):
        dev.copy_to_device(host, stream=stream)
    return dev
