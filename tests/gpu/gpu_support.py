"""Device arrays for tests/gpu on either backend, and a verdict helper for MPI tests.

tests/gpu run under the Numba CUDA simulator (CI) or on a real GPU (see conftest.py).
An *export* is what another library hands mpievo: a CUDA Array Interface
(:class:`CudaArrayExport`) or a DLPack producer (:class:`DLPackExport`) with the
layout, CAI version, stream or device type a test picks. Its memory holds a copy of
a host array with the same offsets and strides: in the simulator it is that host
array itself ("device" pointers are host pointers there: mpievo adapts the export to
a simulator array over the same memory, and every path runs for real on the host);
on a GPU it is device memory (numba; CuPy for DLPack). Read results back with
:func:`to_host`, which works on both.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mpievo.kernels.cuda.reduce import simulator_enabled

KDL_CUDA = 2


def _byte_span(host: np.ndarray) -> tuple[np.ndarray, int]:
    """The bytes a (possibly strided) view spans, and its first element's offset in them."""
    byte_bounds = getattr(np.lib, "array_utils", np).byte_bounds  # numpy 2 moved it
    low, high = byte_bounds(host)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * max(high - low, 1)).from_address(low))
    return raw[:high - low], host.ctypes.data - low


def _device_copy(raw: np.ndarray):
    """A numba device array holding ``raw`` (uint8), through numba.cuda.device_array so
    that :func:`let_mpi_read_device_memory` can make it managed memory."""
    from numba import cuda

    mem = cuda.device_array(max(raw.size, 1), np.uint8)
    if raw.size:
        mem[:raw.size].copy_to_device(raw)
    return mem


def _address(numba_array) -> int:
    return int(numba_array.__cuda_array_interface__["data"][0])


class CudaArrayExport:
    """A copy of ``host`` exported through the CUDA Array Interface.

    Args:
        host: the values and layout (shape, strides, offset into its base) to export.
        version: CAI version to report.
        stream: CAI ``stream`` entry (v3 only).
        strides: reported strides (None: C-contiguous; default: the array's own
            strides when it is not C-contiguous).
    """

    def __init__(self, host: np.ndarray, *, version: int = 3, stream=None, strides="auto"):
        if strides == "auto":
            strides = None if host.flags.c_contiguous else host.strides
        if simulator_enabled():
            self._memory, self.ptr = host, host.ctypes.data
        else:
            raw, offset = _byte_span(host)
            self._memory = _device_copy(raw)
            self.ptr = _address(self._memory) + offset
        cai = {"shape": host.shape, "typestr": host.dtype.str,
               "data": (self.ptr, not host.flags.writeable), "version": version,
               "strides": strides}
        if version >= 3:
            cai["stream"] = stream
        self.__cuda_array_interface__ = cai

    def to_host(self) -> np.ndarray:
        """A host copy of the exported (C-contiguous) array as it is now."""
        if simulator_enabled():
            return self._memory.copy()
        from numba import cuda

        cai = dict(self.__cuda_array_interface__, strides=None, stream=None)
        return cuda.from_cuda_array_interface(cai, owner=self, sync=False).copy_to_host()


class DLPackExport:
    """A copy of ``host`` exported through DLPack, claiming ``device_type``
    (2: kDLCUDA). Records the consumer streams mpievo asks for in ``streams``."""

    def __init__(self, host: np.ndarray, device_type: int = KDL_CUDA):
        self.device_type = device_type
        self.streams = []
        if simulator_enabled():
            self._memory, self.ptr = host, host.ctypes.data
        else:
            cupy = pytest.importorskip("cupy", reason="DLPack producers on a GPU come from CuPy")
            raw, offset = _byte_span(host)
            span = cupy.asarray(raw)
            self._memory = cupy.ndarray(host.shape, host.dtype, span.data + offset, host.strides)
            self.ptr = self._memory.data.ptr

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None, **kwargs):
        self.streams.append(stream)
        if simulator_enabled():  # numpy takes no stream (nothing runs asynchronously)
            return self._memory.__dlpack__(**kwargs)
        return self._memory.__dlpack__(stream=stream, **kwargs)


def device_array(host: np.ndarray):
    """A numba device array holding a copy of ``host`` (a simulator array in the simulator)."""
    from numba import cuda

    out = cuda.device_array(host.shape, host.dtype)
    out.copy_to_device(np.ascontiguousarray(host))
    return out


def to_host(x) -> np.ndarray:
    """A host copy of an export or a numba device array."""
    return x.to_host() if isinstance(x, CudaArrayExport) else x.copy_to_host()


def batch_to_host(x) -> np.ndarray:
    """A host copy of a batch as a user's fitness receives it (numpy, CuPy or Numba)."""
    if isinstance(x, np.ndarray):
        return x
    get = getattr(x, "get", None)
    return get() if get is not None else x.copy_to_host()


def elementwise_fitness(x) -> np.ndarray:
    """A fitness with no reduction over genes: the same float64 bits wherever it runs."""
    h = batch_to_host(x).astype(np.float64)
    return (h[:, 0] - 0.3) ** 2 + (h[:, 1] + 0.1) ** 2 + 1e-3 * np.abs(h[:, -1])


def let_mpi_read_device_memory(monkeypatch) -> None:
    """Make the test's device buffers safe to hand to MPI as they are (the CUDA-aware
    path), whatever the MPI library.

    Nothing to do in the simulator (its device memory is host memory) or under a
    CUDA-aware MPI. Otherwise every ``numba.cuda.device_array`` of the test (exports,
    scratch slots, results) becomes managed memory: a host-only MPI reads and writes
    it like host memory, while kernels, streams and events treat it as device memory.
    """
    if simulator_enabled():
        return
    from mpievo.comm.device import support as cuda_support

    if cuda_support.query_mpix_cuda_support()[0] == 1:
        return
    from numba import cuda

    def managed_device_array(shape, dtype=np.float64, strides=None, order="C", stream=0):
        mem = cuda.managed_array(shape, dtype, strides, order)
        return cuda.from_cuda_array_interface(mem.__cuda_array_interface__, owner=mem, sync=False)

    monkeypatch.setattr(cuda, "device_array", managed_device_array)


def all_agree(comm, ok: bool, detail: str = "") -> None:
    """Fail on every rank when ``ok`` is False on any (so no rank hangs in the next test).

    Raises:
        AssertionError: naming the failing ranks and this rank's detail.
    """
    flags = comm.allgather_object(bool(ok))
    bad = [rank for rank, flag in enumerate(flags) if not flag]
    assert not bad, f"failed on ranks {bad}; rank {comm.rank}: {detail}"
