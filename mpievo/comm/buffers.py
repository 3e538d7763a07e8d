"""Checking user buffers on the host: contiguity, dtype, sizes, counts, roots.

Device buffers are parsed by mpievo.comm.device.buffers; the size and dtype checks here
serve both.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels import host


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


def host_output(sendbuf, recvbuf, src: np.ndarray) -> tuple:
    """(user-facing result, flat view) of an output shaped like ``sendbuf``.

    ``recvbuf`` None allocates one; ``recvbuf is sendbuf`` means in place.

    Raises:
        TypeError / ValueError: see :func:`flat_host` and :func:`check_same`.
    """
    if recvbuf is None:
        result = np.empty_like(sendbuf)
        return result, result.reshape(-1)
    if recvbuf is sendbuf:
        return sendbuf, src
    dst = flat_host(recvbuf, "recvbuf", writable=True)
    check_same("recvbuf", dst, src.size, src.dtype)
    return recvbuf, dst


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two 1-D views start at the same address and have the same length."""
    return a is b or (a.ctypes.data == b.ctypes.data and a.size == b.size)


def copy_host(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``, skipped when both are the same memory (in place)."""
    if not same_memory(dst, src):
        np.copyto(dst, src)


def check_dtype(dtype, op: str | None) -> None:
    """Validate a dtype (and op, for reductions)."""
    if op is None:
        if not host.supported_dtype(dtype):
            names = ", ".join(str(d) for d in host.SUPPORTED_DTYPES)
            raise TypeError(f"expected a dtype among ({names}), got {np.dtype(dtype)}")
    else:
        host.check_reducible(dtype, op)


def check_same(name: str, buf, count: int, dtype) -> None:
    """Raise ValueError unless ``buf`` (host or device) has ``count`` elements of ``dtype``."""
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
