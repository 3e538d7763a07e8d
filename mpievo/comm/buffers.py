"""Checking user buffers: kind (host or device), contiguity, dtype, sizes."""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host


def is_device_array(buf) -> bool:
    """True for arrays in GPU memory (see mpievo.comm.device.is_device_array)."""
    if isinstance(buf, np.ndarray):
        return False
    from .device import is_device_array as on_device  # lazy: keeps numba.cuda out of imports

    return on_device(buf)


def flat_host(buf, name: str, *, writable: bool = False) -> np.ndarray:
    """Return a 1-D view of a C-contiguous numpy array.

    Raises:
        TypeError: not a numpy array, or not C-contiguous, or read-only when
            ``writable`` is needed.
    """
    if not isinstance(buf, np.ndarray):
        raise TypeError(f"expected {name} to be a numpy array or a device array, "
                        f"got {type(buf).__module__}.{type(buf).__name__}")
    if not buf.flags.c_contiguous:
        raise TypeError(f"expected {name} to be C-contiguous, got strides {buf.strides} "
                        f"for shape {buf.shape} (use numpy.ascontiguousarray)")
    if writable and not buf.flags.writeable:
        raise TypeError(f"expected {name} to be writable, got a read-only array")
    return buf.reshape(-1)


def check_dtype(dtype, op: str | None) -> None:
    """Validate a dtype (and op, for reductions)."""
    if op is None:
        if not host.supported_dtype(dtype):
            names = ", ".join(str(d) for d in host.SUPPORTED_DTYPES)
            raise TypeError(f"expected a dtype among ({names}), got {np.dtype(dtype)}")
    else:
        host.check_reducible(dtype, op)


def check_same(name: str, buf: np.ndarray, count: int, dtype) -> None:
    """Raise ValueError unless ``buf`` has ``count`` elements of ``dtype``."""
    if buf.size != count or buf.dtype != np.dtype(dtype):
        raise ValueError(f"expected {name} with {count} elements of {np.dtype(dtype)}, "
                         f"got {buf.size} elements of {buf.dtype}")


def check_counts(counts, size: int, name: str = "counts") -> list[int]:
    """Validate per-rank element counts: ``size`` non-negative integers."""
    counts = [int(c) for c in counts]
    if len(counts) != size or any(c < 0 for c in counts):
        raise ValueError(f"expected {name} to be {size} non-negative integers (one per rank), got {counts}")
    return counts


def check_root(root: int, size: int) -> int:
    if not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ValueError(f"expected root in [0, {size - 1}], got {root!r}")
    return int(root)
