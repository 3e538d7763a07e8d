"""Device (GPU) buffers as the collectives see them: detection, parsing, adaptation.

Accepted buffers: numba device arrays, anything exposing ``__cuda_array_interface__``
(versions 2 and 3: CuPy, PyTorch, ...) and DLPack producers on a CUDA device
(``__dlpack_device__()[0]`` kDLCUDA = 2, or kDLCUDAManaged = 13). Each is adapted to a
numba device array *view* of the same memory (no copy); it must be C-contiguous.
Before MPI or a kernel touches the memory the producer's stream is synchronised:
the CAI ``stream`` when given, else the default stream.

Importing this module never touches CUDA: numba.cuda is imported inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mpievo.kernels import host
from mpievo.kernels.cuda.reduce import kernel_dtype, simulator_enabled

from ..buffers import check_same

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
#: DLPack device types whose memory is device memory (kDLCUDAHost is pinned host
#: memory: numpy.from_dlpack reads it as a host array)
DEVICE_DLPACK_TYPES = (KDL_CUDA, KDL_CUDA_MANAGED)
CAI_VERSIONS = (2, 3)
#: stream handles with a fixed meaning in the CUDA Array Interface and DLPack
LEGACY_DEFAULT_STREAM, PER_THREAD_DEFAULT_STREAM = 1, 2


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


# ------------------------------------------------------------ collective operands
def check_algorithm(collective: str, algorithm, supported: tuple) -> None:
    """Raise ValueError unless ``algorithm`` is None, "auto" or one of ``supported``
    (the algorithms ``collective`` has for device buffers)."""
    if algorithm not in (None, "auto") + supported:
        raise ValueError(f"expected {collective} algorithm for device buffers in "
                         f"{('auto',) + supported}, got {algorithm!r}")


def empty(count_or_shape, dtype):
    """A new numba device array of logical ``dtype`` (bfloat16 stored as uint16)."""
    from numba import cuda

    return cuda.device_array(count_or_shape, dtype=kernel_dtype(dtype))


def output(recvbuf, sendbuf, src: DeviceBuffer, count: int, shape):
    """(user-facing result, flat device view) of a collective's output buffer.

    ``recvbuf`` None allocates one shaped ``shape``; ``recvbuf is sendbuf`` means in place.

    Raises:
        ValueError: ``recvbuf`` without ``count`` elements of ``src``'s dtype.
    """
    if recvbuf is None:
        result = empty(shape, src.dtype)
        return result, adapt(result, "recvbuf", dtype=src.dtype).flat
    if recvbuf is sendbuf:
        return sendbuf, src.flat
    dst = adapt(recvbuf, "recvbuf")
    if src.dtype == host.BFLOAT16 and dst.dtype == np.uint16:
        dst = dst._replace(dtype=src.dtype)  # bfloat16 results may live in uint16 arrays
    check_same("recvbuf", dst, count, src.dtype)
    return recvbuf, dst.flat
