"""Half-precision rows on the device (Numba CUDA): widen to float32, round back once.

A half-precision device island (``engine.dtype`` bfloat16 or float16, see
:mod:`mpievo.evo.half`) breeds in float32: :func:`widen_rows` gathers the parents
it uses as float32 rows, the float32 device operators breed, :func:`round_rows`
rounds the children to the half type, to nearest even -- the conversions of
:mod:`mpievo.kernels.cuda.reduce` (bfloat16 as uint16 bits, float16 natively), which give
the host's bits (:mod:`mpievo.kernels.bitcast`, ml_dtypes, numpy).

Nothing here touches CUDA at import time; kernels compile on first use, per dtype.
"""

from __future__ import annotations

import functools

import numpy as np

from .reduce import _dtype_from_str, _load_store, compile_kernel, dtype_key, element_kind, kernel_view
from .operators import launch_dims_2d, require_device, to_device

HALF_KINDS = ("half", "bfloat16")


def _widen_template(rows, src, out):
    """``out[r, j] = float32(src[rows[r], j])``."""
    j0, r0 = cuda.grid(2)  # noqa: F821 (x: genes, y: rows)
    dj, dr = cuda.gridsize(2)  # noqa: F821
    for r in range(r0, out.shape[0], dr):
        for j in range(j0, out.shape[1], dj):
            out[r, j] = load(src[rows[r], j])  # noqa: F821


def _round_template(src, out):
    """``out[r, j] = half(src[r, j])``, nearest even."""
    j0, r0 = cuda.grid(2)  # noqa: F821 (x: genes, y: rows)
    dj, dr = cuda.gridsize(2)  # noqa: F821
    for r in range(r0, out.shape[0], dr):
        for j in range(j0, out.shape[1], dj):
            out[r, j] = store(src[r, j])  # noqa: F821


@functools.lru_cache(maxsize=None)
def _kernels(dtype_str: str):
    load, store = _load_store(element_kind(_dtype_from_str(dtype_str)))
    return compile_kernel(_widen_template, load=load), compile_kernel(_round_template, store=store)


def _half(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if element_kind(dtype) not in HALF_KINDS:
        raise TypeError(f"expected a half-precision dtype (float16 or bfloat16), got {dtype}")
    return dtype


def _launch(kernel, shape, *args) -> None:
    if shape[0] and shape[1]:
        blocks, threads = launch_dims_2d(*shape)
        kernel[blocks, threads](*args)


def widen_rows(genomes, rows, dtype):
    """A new float32 device array of ``genomes[rows]`` (rows of the half ``dtype``), exact."""
    from numba import cuda

    dtype = _half(dtype)
    require_device(genomes, "genomes")
    rows = to_device(np.asarray(rows, np.int64), 0)
    out = cuda.device_array((rows.shape[0], genomes.shape[1]), np.float32)
    _launch(_kernels(dtype_key(dtype))[0], out.shape, rows, kernel_view(genomes, dtype), out)
    return out


def round_rows(src, out, dtype):
    """float32 device rows ``src`` rounded into ``out`` (same shape, the half ``dtype``)."""
    dtype = _half(dtype)
    require_device(src, "src")
    require_device(out, "out")
    if tuple(src.shape) != tuple(out.shape) or np.dtype(src.dtype) != np.float32:
        raise ValueError(f"expected float32 src of shape {tuple(out.shape)}, got {tuple(src.shape)} {src.dtype}")
    _launch(_kernels(dtype_key(dtype))[1], tuple(out.shape), src, kernel_view(out, dtype))
    return out
