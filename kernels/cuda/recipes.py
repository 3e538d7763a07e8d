"""Numba CUDA twins of :mod:`mpievo.kernels.recipes`: materialise recipes on the GPU.

Same random mapping, same arithmetic and the same order of operations as the host
kernel, so a recipe gives the same genome bits on the device as on the host (products
through the bound ``mul64``, libdevice ``dmul_rn`` on a GPU, so nothing is fused into
an FMA). One launch per pass, in the host's order: the weighted bases (one thread per
gene), then each term (dense: one thread per gene; sparse: one thread per tile,
walking its gaps like the host), then the clip. The templates' free names are bound by
:func:`mpievo.kernels.cuda.reduce.bind_globals`; nothing here touches CUDA at import time.
"""

from __future__ import annotations

import functools

import numpy as np

from .reduce import compile_kernel, launch_dims
from .operator_kernels import arithmetic
from ..random import device_functions
from ..recipes import GAPS, NORMALS, TERM_STREAM, TILE, term_arrays

_CONSTANTS = {"U": np.uint64, "TILE": TILE, "C2": np.uint64(TERM_STREAM), "NORMALS": np.uint64(NORMALS),
              "GAPS": np.uint64(GAPS)}


# ------------------------------------------------------------------ templates
def _sum_kernel(bases, weights, out, row):
    g0 = cuda.grid(1)  # noqa: F821
    sg = cuda.gridsize(1)  # noqa: F821
    for g in range(g0, out.shape[1], sg):
        acc = 0.0
        for b in range(bases.shape[0]):
            if weights[b] != 0.0:
                acc = acc + mul64(weights[b], float64(bases[b, g]))  # noqa: F821
        out[row, g] = acc


def _dense_term_kernel(out, row, coef, scale, ss, k0, k1, threshold):
    g0 = cuda.grid(1)  # noqa: F821
    sg = cuda.gridsize(1)  # noqa: F821
    for g in range(g0, out.shape[1], sg):
        w0, w1, w2, _ = block(U(g), k0, k1, C2, NORMALS)  # noqa: F821
        if w0 < threshold:
            z, _ = normal_pair(w1, w2)  # noqa: F821
            out[row, g] = float64(out[row, g]) + mul64(mul64(coef, float64(scale[g * ss])), float64(z))  # noqa: F821


def _sparse_term_kernel(out, row, coef, scale, ss, k0, k1, inv_log_q):
    t0 = cuda.grid(1)  # noqa: F821
    st = cuda.gridsize(1)  # noqa: F821
    dim = out.shape[1]
    for t in range(t0, (dim + TILE - 1) // TILE, st):  # noqa: F821
        g = t * TILE  # noqa: F821
        g1 = min(dim, g + TILE)  # noqa: F821
        while g < g1:
            w0, _, _, _ = block(U(g), k0, k1, C2, GAPS)  # noqa: F821
            gap = mul64(float64(log_unit(w0)), inv_log_q)  # noqa: F821
            if gap >= g1 - g:
                break
            g += int(gap)
            _, w1, w2, _ = block(U(g), k0, k1, C2, NORMALS)  # noqa: F821
            z, _ = normal_pair(w1, w2)  # noqa: F821
            out[row, g] = float64(out[row, g]) + mul64(mul64(coef, float64(scale[g * ss])), float64(z))  # noqa: F821
            g += 1


def _clip_kernel(out, row, lower, upper, bs):
    g0 = cuda.grid(1)  # noqa: F821
    sg = cuda.gridsize(1)  # noqa: F821
    for g in range(g0, out.shape[1], sg):
        v = out[row, g]
        b = g * bs
        if not v >= lower[b]:
            out[row, g] = lower[b]
        elif v > upper[b]:
            out[row, g] = upper[b]


# ----------------------------------------------------------------- factories
@functools.lru_cache(maxsize=None)
def _kernels(dtype_str: str) -> dict:
    """The four kernels, compiled for genomes of ``dtype_str`` on first use."""
    from numba import cuda

    fns = device_functions()
    names = dict(arithmetic(dtype_str), **_CONSTANTS, cuda=cuda, block=fns["block"],
                 normal_pair=fns["normal_pair"], log_unit=fns["log_unit"])
    return {name: compile_kernel(template, **names)
            for name, template in (("sum", _sum_kernel), ("dense", _dense_term_kernel),
                                   ("sparse", _sparse_term_kernel), ("clip", _clip_kernel))}


def materialize(bases, weights, terms, scale, lower, upper, out, row: int, stream=0) -> None:
    """Row ``row`` of the device array ``out`` := the genome of one recipe (the host's
    :func:`mpievo.kernels.recipes.materialize` bit for bit). ``bases``, ``scale``,
    ``lower`` and ``upper`` are device arrays (the box in ``out``'s dtype; a uniform scale
    or box may be one element, see :func:`~.cuda.bound_to_device`); ``weights``
    (B,) and ``terms`` (m, 3) rows of (key, coef, rate > 0) are host arrays."""
    kernels = _kernels(np.dtype(out.dtype).str)
    dim = out.shape[1]
    # a uniform scale or box comes as one element (bound_to_device): read it with stride 0
    ss, bs = int(scale.shape[0] > 1), int(lower.shape[0] > 1)
    blocks, threads = launch_dims(dim)
    weights = np.ascontiguousarray(weights, np.float64)
    kernels["sum"][blocks, threads, stream](bases, weights, out, row)
    keys, coefs, thresholds, inv_log_qs, dense, used = term_arrays(terms)
    for t in np.flatnonzero(used):
        k0, k1 = keys[t] & np.uint64(0xFFFFFFFF), keys[t] >> np.uint64(32)
        if dense[t]:
            kernels["dense"][blocks, threads, stream](out, row, float(coefs[t]), scale, ss, k0, k1, thresholds[t])
        else:
            tiles = launch_dims((dim + TILE - 1) // TILE)
            kernels["sparse"][tiles[0], tiles[1], stream](out, row, float(coefs[t]), scale, ss, k0, k1,
                                                          float(inv_log_qs[t]))
    kernels["clip"][blocks, threads, stream](out, row, lower, upper, bs)

