"""Whether the MPI library accepts device buffers (is CUDA-aware).

The answer comes from ``MPIX_Query_cuda_support()`` (Open MPI and MPICH export it;
mpi4py does not wrap it, so it is called through ctypes on the loaded libmpi),
overridden by ``MPIEVO_CUDA_AWARE=0/1`` where the query is wrong (e.g. Open MPI whose
CUDA support comes from UCX). A CUDA-aware library gets device regions directly
(mpievo.comm.wire.device.DeviceWire); otherwise data is staged through pinned host
memory (StagedWire).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import NamedTuple

ENV_CUDA_AWARE = "MPIEVO_CUDA_AWARE"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class CudaAwareness(NamedTuple):
    """Whether device buffers may go to MPI directly, and why."""

    aware: bool
    source: str  # "environment", "MPIX_Query_cuda_support" or "default"
    detail: str


def parse_flag(name: str, value: str) -> bool:
    """Read a 0/1 environment flag.

    Raises:
        ValueError: neither true-ish nor false-ish.
    """
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected {name} to be 0 or 1, got {value!r}")


def _loaded_mpi_libraries() -> list[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libmpi" in line and "/" in line}
    except OSError:  # not Linux
        return []
    return sorted(paths)


def _mpi_library_candidates(mpi_module_file: str):
    """``(description, ctypes handle)`` pairs where MPI's symbols can be looked up."""
    # global symbols (MPI loaded with RTLD_GLOBAL), mpi4py's extension (dlsym on its
    # handle also searches the libmpi it links), then libmpi files mapped in memory
    places = [("the process's global symbols", None), (mpi_module_file, mpi_module_file)]
    places += [(path, path) for path in _loaded_mpi_libraries()]
    for description, path in places:
        try:
            yield description, ctypes.CDLL(path)
        except OSError:
            continue


def query_mpix_cuda_support() -> tuple[int | None, str]:
    """Call ``MPIX_Query_cuda_support()`` of the loaded MPI library via ctypes.

    Returns:
        ``(value, where)``: the returned int (1: CUDA-aware) and the library it
        came from, or ``(None, reason)`` when the symbol is not found.
    """
    from mpi4py import MPI

    if not MPI.Is_initialized():
        return None, "MPI is not initialised"
    for where, lib in _mpi_library_candidates(MPI.__file__):
        try:
            query = lib.MPIX_Query_cuda_support
        except AttributeError:
            continue
        query.restype, query.argtypes = ctypes.c_int, []
        return int(query()), where
    version = MPI.Get_library_version().splitlines()[0].strip()
    return None, f"MPIX_Query_cuda_support not found in the MPI library ({version})"


@functools.lru_cache(maxsize=1)
def cuda_awareness() -> CudaAwareness:
    """Whether the MPI library accepts device buffers (cached; see the module doc).

    ``MPIEVO_CUDA_AWARE=0/1`` wins over the library's answer. Call
    ``cuda_awareness.cache_clear()`` after changing the variable.

    Raises:
        ValueError: MPIEVO_CUDA_AWARE set to something other than 0/1.
    """
    value = os.environ.get(ENV_CUDA_AWARE, "")
    if value.strip():
        return CudaAwareness(parse_flag(ENV_CUDA_AWARE, value), "environment",
                             f"{ENV_CUDA_AWARE}={value}")
    answer, where = query_mpix_cuda_support()
    if answer is None:
        return CudaAwareness(False, "default", f"{where}; assuming not CUDA-aware "
                                               f"(set {ENV_CUDA_AWARE}=1 to override)")
    return CudaAwareness(bool(answer), "MPIX_Query_cuda_support",
                         f"MPIX_Query_cuda_support() = {answer} in {where}")


def cuda_aware() -> bool:
    """True when device buffers can be handed to MPI directly (cached)."""
    return cuda_awareness().aware
