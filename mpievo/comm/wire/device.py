"""Wires for device (GPU) buffers.

* :class:`DeviceWire` -- the MPI library is CUDA-aware: device regions go to MPI as
  they are and received segments are combined by the device kernels of
  :mod:`mpievo.kernels.cuda.reduce`.
* :class:`StagedWire` -- it is not: every segment is copied through pinned host
  slots (device-to-host before a send, host-to-device before a reduction), on a
  stream of its own, so the copy of one segment overlaps the send of the previous
  one; reductions still run on the device, so the result never leaves it. A
  segment received in the all-gather phase is forwarded from its pinned slot
  without copying it back from the device.

:func:`make_wire` picks one by :func:`mpievo.comm.device.support.cuda_aware`.
"""

from __future__ import annotations

import numpy as np

from mpievo.kernels.cuda.reduce import device_divide_into, device_reduce, kernel_dtype

from ..device.support import cuda_aware
from ..device.buffers import device_address
from ..staging import DeviceResources, Slot


class _DeviceWireBase:
    """What both device wires share: dtype, stream, device copies and workspace."""

    max_in_flight = 4

    def __init__(self, dtype, resources: DeviceResources):
        self.wire_dtype = np.dtype(dtype)
        self._kernel_dtype = kernel_dtype(dtype)
        self._res = resources
        self._stream = resources.stream
        self._work: list[Slot] = []

    def copy(self, dst, src) -> None:
        if dst.shape[0] and device_address(dst) != device_address(src):
            dst.copy_to_device(src, stream=self._stream)
            self._queued()

    def workspace(self, count: int):
        slot = self._res.device.take(count * self._kernel_dtype.itemsize)
        self._work.append(slot)
        return slot.view(self._kernel_dtype, count)

    def synchronize(self) -> None:
        self._stream.synchronize()

    def _queued(self) -> None:
        """Device work was queued on the stream."""

    def _return_workspace(self) -> None:
        for slot in self._work:
            self._res.device.give(slot)
        self._work.clear()


class DeviceWire(_DeviceWireBase):
    """Wire for a CUDA-aware MPI: device regions go to MPI directly.

    Received segments land in two device scratch slots used in turn; a slot is
    handed out again only after the kernel that read it has finished.

    Args:
        dtype: logical dtype of the data.
        resources: the communicator's :class:`DeviceResources`.
    """

    def __init__(self, dtype, resources: DeviceResources):
        super().__init__(dtype, resources)
        self._turn = 0
        self._slots: list[Slot | None] = [None, None]
        self._turn_of: dict[int, int] = {}
        self._pending = False  # device work queued since the last synchronize

    def _queued(self) -> None:
        self._pending = True

    def _settle(self) -> None:
        if self._pending:
            self.synchronize()

    def encode(self, region):
        self._settle()
        return region

    def release(self, buf) -> None:
        pass

    def scratch(self, count: int):
        self._turn ^= 1
        slot = self._res.device_slot(self._slots[self._turn], count * self._kernel_dtype.itemsize)
        self._slots[self._turn] = slot
        buf = slot.view(self._kernel_dtype, count)
        self._turn_of[id(buf)] = self._turn
        return buf

    def reduce(self, dst, buf, op: str, left=None) -> None:
        device_reduce(dst, dst if left is None else left, buf, op, dtype=self.wire_dtype,
                      stream=self._stream)
        self._pending = True
        turn = self._turn_of.pop(id(buf), None)
        if turn is not None:
            self._slots[turn].event = self._res.record()

    def recv_into(self, dst):
        self._settle()
        return dst

    def store(self, dst, buf) -> None:
        if buf is not dst:
            dst.copy_to_device(buf, stream=self._stream)
            self._pending = True

    def divide(self, dst, n: int) -> None:
        device_divide_into(dst, n, dtype=self.wire_dtype, stream=self._stream)
        self._pending = True

    def synchronize(self) -> None:
        super().synchronize()
        self._pending = False

    def finish(self) -> None:
        """End of the collective: wait for queued copies and kernels, return the slots."""
        self.synchronize()
        for slot in self._slots:
            if slot is not None:
                slot.event = None
                self._res.device.give(slot)
        self._slots = [None, None]
        self._turn_of.clear()
        self._return_workspace()


