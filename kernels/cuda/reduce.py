"""Device reduction kernels (Numba CUDA): ``out = a op b`` and ``out /= n`` in place.

Same ops, dtypes and NaN semantics as :mod:`mpievo.kernels.host`: sum/prod/mean
follow IEEE arithmetic, max and min return NaN wherever either operand is NaN
(like ``numpy.maximum``). float16 and bfloat16 are computed in float32 and rounded
once to nearest-even, which is what numpy and ml_dtypes do on the host, so both
paths give the same values. bfloat16 has no Numba type: its arrays are viewed as
uint16 and converted bit-wise to and from float32 inside the kernel.

Nothing here touches CUDA at import time. Kernels are built on first use by
:func:`reduce_kernel` / :func:`divide_kernel` (cached per op and dtype) and use
grid-stride loops, so one launch configuration (:func:`launch_config`) covers any
size. Under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same kernel
bodies run in Python; only the float32 bit casts differ (libdevice on a GPU, numpy
views in the simulator).
"""

from __future__ import annotations

import builtins
import functools
import math
import types

import numpy as np

from .names import specialization_name
from ..host import BFLOAT16, check_reducible, is_floating

#: threads per block on a GPU (a multiple of the warp size; 256 keeps occupancy high
#: for a kernel that uses few registers)
THREADS_PER_BLOCK = 256
#: resident blocks per SM worth launching; more work per thread comes from the
#: grid-stride loop, which amortises index arithmetic
BLOCKS_PER_SM = 8
#: grid cap when the SM count is unknown
MAX_BLOCKS = 4096
#: the simulator runs every thread as a Python thread: keep grids tiny there (the
#: grid-stride loop still covers every element)
SIMULATOR_THREADS, SIMULATOR_BLOCKS = 16, 2


