"""Point-to-point exchange of arrays with chosen peers, without pickling.

Every send and receive is posted non-blocking before any wait, so ranks that all
send large messages at the same time cannot deadlock. Messages between the same
pair of ranks match in the order given. Arrays of any size travel in pieces under
MPI's count limit (:mod:`mpievo.comm.chunking`), straight from and into the
caller's arrays.

Device arrays (numba, CUDA Array Interface or CUDA DLPack) travel on the device
path: with a CUDA-aware MPI straight from and into device memory (after their
producer's stream is synchronised), otherwise staged through host copies -- a send
is copied to the host before it is posted, a receive lands in a host buffer and is
copied to the device after the wait.
"""

from __future__ import annotations

import numpy as np

from .device import buffers as devicebuf
from .buffers import check_root, flat_host
from .chunking import post_recv, post_send
from .device.support import cuda_aware

EXCHANGE_TAG = 31000           # above every collective tag (mpievo.comm.core)


def run(core, sends, recvs, timeout: float | None) -> None:
    """Post every send and receive, then wait for all (see ``Communicator.exchange``).

    Every peer and array is checked before the first message is posted, so bad input
    leaves nothing in flight.
    """
    core.check_usable()
    comm, size = core.comm, core.size
    sends, recvs = list(sends), list(recvs)
    direct = _direct(core, [arr for _, arr in sends + recvs])
    sends = [(check_root(dest, size), _send_bytes(arr, direct)) for dest, arr in sends]
    arrivals = []  # (device bytes, host bytes) of staged receives, copied after the wait
    checked = []
    for source, arr in recvs:
        flat, device = _recv_bytes(arr, direct)
        checked.append((check_root(source, size), flat))
        if device is not None:
            arrivals.append((device, flat))
    recvs = checked
    pending = []
    for dest, flat in sends:
        pending += post_send(comm, dest, flat, EXCHANGE_TAG)
        core.count(flat.nbytes)
    for source, flat in recvs:
        pending += post_recv(comm, source, flat, EXCHANGE_TAG)
    if pending:
        core.wait("exchange", pending, timeout)
    for device, flat in arrivals:
        device.copy_to_device(flat)


def _direct(core, arrays) -> bool:
    """Whether device arrays go to MPI as they are (a CUDA-aware MPI)."""
    if not any(devicebuf.is_device_array(arr) for arr in arrays):
        return False
    return cuda_aware() if core.cuda_aware is None else bool(core.cuda_aware)


def _device_bytes(arr, name: str):
    """A 1-D uint8 numba view of a device array (its stream synchronised)."""
    try:
        return devicebuf.as_device_array(arr).ravel().view(np.uint8)
    except Exception as err:  # noqa: BLE001 - numba raises several types for views
        raise TypeError(f"expected {name} to be a C-contiguous device array, got {err}") from None


def _send_bytes(arr, direct: bool):
    if not devicebuf.is_device_array(arr):
        return flat_host(arr, "send array").view(np.uint8)
    flat = _device_bytes(arr, "send array")
    return flat if direct else flat.copy_to_host()


def _recv_bytes(arr, direct: bool):
    """(bytes MPI receives into, the device bytes to copy them to after the wait or None)."""
    if not devicebuf.is_device_array(arr):
        return flat_host(arr, "receive array", writable=True).view(np.uint8), None
    flat = _device_bytes(arr, "receive array")
    if direct:
        return flat, None
    return np.empty(flat.shape[0], np.uint8), flat
