"""Numba CUDA kernel of ``delta`` genomes: ``clip(base + delta, lower, upper)`` on the GPU.

The host's :meth:`mpievo.evo.genomes.DeltaProblem.materialize_into` bit for bit: the
sum in numpy's result dtype of the base's and the rows' dtypes, rounded once to the
genomes' dtype, then clipped to the box (a NaN gene stays that NaN, bits included, as on the host).

Only a (dim,) base and, for a box that is not uniform, the (dim,) bounds live on the
device; a uniform box travels as two one-element arrays. Nothing here touches CUDA
at import time; the kernel compiles on first use for each dtype triple.
"""

from __future__ import annotations

import functools

import numpy as np

from .reduce import (_dtype_from_str, _load_store, bound_to_device, compile_kernel, dtype_key, element_kind, kernel_view)
from .operators import launch_dims_2d

def _materialize_kernel(base, rows, lower, upper, out):
    g0, r0 = cuda.grid(2)  # noqa: F821 (bound by bind_globals)
    sg, sr = cuda.gridsize(2)  # noqa: F821
    uniform = lower.shape[0] == 1
    for r in range(r0, rows.shape[0], sr):
        for g in range(g0, out.shape[1], sg):
            d = rows[r, g]
            # a NaN gene passes through as it is: the host's add returns the NaN
            # operand's bits, a GPU float32 add its canonical NaN (bases are finite)
            if d != d:
                v = store(d)  # noqa: F821
            else:
                v = store(wide(base[g]) + wide(d))  # noqa: F821
            b = 0 if uniform else g
            if v < lower[b]:
                v = lower[b]
            elif v > upper[b]:
                v = upper[b]
            out[r, g] = v


def _materialize_half_kernel(base, rows, lower, upper, out):
    # half-precision rows (mpievo.evo.half): float32 sum, clipped to the float32-widened
    # half box, rounded once (clip then round equals round then clip: the bounds are
    # half values and rounding is monotonic)
    g0, r0 = cuda.grid(2)  # noqa: F821 (bound by bind_globals)
    sg, sr = cuda.gridsize(2)  # noqa: F821
    uniform = lower.shape[0] == 1
    for r in range(r0, rows.shape[0], sr):
        for g in range(g0, out.shape[1], sg):
            v = load(rows[r, g])  # noqa: F821
            if v == v:
                v = base[g] + v
            b = 0 if uniform else g
            if v < lower[b]:
                v = lower[b]
            elif v > upper[b]:
                v = upper[b]
            out[r, g] = store(v)  # noqa: F821


@functools.lru_cache(maxsize=None)
def _half_kernel(dtype_str: str):
    load, store = _load_store(element_kind(_dtype_from_str(dtype_str)))
    return compile_kernel(_materialize_half_kernel, load=load, store=store)


def _numba_type(dtype):
    from numba import types as nbt

    return nbt.float64 if np.dtype(dtype) == np.float64 else nbt.float32


@functools.lru_cache(maxsize=None)
def _kernel(base_dtype: str, rows_dtype: str, out_dtype: str):
    wide = np.result_type(np.dtype(base_dtype), np.dtype(rows_dtype))
    return compile_kernel(_materialize_kernel, wide=_numba_type(wide), store=_numba_type(out_dtype))


def materialize(base, rows, lower, upper, out, stream=0) -> None:
    """``out[:n] := clip(base + rows, lower, upper)`` for the ``n`` device ``rows``
    (``base`` a (dim,) device array, float32 or float64 as bases are; ``lower`` and
    ``upper`` from :func:`~.cuda.bound_to_device`, the box in ``out``'s dtype; for
    half-precision rows and ``out`` a float32 base and the half box widened to float32).

    Raises:
        ValueError: shapes that do not fit together.
    """
    n, dim = rows.shape
    if base.shape != (dim,) or out.shape[0] < n or out.shape[1] != dim:
        raise ValueError(f"expected a base of ({dim},) and out of (>= {n}, {dim}), got "
                         f"{tuple(base.shape)} and {tuple(out.shape)}")
    if lower.shape != upper.shape or lower.shape not in ((1,), (dim,)):
        raise ValueError(f"expected bounds of (1,) or ({dim},), got {tuple(lower.shape)} and "
                         f"{tuple(upper.shape)}")
    if n == 0:
        return
    if element_kind(out.dtype) != "native":   # half rows: float32 base and bounds
        blocks, threads = launch_dims_2d(n, dim)
        _half_kernel(dtype_key(out.dtype))[blocks, threads, stream](
            base, kernel_view(rows), lower, upper, kernel_view(out))
        return
    kernel = _kernel(np.dtype(base.dtype).str, np.dtype(rows.dtype).str, np.dtype(out.dtype).str)
    blocks, threads = launch_dims_2d(n, dim)
    kernel[blocks, threads, stream](base, rows, lower, upper, out)