# ---------------------------------------------------------------- environment
def simulator_enabled() -> bool:
    """True when Numba runs CUDA kernels in its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba.cuda.core import config

    return bool(config.ENABLE_CUDASIM)


@functools.lru_cache(maxsize=1)
def device_sm_count() -> int | None:
    """Multiprocessor count of the current device, or None (simulator / unknown)."""
    if simulator_enabled():
        return None
    from numba import cuda

    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def launch_config(n: int, *, sm_count: int | None = None,
                  threads: int = THREADS_PER_BLOCK) -> tuple[int, int]:
    """Grid for a grid-stride kernel over ``n`` elements.

    Args:
        n: number of elements (>= 0).
        sm_count: multiprocessors on the device; caps the grid at
            ``sm_count * BLOCKS_PER_SM`` blocks (None: cap at MAX_BLOCKS).
        threads: threads per block.

    Returns:
        ``(blocks, threads)``; blocks is 0 when ``n`` is 0 (nothing to launch).

    Raises:
        ValueError: negative ``n`` or non-positive ``threads``/``sm_count``.
    """
    if n < 0:
        raise ValueError(f"expected n >= 0 elements, got {n}")
    if threads < 1:
        raise ValueError(f"expected threads >= 1, got {threads}")
    if sm_count is not None and sm_count < 1:
        raise ValueError(f"expected sm_count >= 1 or None, got {sm_count}")
    cap = MAX_BLOCKS if sm_count is None else sm_count * BLOCKS_PER_SM
    return min(math.ceil(n / threads), cap), threads


def launch_dims(n: int) -> tuple[int, int]:
    """Grid for ``n`` elements on the current device (tiny in the simulator)."""
    if simulator_enabled():
        blocks, threads = launch_config(n, threads=SIMULATOR_THREADS)
        return min(blocks, SIMULATOR_BLOCKS), threads
    return launch_config(n, sm_count=device_sm_count())


# ------------------------------------------------------------ dtype handling
def bound_to_device(bound: np.ndarray):
    """A (dim,) box bound or scale on the device: one element when it is uniform (a
    broadcast view of one number), which the kernels that take it index with stride 0."""
    from numba import cuda

    if bound.ndim == 1 and bound.strides == (0,):
        bound = bound[:1]
    return cuda.to_device(np.ascontiguousarray(bound))


def element_kind(dtype) -> str:
    """How a kernel handles ``dtype``: "native", "half" (float16) or "bfloat16"."""
    dtype = np.dtype(dtype)
    if BFLOAT16 is not None and dtype == BFLOAT16:
        return "bfloat16"
    if dtype == np.float16:
        return "half"
    return "native"


def kernel_dtype(dtype) -> np.dtype:
    """The dtype a kernel sees for ``dtype`` (bfloat16 travels as uint16 bits)."""
    return np.dtype(np.uint16) if element_kind(dtype) == "bfloat16" else np.dtype(dtype)


def kernel_view(arr, dtype=None):
    """``arr`` as the kernel sees it: bfloat16 (or uint16 holding bfloat16) as uint16.

    Args:
        arr: a device array (numba, or the simulator's).
        dtype: the logical dtype of ``arr`` (default ``arr.dtype``).

    Raises:
        TypeError: ``arr`` holds neither the logical nor the kernel dtype.
    """
    logical = np.dtype(arr.dtype if dtype is None else dtype)
    want = kernel_dtype(logical)
    if arr.dtype == want:
        return arr
    if arr.dtype != logical:
        raise TypeError(f"expected a device array of dtype {logical} (or {want}), got {arr.dtype}")
    return arr.view(want)


# ------------------------------------------------------- kernel templates
# Module-level templates compiled per (op, dtype) by binding their free names
# (cuda, load, store, combine, ...) in a fresh globals dict: nothing at module level
# is compiled or mutated, and the simulator can swap in its fake ``cuda`` module.

def _binary_template(out, a, b):
    start = cuda.grid(1)  # noqa: F821 (bound by bind_globals)
    step = cuda.gridsize(1)  # noqa: F821
    for i in range(start, out.size, step):
        out[i] = store(combine(load(a[i]), load(b[i])))  # noqa: F821


def _divide_template(out, divisor):
    start = cuda.grid(1)  # noqa: F821
    step = cuda.gridsize(1)  # noqa: F821
    for i in range(start, out.size, step):
        out[i] = store(load(out[i]) / divisor)  # noqa: F821


def _identity(x):
    return x


def _add(a, b):
    return a + b


def _mul(a, b):
    return a * b


def _max_int(a, b):
    return a if a >= b else b


def _min_int(a, b):
    return a if a <= b else b


def _max_float(a, b):
    # numpy.maximum: the first NaN operand wins, otherwise the larger value
    return a if (a >= b or a != a) else b


def _min_float(a, b):
    return a if (a <= b or a != a) else b


def _bf16_to_f32(bits):
    return bits_to_f32(uint32(bits) << 16)  # noqa: F821


def _f32_to_bf16(x):
    bits = f32_to_bits(x)  # noqa: F821
    if x != x:  # keep NaN a (quiet) NaN; rounding could carry it into infinity
        return uint16((bits >> 16) | 0x40)  # noqa: F821
    # round to nearest, ties to even (what ml_dtypes does on the host)
    return uint16((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)  # noqa: F821


def _gpu_f32_to_bits(x):
    return uint32(libdevice.float_as_int(x))  # noqa: F821


def _gpu_bits_to_f32(bits):
    return libdevice.int_as_float(int32(bits))  # noqa: F821


def _sim_f32_to_bits(x):
    return np.float32(x).view(np.uint32)


def _sim_bits_to_f32(bits):
    return np.uint32(bits).view(np.float32)


def bind_globals(template, **names):
    """A copy of ``template`` whose free (global) names resolve to ``names``, named
    after what they are bound to (:func:`~.cuda_names.specialization_name`), so that
    each specialisation has a disk-cache entry of its own."""
    namespace = {"__builtins__": builtins, "__name__": __name__, **names}
    fn = types.FunctionType(template.__code__, namespace, template.__name__,
                            template.__defaults__, template.__closure__)
    fn.__qualname__ = specialization_name(template, names)
    return fn


def device_function(template, **names):
    """``template`` compiled as a device function with its free names bound to ``names``."""
    from numba import cuda

    return cuda.jit(device=True)(bind_globals(template, cuda=cuda, **names))


def compile_kernel(template, *, options: dict | None = None, **names):
    """``template`` compiled as a kernel with its free names bound to ``names``
    (``cuda`` is bound to numba.cuda unless given), cached on disk on a GPU.

    The cache (Numba's: ``__pycache__`` beside the sources, or ``NUMBA_CACHE_DIR``)
    lets a second process load the kernel instead of compiling it; each
    specialisation has its own entry (see :mod:`.cuda_names`). ``options`` (e.g.
    ``max_registers``, ``fastmath``) go to ``cuda.jit`` on a GPU only: the simulator
    has no disk cache and takes none of them.
    """
    from numba import cuda

    names.setdefault("cuda", cuda)
    fn = bind_globals(template, **names)
    if simulator_enabled():
        return cuda.jit(fn)
    return cuda.jit(cache=True, **(options or {}))(fn)


@functools.lru_cache(maxsize=1)
def _bf16_converters():
    """(to_float32, from_float32) device functions for bfloat16 bits."""
    from numba import types as nbt

    ints = {"uint16": nbt.uint16, "uint32": nbt.uint32, "int32": nbt.int32}
    if simulator_enabled():
        to_bits, from_bits = _sim_f32_to_bits, _sim_bits_to_f32
    else:
        from numba.cuda import libdevice

        to_bits = device_function(_gpu_f32_to_bits, libdevice=libdevice, **ints)
        from_bits = device_function(_gpu_bits_to_f32, libdevice=libdevice, **ints)
    to_f32 = device_function(_bf16_to_f32, bits_to_f32=from_bits, **ints)
    from_f32 = device_function(_f32_to_bf16, f32_to_bits=to_bits, **ints)
    return to_f32, from_f32


def _load_store(kind: str):
    """(load, store) device functions mapping stored elements to compute values."""
    from numba import types as nbt

    if kind == "half":
        return nbt.float32, nbt.float16
    if kind == "bfloat16":
        return _bf16_converters()
    identity = device_function(_identity)
    return identity, identity


_COMBINE = {  # op -> (integer version, floating version)
    "sum": (_add, _add),
    "mean": (_add, _add),
    "prod": (_mul, _mul),
    "max": (_max_int, _max_float),
    "min": (_min_int, _min_float),
}


@functools.lru_cache(maxsize=None)
def reduce_kernel(op: str, dtype_str: str):
    """Compiled kernel ``k[blocks, threads, stream](out, a, b)``: ``out = a op b``.

    Args:
        op: one of mpievo.kernels.host.REDUCE_OPS.
        dtype_str: :func:`dtype_key` of the logical element type (arrays are
            passed through :func:`kernel_view`).

    Raises:
        ValueError / TypeError: unsupported op or dtype.
    """
    dtype = _dtype_from_str(dtype_str)
    check_reducible(dtype, op)
    load, store = _load_store(element_kind(dtype))
    combine = _COMBINE[op][1 if is_floating(dtype) else 0]
    return compile_kernel(_binary_template, load=load, store=store, combine=device_function(combine))


@functools.lru_cache(maxsize=None)
def divide_kernel(dtype_str: str):
    """Compiled kernel ``k[blocks, threads, stream](out, divisor)``: ``out /= divisor``.

    The divisor is passed as float32 for float16/bfloat16/float32 and float64 for
    float64 (see :func:`divisor_for`).

    Raises:
        TypeError: not a floating dtype.
    """
    dtype = _dtype_from_str(dtype_str)
    check_reducible(dtype, "mean")
    load, store = _load_store(element_kind(dtype))
    return compile_kernel(_divide_template, load=load, store=store)


def divisor_for(dtype, n: int):
    """The divisor value matching host.divide_into: ``n`` rounded to ``dtype`` first."""
    dtype = np.dtype(dtype)
    rounded = np.array(n, dtype=np.float64).astype(dtype)
    return np.float64(rounded) if dtype == np.float64 else np.float32(rounded)


def _dtype_from_str(dtype_str: str) -> np.dtype:
    # bfloat16's .str is '<V2' (not round-trippable), so callers pass its name
    if BFLOAT16 is not None and dtype_str in ("bfloat16", BFLOAT16.name):
        return BFLOAT16
    return np.dtype(dtype_str)


def dtype_key(dtype) -> str:
    """The cache key of ``dtype`` for :func:`reduce_kernel` / :func:`divide_kernel`."""
    dtype = np.dtype(dtype)
    return "bfloat16" if element_kind(dtype) == "bfloat16" else dtype.str


# ------------------------------------------------------------- launching
def _check_operands(out, *others) -> None:
    for other in others:
        if other.shape != out.shape:
            raise ValueError(f"expected operands of shape {out.shape}, got {other.shape}")
    if len(out.shape) != 1:
        raise ValueError(f"expected 1-D device arrays, got shape {out.shape}")


def device_reduce(out, a, b, op: str, *, dtype=None, stream=0) -> None:
    """``out = a op b`` element-wise on the device (``out`` may alias ``a`` or ``b``).

    Args:
        out, a, b: 1-D device arrays of the same length (numba device arrays).
        op: "sum", "prod", "max", "min" or "mean" (mean reduces like sum).
        dtype: logical dtype (default ``out.dtype``); pass bfloat16 for uint16
            arrays that hold bfloat16 bits.
        stream: numba stream to launch on (0: the default stream).

    Raises:
        ValueError / TypeError: shapes differ, unsupported op or dtype.
    """
    dtype = np.dtype(out.dtype if dtype is None else dtype)
    _check_operands(out, a, b)
    kernel = reduce_kernel(op, dtype_key(dtype))
    blocks, threads = launch_dims(out.shape[0])
    if blocks:
        kernel[blocks, threads, stream](kernel_view(out, dtype), kernel_view(a, dtype),
                                        kernel_view(b, dtype))


def device_reduce_into(dst, src, op: str, *, dtype=None, stream=0) -> None:
    """``dst = dst op src`` on the device (see :func:`device_reduce`)."""
    device_reduce(dst, dst, src, op, dtype=dtype, stream=stream)


def device_divide_into(dst, n: int, *, dtype=None, stream=0) -> None:
    """``dst /= n`` on the device (the end of ``mean``), like host.divide_into.

    Raises:
        ValueError: ``n`` < 1. TypeError: not a floating dtype.
    """
    if n < 1:
        raise ValueError(f"expected a divisor >= 1, got {n}")
    dtype = np.dtype(dst.dtype if dtype is None else dtype)
    _check_operands(dst)
    kernel = divide_kernel(dtype_key(dtype))
    blocks, threads = launch_dims(dst.shape[0])
    if blocks:
        kernel[blocks, threads, stream](kernel_view(dst, dtype), divisor_for(dtype, n))


def is_device(arr) -> bool:
    """True for a Numba device array (or any object with ``__cuda_ndarray__``)."""
    return bool(getattr(arr, "__cuda_ndarray__", False))