class StagedWire(_DeviceWireBase):
    """Wire for an MPI library that is not CUDA-aware: staging through pinned memory.

    Sends: the region is copied device-to-host into a pinned slot (on the wire's
    stream, waiting only for that copy) while earlier sends are still in flight.
    Receives land in pinned slots; a reduction copies the slot to the device and
    runs the kernel there, and the slot is reused once that copy has completed
    (an event per slot). A stored segment's slot is kept until the next step: when
    the ring forwards that very segment, its slot is sent as is.

    Args:
        dtype: logical dtype of the data.
        resources: the communicator's :class:`DeviceResources`.
    """

    def __init__(self, dtype, resources: DeviceResources):
        super().__init__(dtype, resources)
        self._pool = resources.pinned
        self._lent: dict[int, tuple[Slot, np.ndarray]] = {}
        self._forward = None  # (region key, slot, host view) of the last stored segment
        self._staged: Slot | None = None  # device slot receiving segments to reduce
        self.device_to_host_copies = 0  # counted for tests and reports
        self.forwarded = 0

    @property
    def staged_slot(self) -> Slot | None:
        """The device slot that receives segments before a reduction (None before the first)."""
        return self._staged

    def _lend(self, count: int) -> np.ndarray:
        slot = self._pool.take(count * self._kernel_dtype.itemsize)
        view = slot.view(self._kernel_dtype, count)
        self._lent[id(view)] = (slot, view)
        return view

    def _take_back(self, buf) -> tuple[Slot, np.ndarray]:
        try:
            return self._lent.pop(id(buf))
        except KeyError:
            raise ValueError("expected a buffer handed out by this wire, got another object") from None

    def _drop_forward(self) -> None:
        if self._forward is not None:
            self._pool.give(self._forward[1])
            self._forward = None

    def encode(self, region) -> np.ndarray:
        forward = self._forward
        if forward is not None and forward[0] == _region_key(region):
            self._forward = None
            self._lent[id(forward[2])] = (forward[1], forward[2])
            self.forwarded += 1
            return forward[2]
        buf = self._lend(region.shape[0])
        region.copy_to_host(buf, stream=self._stream)
        self._stream.synchronize()  # the bytes must be on the host before MPI reads them
        self.device_to_host_copies += 1
        return buf

    def release(self, buf) -> None:
        slot, _ = self._take_back(buf)
        self._pool.give(slot)

    def scratch(self, count: int) -> np.ndarray:
        return self._lend(count)

    def recv_into(self, dst) -> np.ndarray:
        return self._lend(dst.shape[0])

    def reduce(self, dst, buf, op: str, left=None) -> None:
        self._drop_forward()
        slot, view = self._take_back(buf)
        # one device slot suffices: its copies and kernels are ordered on one stream
        self._staged = self._res.device_slot(self._staged, view.nbytes)
        staged = self._staged.view(self._kernel_dtype, view.shape[0])
        staged.copy_to_device(view, stream=self._stream)
        device_reduce(dst, dst if left is None else left, staged, op, dtype=self.wire_dtype,
                      stream=self._stream)
        slot.event = self._res.record()
        self._pool.give(slot)

    def store(self, dst, buf) -> None:
        if buf is dst:
            return
        self._drop_forward()
        slot, view = self._take_back(buf)
        dst.copy_to_device(view, stream=self._stream)
        slot.event = self._res.record()
        self._forward = (_region_key(dst), slot, view)

    def divide(self, dst, n: int) -> None:
        self._drop_forward()
        device_divide_into(dst, n, dtype=self.wire_dtype, stream=self._stream)

    def copy(self, dst, src) -> None:
        self._drop_forward()  # dst may be the stored segment: its pinned copy goes stale
        super().copy(dst, src)

    def finish(self) -> None:
        """End of the collective: wait for the device and return every slot."""
        self._drop_forward()
        self.synchronize()
        for slot, _ in self._lent.values():
            self._pool.give(slot)
        self._lent.clear()
        if self._staged is not None:
            self._res.device.give(self._staged)
            self._staged = None
        self._return_workspace()


def _region_key(region) -> tuple[int, int]:
    return device_address(region), int(region.shape[0])


def make_wire(dtype, resources: DeviceResources, *, aware: bool | None = None):
    """DeviceWire when MPI is CUDA-aware (``aware``, default :func:`cuda_aware`), else StagedWire."""
    aware = cuda_aware() if aware is None else aware
    return DeviceWire(dtype, resources) if aware else StagedWire(dtype, resources)
