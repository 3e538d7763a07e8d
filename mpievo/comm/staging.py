"""Reusable staging memory: slots and pools, and the device state kept per communicator.

Kept between collective calls so that large buffers are allocated once: a fresh
allocation costs page faults on the host, and pinned (page-locked) allocations are
slow on a GPU host. Slots are lent to one wire at a time, so concurrent
non-blocking collectives never share memory. Creating any of these objects does not
touch CUDA.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mpievo.kernels.cuda.reduce import simulator_enabled

#: slots are allocated in multiples of this many bytes, so segments of slightly
#: different sizes reuse the same slots
SLOT_GRANULE = 64 << 10


class Slot:
    """One reusable staging buffer: raw bytes, and the event of the last device copy
    that reads or writes it (None when no copy is pending)."""

    __slots__ = ("raw", "event")

    def __init__(self, raw):
        self.raw = raw
        self.event = None

    @property
    def capacity(self) -> int:
        return int(self.raw.nbytes)

    def view(self, dtype, count: int):
        """The first ``count`` elements of the slot as ``dtype``."""
        dtype = np.dtype(dtype)
        return self.raw[:count * dtype.itemsize].view(dtype)


class StagingPool:
    """Reusable slots, handed out whole (``take``) and given back (``give``).

    Args:
        allocate: ``allocate(nbytes) -> uint8 array`` (default numpy.empty; device
            resources pass numba.cuda.pinned_array or numba.cuda.device_array).
    """

    def __init__(self, allocate: Callable[[int], np.ndarray] | None = None):
        self._allocate = allocate or (lambda nbytes: np.empty(nbytes, dtype=np.uint8))
        self._free: list[Slot] = []
        self.allocated = 0  # number of slots ever allocated (for tests and reports)

    def take(self, nbytes: int) -> Slot:
        """A slot of at least ``nbytes`` (best fit among free ones, else a new one).

        A slot whose last device copy may still run is waited for first.
        """
        fitting = [s for s in self._free if s.capacity >= nbytes]
        if fitting:
            slot = min(fitting, key=lambda s: s.capacity)
            self._free.remove(slot)
        else:
            capacity = max(SLOT_GRANULE, -(-nbytes // SLOT_GRANULE) * SLOT_GRANULE)
            slot = Slot(self._allocate(capacity))
            self.allocated += 1
        if slot.event is not None:
            slot.event.synchronize()
            slot.event = None
        return slot

    def give(self, slot: Slot, event=None) -> None:
        """Return ``slot``; ``event`` (or the slot's own) marks a device copy still using it."""
        if event is not None:
            slot.event = event
        self._free.append(slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def clear(self) -> None:
        self._free.clear()


def _pinned_allocate(nbytes: int):
    from numba import cuda

    return cuda.pinned_array(nbytes, dtype=np.uint8)


def _device_allocate(nbytes: int):
    from numba import cuda

    return cuda.device_array(nbytes, dtype=np.uint8)


class DeviceResources:
    """Device state kept between collective calls (one per communicator).

    A stream of its own for copies and reductions, pinned staging slots and device
    scratch slots; all created on first use.
    """

    def __init__(self):
        self._stream = None
        self.pinned = StagingPool(_pinned_allocate)
        self.device = StagingPool(_device_allocate)

    @property
    def stream(self):
        if self._stream is None:
            from numba import cuda

            self._stream = cuda.stream()
        return self._stream

    def device_slot(self, held: Slot | None, nbytes: int) -> Slot:
        """A device slot of at least ``nbytes``: ``held`` when large enough (after its
        pending work), else a pooled one (``held`` goes back to the pool)."""
        if held is not None and held.capacity >= nbytes:
            if held.event is not None:
                held.event.synchronize()
                held.event = None
            return held
        if held is not None:
            self.device.give(held)
        return self.device.take(nbytes)

    def record(self):
        """An event recorded on the stream now (completes when queued work has run)."""
        from numba import cuda

        event = cuda.event() if simulator_enabled() else cuda.event(timing=False)
        event.record(self.stream)
        return event

    def clear(self) -> None:
        """Drop pooled buffers (they are freed once unreferenced)."""
        self.pinned.clear()
        self.device.clear()
