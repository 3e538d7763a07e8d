"""Bind each rank to one GPU of its node, when the node has any.

The local rank (the rank among the processes of one node) picks device
``local_rank % n_devices``. It comes from the MPI library (a shared-memory split of
the communicator) or, without one, from the launcher's variables. CUDA is imported
lazily, so CPU-only machines never load it; there the same code runs on the CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: launcher variables holding the node-local rank, in the order they are trusted
LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                        "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK")


@dataclass(frozen=True)
class DeviceBinding:
    """Where a rank evaluates: ``device`` is a GPU index, or None for the CPU."""

    local_rank: int
    device: int | None
    n_devices: int

    @property
    def label(self) -> str:
        return "cpu" if self.device is None else f"gpu:{self.device}"


def local_rank_from_env(environ=None) -> int | None:
    """The node-local rank from launcher variables, or None when none is set.

    Raises:
        ValueError: a variable that is set but not a non-negative integer.
    """
    environ = os.environ if environ is None else environ
    for name in LOCAL_RANK_VARIABLES:
        value = environ.get(name)
        if value is None or value == "":
            continue
        if not value.strip().isdigit():
            raise ValueError(f"expected a non-negative integer in {name}, got {value!r}")
        return int(value)
    return None


def local_rank(mpi_comm=None, environ=None) -> int:
    """The node-local rank: MPI's shared-memory split when given, else the environment, else 0."""
    if mpi_comm is not None:
        from mpi4py import MPI

        node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.Get_rank())
        try:
            return node.Get_rank()
        finally:
            node.Free()
    found = local_rank_from_env(environ)
    return 0 if found is None else found


def choose_device(local: int, n_devices: int) -> int | None:
    """GPU index for node-local rank ``local`` among ``n_devices`` (None: no GPU)."""
    if isinstance(local, bool) or not isinstance(local, int) or local < 0:
        raise ValueError(f"expected a local rank >= 0, got {local!r}")
    if n_devices <= 0:
        return None
    return local % n_devices


def cuda_device_count() -> int:
    """Number of CUDA devices numba sees (0 without CUDA; imports numba.cuda lazily)."""
    from ..evo.device import cuda_usable

    if not cuda_usable():
        return 0
    from numba import cuda

    try:
        return len(cuda.gpus)
    except Exception:  # noqa: BLE001 - a broken driver means "no usable GPU"
        return 0


def bind_device(mpi_comm=None, *, n_devices: int | None = None, select=None,
                environ=None) -> DeviceBinding:
    """Choose this rank's GPU and make it current.

    Args:
        mpi_comm: communicator for the node-local rank (None: environment only).
        n_devices: devices to spread over (None: ask numba.cuda).
        select: ``select(index)`` making a device current (None: ``numba.cuda.select_device``).
        environ: environment mapping (tests).

    Returns:
        The binding; ``device`` is None on CPU-only machines.
    """
    local = local_rank(mpi_comm, environ)
    count = cuda_device_count() if n_devices is None else int(n_devices)
    device = choose_device(local, count)
    if device is not None:
        if select is None:
            from numba import cuda

            select = cuda.select_device
        select(device)
    return DeviceBinding(local, device, count)
