"""Device (GPU) buffers in the collectives.

Accepted buffers: numba device arrays, anything exposing ``__cuda_array_interface__``
(versions 2 and 3: CuPy, PyTorch, ...) and DLPack producers on a CUDA device
(``__dlpack_device__()[0]`` kDLCUDA = 2, or kDLCUDAManaged = 13). Each is adapted to a
numba device array *view* of the same memory (no copy); it must be C-contiguous.
Before MPI or a kernel touches the memory the producer's stream is synchronised:
the CAI ``stream`` when given, else the default stream.

Two wires move device data through the ring algorithms of mpievo.comm.ring:

* :class:`DeviceWire` -- the MPI library is CUDA-aware: device regions go to MPI as
  they are and received segments are combined by the device kernels of
  :mod:`mpievo.kernels.cuda`.
* :class:`StagedWire` -- it is not: every segment is copied through pinned host
  slots (device-to-host before a send, host-to-device before a reduction), on a
  stream of its own, so the copy of one segment overlaps the send of the previous
  one; reductions still run on the device, so the result never leaves it. A
  segment received in the all-gather phase is forwarded from its pinned slot
  without copying it back from the device.

Whether the MPI library is CUDA-aware comes from ``MPIX_Query_cuda_support()``
(Open MPI and MPICH export it; mpi4py does not wrap it, so it is called through
ctypes on the loaded libmpi), overridden by ``MPIEVO_CUDA_AWARE=0/1`` where the
query is wrong (e.g. Open MPI whose CUDA support comes from UCX).

Importing this module never touches CUDA: numba.cuda is imported inside functions.
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mpievo.kernels import host
from mpievo.kernels.cuda import (device_divide_into, device_reduce, kernel_dtype,
                                 simulator_enabled)

from .compress import Slot, StagingPool

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
#: DLPack device types whose memory is device memory (kDLCUDAHost is pinned host
#: memory: numpy.from_dlpack reads it as a host array)
DEVICE_DLPACK_TYPES = (KDL_CUDA, KDL_CUDA_MANAGED)
CAI_VERSIONS = (2, 3)
#: stream handles with a fixed meaning in the CUDA Array Interface and DLPack
LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM = 1, 2
ENV_CUDA_AWARE = "MPIEVO_CUDA_AWARE"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


# ----------------------------------------------------------------- detection
def _cuda_array_interface(obj) -> dict | None:
    try:
        return obj.__cuda_array_interface__
    except AttributeError:  # e.g. a CPU torch tensor raises AttributeError here
        return None


def is_numba_device_array(obj) -> bool:
    """True for numba device arrays (including the CUDA simulator's)."""
    return not isinstance(obj, np.ndarray) and bool(getattr(obj, "__cuda_ndarray__", False))


def dlpack_device_type(obj) -> int | None:
    """The DLPack device type of ``obj`` (2 = CUDA), or None without ``__dlpack_device__``."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None:
        return None
    try:
        return int(query()[0])
    except (TypeError, ValueError, IndexError, BufferError, RuntimeError):
        return None


def is_device_array(obj) -> bool:
    """True when ``obj`` lives in GPU memory: a numba device array, a CUDA Array
    Interface exporter, or a DLPack producer on a CUDA (or managed) device."""
    if isinstance(obj, np.ndarray):
        return False
    if is_numba_device_array(obj) or _cuda_array_interface(obj) is not None:
        return True
    return dlpack_device_type(obj) in DEVICE_DLPACK_TYPES


@dataclass(frozen=True)
class DeviceArrayInfo:
    """Where a device array is and how it is laid out.

    ``strides`` are in bytes (None: C-contiguous); ``stream`` is the producer's
    stream handle (None: none given; 1/2: legacy/per-thread default stream).
    """

    ptr: int
    shape: tuple
    strides: tuple | None
    dtype: np.dtype
    readonly: bool
    stream: int | None
    source: str  # "cai" or "dlpack"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def parse_cuda_array_interface(cai) -> DeviceArrayInfo:
    """Validate a ``__cuda_array_interface__`` dict (versions 2 and 3).

    Raises:
        TypeError: not a dict, or a non-integer stream.
        ValueError: unsupported version, missing keys, a mask, or stream 0.
    """
    if not isinstance(cai, dict):
        raise TypeError(f"expected __cuda_array_interface__ to be a dict, got {type(cai).__name__}")
    version = cai.get("version")
    if version not in CAI_VERSIONS:
        raise ValueError(f"expected __cuda_array_interface__ version in {CAI_VERSIONS}, got {version!r}")
    missing = [key for key in ("shape", "typestr", "data") if key not in cai]
    if missing:
        raise ValueError(f"expected keys shape, typestr and data in __cuda_array_interface__, "
                         f"got {sorted(cai)}")
    if cai.get("mask") is not None:
        raise ValueError("expected no mask in __cuda_array_interface__, got one "
                         "(masked device arrays are not supported)")
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    stream = cai.get("stream") if version >= 3 else None
    if stream is not None:
        if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)):
            raise TypeError(f"expected an integer stream handle or None, got {stream!r}")
        if stream == 0:
            raise ValueError("expected a stream handle other than 0 in __cuda_array_interface__ "
                             "(0 is ambiguous; 1 is the legacy default stream), got 0")
    return DeviceArrayInfo(int(ptr or 0), tuple(int(s) for s in cai["shape"]),
                           None if strides is None else tuple(int(s) for s in strides),
                           np.dtype(cai["typestr"]), bool(readonly),
                           None if stream is None else int(stream), "cai")


def check_c_contiguous(shape, strides, itemsize: int) -> None:
    """Raise unless ``strides`` (bytes, or None) describe a C-contiguous layout.

    Dimensions of extent 1 may have any stride; empty arrays are contiguous.

    Raises:
        ValueError: "expected a C-contiguous device array, got strides ...".
    """
    if strides is None or 0 in shape:
        return
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            raise ValueError(f"expected a C-contiguous device array, got strides {tuple(strides)} "
                             f"for shape {tuple(shape)} and itemsize {itemsize} "
                             "(make a contiguous copy first, e.g. cupy.ascontiguousarray)")
        expected *= extent


def _strided_memory_view():
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:  # older cuda-core releases
        from cuda.core.experimental.utils import StridedMemoryView
    return StridedMemoryView


def _dlpack_info(obj) -> tuple[DeviceArrayInfo, object]:
    """Describe a DLPack producer; returns the info and the object keeping it alive."""
    # The producer orders its pending work before the legacy default stream, which
    # synchronize_stream(1) then waits for.
    view = _strided_memory_view().from_dlpack(obj, stream_ptr=LEGACY_DEFAULT_STREAM)
    dtype = np.dtype(view.dtype)
    strides = None if view.strides is None else tuple(int(s) * dtype.itemsize for s in view.strides)
    info = DeviceArrayInfo(int(view.ptr), tuple(int(s) for s in view.shape), strides, dtype,
                           bool(view.readonly), LEGACY_DEFAULT_STREAM, "dlpack")
    return info, view


# --------------------------------------------------------------- adaptation
def synchronize_stream(stream) -> None:
    """Wait for the work queued on a producer's stream.

    Args:
        stream: None or 0 (the default stream), 1 (legacy default), 2 (per-thread
            default), another integer (an external stream handle) or a numba stream.
    """
    if simulator_enabled():
        return  # the simulator runs every copy and kernel synchronously
    from numba import cuda

    if stream is None or (isinstance(stream, (int, np.integer)) and stream == 0):
        cuda.default_stream().synchronize()
    elif isinstance(stream, (int, np.integer)):
        if stream == LEGACY_DEFAULT_STREAM:
            cuda.legacy_default_stream().synchronize()
        elif stream == PER_THREAD_DEFAULT_STREAM:
            cuda.per_thread_default_stream().synchronize()
        else:
            cuda.external_stream(int(stream)).synchronize()
    else:
        stream.synchronize()


class _HostMemory:
    """Exposes simulated device memory (host memory) to numpy, keeping its owner alive."""

    def __init__(self, info: DeviceArrayInfo, dtype: np.dtype, owner):
        self.owner = owner
        self.__array_interface__ = {"shape": info.shape, "typestr": dtype.str,
                                    "data": (info.ptr, info.readonly), "strides": None,
                                    "version": 3}


def _view(info: DeviceArrayInfo, owner):
    """A numba device array over ``info``'s memory (kernel dtype: bfloat16 as uint16)."""
    dtype = kernel_dtype(info.dtype)
    if simulator_enabled():
        # no device memory in the simulator: "device" pointers are host pointers
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        if info.size == 0:
            return FakeCUDAArray(np.empty(info.shape, dtype=dtype))
        return FakeCUDAArray(np.asarray(_HostMemory(info, dtype, owner)))
    from numba import cuda

    desc = {"shape": info.shape, "strides": None, "typestr": dtype.str,
            "data": (info.ptr, info.readonly), "version": 3, "stream": None}
    return cuda.from_cuda_array_interface(desc, owner=owner, sync=False)


def _numba_stream(arr):
    stream = getattr(arr, "stream", 0)
    return None if not stream else stream


def describe(obj) -> tuple[DeviceArrayInfo, object]:
    """Info of a CAI or DLPack device array and the object that keeps it alive.

    Raises:
        TypeError: not a device array.
    """
    cai = _cuda_array_interface(obj)
    if cai is not None:
        return parse_cuda_array_interface(cai), obj
    if dlpack_device_type(obj) in DEVICE_DLPACK_TYPES:
        return _dlpack_info(obj)
    raise TypeError(f"expected a device array (numba, __cuda_array_interface__ or a CUDA "
                    f"DLPack producer), got {type(obj).__module__}.{type(obj).__name__}")


def _view_and_dtype(obj, sync: bool):
    if is_numba_device_array(obj):
        if not obj.is_c_contiguous():
            check_c_contiguous(tuple(obj.shape), tuple(obj.strides), obj.dtype.itemsize)
        if sync:
            synchronize_stream(_numba_stream(obj))
        return obj, np.dtype(obj.dtype)
    info, owner = describe(obj)
    check_c_contiguous(info.shape, info.strides, info.dtype.itemsize)
    if sync:
        synchronize_stream(info.stream)
    return _view(info, owner), info.dtype


def as_device_array(obj, *, sync: bool = True):
    """A numba device array viewing ``obj``'s memory (no copy), shape kept.

    bfloat16 data (from DLPack) is viewed as uint16; see :func:`adapt` for the
    logical dtype.

    Args:
        obj: numba device array, CAI exporter or CUDA DLPack producer.
        sync: first wait for the producer's stream (CAI ``stream``, else the
            default stream).

    Raises:
        TypeError: not a device array.
        ValueError: not C-contiguous ("expected a C-contiguous device array, got
            strides ..."), or an invalid CUDA Array Interface.
    """
    return _view_and_dtype(obj, sync)[0]


class DeviceBuffer(NamedTuple):
    """A user's device buffer as the collectives use it."""

    flat: object       # 1-D numba device array, kernel dtype (bfloat16 as uint16)
    dtype: np.dtype    # logical element type
    owner: object      # the user's object

    @property
    def size(self) -> int:
        return int(self.flat.shape[0])


def adapt(obj, name: str = "buffer", *, dtype=None) -> DeviceBuffer:
    """Validate and view a user's device buffer as a flat numba array.

    Args:
        obj: the device array.
        name: argument name for error messages.
        dtype: logical dtype override (e.g. bfloat16 for a uint16 CAI buffer).

    Raises:
        TypeError / ValueError: see :func:`as_device_array`; unsupported dtype.
    """
    try:
        view, found = _view_and_dtype(obj, sync=True)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None
    logical = np.dtype(found if dtype is None else dtype)
    if not host.supported_dtype(logical):
        names = ", ".join(str(d) for d in host.SUPPORTED_DTYPES)
        raise TypeError(f"expected {name} with a dtype among ({names}), got {logical}")
    flat = view.ravel()
    want = kernel_dtype(logical)
    if np.dtype(flat.dtype) != want:
        flat = flat.view(want)
    return DeviceBuffer(flat, logical, obj)


def device_address(arr) -> int:
    """Address of a numba device array's first element (host address in the simulator)."""
    cai = _cuda_array_interface(arr)
    if cai is not None:
        return int(cai["data"][0])
    return int(arr.__array_interface__["data"][0])


# ------------------------------------------------------------ CUDA-awareness
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


# ------------------------------------------------------------------ resources
def _pinned_allocate(nbytes: int):
    from numba import cuda

    return cuda.pinned_array(nbytes, dtype=np.uint8)


def _device_allocate(nbytes: int):
    from numba import cuda

    return cuda.device_array(nbytes, dtype=np.uint8)


class DeviceResources:
    """Device state kept between collective calls (one per communicator).

    A stream of its own for copies and reductions, pinned staging slots and device
    scratch slots; all created on first use (creating this object does not touch
    CUDA). Slots are lent to one wire at a time, so concurrent non-blocking
    collectives never share scratch memory.
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


# ---------------------------------------------------------------------- wires
class DeviceWire:
    """Wire for a CUDA-aware MPI: device regions go to MPI directly.

    Received segments land in two device scratch slots used in turn; a slot is
    handed out again only after the kernel that read it has finished.

    Args:
        dtype: logical dtype of the data.
        resources: the communicator's :class:`DeviceResources`.
    """

    max_in_flight = 4

    def __init__(self, dtype, resources: DeviceResources):
        self.wire_dtype = np.dtype(dtype)
        self._kernel_dtype = kernel_dtype(dtype)
        self._res = resources
        self._stream = resources.stream
        self._turn = 0
        self._slots: list[Slot | None] = [None, None]
        self._turn_of: dict[int, int] = {}
        self._pending = False  # device work queued since the last synchronize

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
        self._stream.synchronize()
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


class StagedWire:
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

    max_in_flight = 4

    def __init__(self, dtype, resources: DeviceResources):
        self.wire_dtype = np.dtype(dtype)
        self._kernel_dtype = kernel_dtype(dtype)
        self._res = resources
        self._pool = resources.pinned
        self._stream = resources.stream
        self._lent: dict[int, tuple[Slot, np.ndarray]] = {}
        self._forward = None  # (region key, slot, host view) of the last stored segment
        self._staged: Slot | None = None  # device slot receiving segments to reduce
        self.device_to_host_copies = 0  # counted for tests and reports
        self.forwarded = 0

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

    def synchronize(self) -> None:
        self._stream.synchronize()

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


def _region_key(region) -> tuple[int, int]:
    return device_address(region), int(region.shape[0])


def make_wire(dtype, resources: DeviceResources, *, aware: bool | None = None):
    """DeviceWire when MPI is CUDA-aware (``aware``, default :func:`cuda_aware`), else StagedWire."""
    aware = cuda_aware() if aware is None else aware
    return DeviceWire(dtype, resources) if aware else StagedWire(dtype, resources)


def device_copy(dst, src, stream) -> None:
    """``dst[...] = src`` between device arrays, queued on ``stream``."""
    dst.copy_to_device(src, stream=stream)


# ----------------------------------------------- collectives on device buffers
# Called by mpievo.comm.Communicator when a buffer is a device array.

def resources_for(comm) -> DeviceResources:
    """The communicator's device resources (a fresh set when it keeps none)."""
    resources = getattr(comm, "_device_resources", None)
    return resources if resources is not None else DeviceResources()


def _check_algorithm(collective: str, algorithm, supported: tuple) -> None:
    if algorithm not in (None, "auto") + supported:
        raise ValueError(f"expected {collective} algorithm for device buffers in "
                         f"{('auto',) + supported}, got {algorithm!r}")


def _empty_like(buf: DeviceBuffer, count: int | None = None, shape=None):
    from numba import cuda

    return cuda.device_array(count if shape is None else shape, dtype=kernel_dtype(buf.dtype))


def _check_same(name: str, buf: DeviceBuffer, count: int, dtype) -> None:
    if buf.size != count or buf.dtype != np.dtype(dtype):
        raise ValueError(f"expected {name} with {count} elements of {np.dtype(dtype)}, "
                         f"got {buf.size} elements of {buf.dtype}")


def _output(recvbuf, sendbuf, src: DeviceBuffer, count: int, shape):
    """(user-facing result, flat device view) of the output buffer."""
    if recvbuf is None:
        result = _empty_like(src, shape=shape)
        return result, adapt(result, "recvbuf", dtype=src.dtype).flat
    if recvbuf is sendbuf:
        return sendbuf, src.flat
    dst = adapt(recvbuf, "recvbuf")
    if src.dtype == host.BFLOAT16 and dst.dtype == np.uint16:
        dst = dst._replace(dtype=src.dtype)  # bfloat16 results may live in uint16 arrays
    _check_same("recvbuf", dst, count, src.dtype)
    return recvbuf, dst.flat


def _finishing(steps, wire):
    """Run ``steps``; afterwards (or on error) let the wire finish its device work."""
    try:
        return (yield from steps)
    finally:
        wire.finish()


def allreduce(comm, sendbuf, recvbuf, op, algorithm, timeout, blocking, *, aware=None):
    """All-reduce of device buffers with the ring (see Communicator.allreduce).

    Returns:
        ``recvbuf``, ``sendbuf`` (in place), or a new numba device array.
    """
    from .ring import allreduce_steps, displacements, even_counts

    src = adapt(sendbuf, "sendbuf")
    host.check_reducible(src.dtype, op)
    _check_algorithm("allreduce", algorithm, ("ring",))
    result, dst = _output(recvbuf, sendbuf, src, src.size, tuple(getattr(sendbuf, "shape", (src.size,))))
    resources = resources_for(comm)
    wire = make_wire(src.dtype, resources, aware=aware)

    def steps():
        yield from comm._signature_steps("allreduce", src.size, src.dtype, op, 0, None)
        if comm.size == 1:
            if device_address(dst) != device_address(src.flat):
                device_copy(dst, src.flat, resources.stream)
            return dst
        ctx = comm._context(wire.wire_dtype.itemsize)
        counts = even_counts(src.size, comm.size)
        yield from allreduce_steps(ctx, src.flat, dst, counts, displacements(counts), op, wire,
                                   mean=op == "mean")
        return dst

    return comm._execute("allreduce", _finishing(steps(), wire), timeout, blocking, result)


def reduce_scatter(comm, sendbuf, recvbuf, op, counts, algorithm, timeout, blocking, *, aware=None):
    """Reduce-scatter of device buffers with the ring (see Communicator.reduce_scatter)."""
    from .ring import displacements, reduce_scatter_steps

    src = adapt(sendbuf, "sendbuf")
    host.check_reducible(src.dtype, op)
    _check_algorithm("reduce_scatter", algorithm, ("ring",))
    counts = comm._scatter_counts(src.size, counts)
    mine = counts[comm.rank]
    result, dst = _output(recvbuf, None, src, mine, (mine,))
    resources = resources_for(comm)
    wire = make_wire(src.dtype, resources, aware=aware)
    displs = displacements(counts)

    def steps():
        yield from comm._signature_steps("reduce_scatter", src.size, src.dtype, op, 0, counts)
        if comm.size == 1:
            device_copy(dst, src.flat, resources.stream)
            return dst
        work_slot = resources.device.take(src.size * src.flat.dtype.itemsize)
        work = work_slot.view(kernel_dtype(src.dtype), src.size)

        def chunk(c):
            return dst if c == comm.rank else work[displs[c]:displs[c] + counts[c]]

        try:
            ctx = comm._context(wire.wire_dtype.itemsize)
            yield from reduce_scatter_steps(ctx, src.flat, chunk, counts, displs, op, wire,
                                            mean=op == "mean")
        finally:  # kernels may still read it: the next user waits for this event
            resources.device.give(work_slot, resources.record())
        return dst

    return comm._execute("reduce_scatter", _finishing(steps(), wire), timeout, blocking, result)


def allgather(comm, sendbuf, recvbuf, counts, algorithm, timeout, blocking, *, aware=None):
    """All-gather of device buffers with the ring (see Communicator.allgather)."""
    from .ring import allgather_steps, displacements

    src = adapt(sendbuf, "sendbuf")
    _check_algorithm("allgather", algorithm, ("ring",))
    counts = comm._gather_counts(src.size, counts)
    total = sum(counts)
    result, dst = _output(recvbuf, None, src, total, (total,))
    resources = resources_for(comm)
    wire = make_wire(src.dtype, resources, aware=aware)
    displs = displacements(counts)
    own = dst[displs[comm.rank]:displs[comm.rank] + counts[comm.rank]]
    in_place = src.size == 0 or device_address(own) == device_address(src.flat)

    def steps():
        yield from comm._signature_steps("allgather", src.size, src.dtype, None, 0, counts)
        if comm.size == 1:
            if not in_place:
                device_copy(own, src.flat, resources.stream)
            return dst
        ctx = comm._context(wire.wire_dtype.itemsize)

        def chunk(c):
            return dst[displs[c]:displs[c] + counts[c]]

        yield from allgather_steps(ctx, chunk, counts, displs, wire,
                                   first_src=None if in_place else src.flat)
        if not in_place:
            device_copy(own, src.flat, resources.stream)
        return dst

    return comm._execute("allgather", _finishing(steps(), wire), timeout, blocking, result)


def broadcast(comm, buf, root, algorithm, timeout, blocking, *, aware=None):
    """Broadcast of a device buffer with the pipelined chain (see Communicator.broadcast)."""
    from .ring import chain_broadcast_steps

    target = adapt(buf, "buf")
    _check_algorithm("broadcast", algorithm, ("chain",))
    resources = resources_for(comm)
    wire = make_wire(target.dtype, resources, aware=aware)

    def steps():
        yield from comm._signature_steps("broadcast", target.size, target.dtype, None, root, None)
        if comm.size == 1:
            return target.flat
        ctx = comm._context(wire.wire_dtype.itemsize)
        yield from chain_broadcast_steps(ctx, target.flat, root, wire)
        return target.flat

    return comm._execute("broadcast", _finishing(steps(), wire), timeout, blocking, buf)
