"""Fake device arrays for tests without a GPU, and a verdict helper for MPI tests.

Like mpi4py's own tests, a fake exposes ``__cuda_array_interface__`` (or DLPack
with a CUDA device type) over *host* memory: under the Numba CUDA simulator,
"device" pointers are host pointers, so mpievo adapts such an object to a
simulator device array over the same memory and every path (detection, stream
synchronisation, staging, device kernels) runs for real on the host.
"""

from __future__ import annotations

import numpy as np


class FakeCudaArray:
    """Host array exported through the CUDA Array Interface.

    Args:
        host: the backing numpy array (its memory is what mpievo sees).
        version: CAI version to report.
        stream: CAI ``stream`` entry (v3 only).
        strides: reported strides (None: C-contiguous; default: the array's own
            strides when it is not C-contiguous).
    """

    def __init__(self, host: np.ndarray, *, version: int = 3, stream=None, strides="auto"):
        self.host = host
        if strides == "auto":
            strides = None if host.flags.c_contiguous else host.strides
        cai = {"shape": host.shape, "typestr": host.dtype.str,
               "data": (host.ctypes.data, not host.flags.writeable),
               "version": version, "strides": strides}
        if version >= 3:
            cai["stream"] = stream
        self.__cuda_array_interface__ = cai

    @property
    def shape(self):
        return self.host.shape

    @property
    def dtype(self):
        return self.host.dtype


class FakeDLPackArray:
    """Host array exported through DLPack while claiming a CUDA device (type 2)."""

    def __init__(self, host: np.ndarray, device_type: int = 2):
        self.host = host
        self.device_type = device_type
        self.streams = []  # the consumer streams mpievo asked for

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None, **kwargs):
        self.streams.append(stream)
        return self.host.__dlpack__(**kwargs)

    @property
    def shape(self):
        return self.host.shape


def all_agree(comm, ok: bool, detail: str = "") -> None:
    """Fail on every rank when ``ok`` is False on any (so no rank hangs in the next test).

    Raises:
        AssertionError: naming the failing ranks and this rank's detail.
    """
    flags = comm.allgather_object(bool(ok))
    bad = [rank for rank, flag in enumerate(flags) if not flag]
    assert not bad, f"failed on ranks {bad}; rank {comm.rank}: {detail}"
