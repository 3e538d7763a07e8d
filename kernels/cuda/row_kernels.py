"""Numba CUDA kernel templates of :mod:`mpievo.kernels.cuda.rows`, and their compiled forms.

Templates are plain functions whose free names are bound by
:func:`mpievo.kernels.cuda.reduce.bind_globals`; the factories compile each on first use.
Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import functools

import numpy as np

from . import row_reduce as cuda_row_reduce
from .reduce import compile_kernel, device_function


# ------------------------------------------------------------- templates
# Free names are bound by bind_globals (see mpievo.kernels.cuda.reduce).

def _copy_kernel(src, rows, dst, slots):
    j0, k0 = cuda.grid(2)  # noqa: F821
    sj, sk = cuda.gridsize(2)  # noqa: F821
    for k in range(k0, rows.shape[0], sk):
        r = rows[k]
        s = slots[k]
        for j in range(j0, dst.shape[1], sj):
            dst[s, j] = src[r, j]


def _equal_kernel(a, ia, b, ib, equal):
    # ``equal`` starts all ones; any thread that sees a differing gene clears its
    # row (every writer stores the same 0, so the result does not depend on order)
    j0, k0 = cuda.grid(2)  # noqa: F821
    sj, sk = cuda.gridsize(2)  # noqa: F821
    for k in range(k0, ia.shape[0], sk):
        r = ia[k]
        s = ib[k]
        for j in range(j0, a.shape[1], sj):
            if not (a[r, j] == b[s, j]):
                equal[k] = 0


def _canonical(bits):
    # what ``x + 0.0`` does to the bits on the host: -0.0 -> +0.0, a signalling
    # NaN -> quiet (payload kept). Integer ops: a float add on a GPU would turn
    # every NaN into the canonical one.
    if (bits & MAGNITUDE) == ZERO:  # noqa: F821
        return ZERO  # noqa: F821
    if (bits & EXPONENT) == EXPONENT and (bits & MANTISSA) != ZERO:  # noqa: F821
        return bits | QUIET  # noqa: F821
    return bits


def _hash_kernel(bits, out):
    # kernels.operators.hash_rows: FNV-1a with an xor-shift per word, splitmix64's
    # finaliser; sequential along the row, so one thread per row
    for i in range(cuda.grid(1), bits.shape[0], cuda.gridsize(1)):  # noqa: F821
        h = FNV_OFFSET  # noqa: F821
        for j in range(bits.shape[1]):
            h = (h ^ canonical(uint64(bits[i, j]))) * FNV_PRIME  # noqa: F821
            h ^= h >> S29  # noqa: F821
        h = (h ^ (h >> S30)) * MIX1  # noqa: F821
        h = (h ^ (h >> S27)) * MIX2  # noqa: F821
        out[i] = h ^ (h >> S31)  # noqa: F821


def _centroid_kernel(genomes, centroid):
    # kernels.operators.centroid_distances's centroid, gene by gene in the same order
    m = genomes.shape[0]
    for j in range(cuda.grid(1), genomes.shape[1], cuda.gridsize(1)):  # noqa: F821
        c = 0.0
        for i in range(m):
            # float64 spelled out: in the simulator numpy 2 would keep a float32 sum
            c += float64(genomes[i, j])  # noqa: F821
        centroid[j] = c / m


def _distance_term(x, i, j, centroid, width):
    d = (float64(x[i, j]) - centroid[j]) / width[j]  # noqa: F821
    return d * d, 0.0


def _distance_finish(a, b, length):
    return math.sqrt(a)  # noqa: F821


# ------------------------------------------------------------- factories
@functools.lru_cache(maxsize=None)
def row_kernel(name: str):
    """Kernel "copy", "equal" or "centroid" (numba specialises it per argument type)."""
    from numba import types as nbt

    return compile_kernel({"copy": _copy_kernel, "equal": _equal_kernel,
                           "centroid": _centroid_kernel}[name], float64=nbt.float64)


@functools.lru_cache(maxsize=None)
def hash_kernel(itemsize: int):
    """The row-hash kernel over unsigned words of ``itemsize`` bytes (4 or 8)."""
    from numba import types as nbt

    u = np.uint64
    width = 8 * itemsize
    exponent_bits = 8 if itemsize == 4 else 11
    mantissa = (1 << (width - 1 - exponent_bits)) - 1
    masks = dict(ZERO=u(0), MAGNITUDE=u((1 << (width - 1)) - 1), MANTISSA=u(mantissa),
                 EXPONENT=u(((1 << exponent_bits) - 1) << (width - 1 - exponent_bits)),
                 QUIET=u((mantissa + 1) >> 1))
    canonical = device_function(_canonical, **masks)
    return compile_kernel(_hash_kernel, canonical=canonical, uint64=nbt.uint64,
                          FNV_OFFSET=u(14695981039346656037), FNV_PRIME=u(1099511628211),
                          MIX1=u(0xBF58476D1CE4E5B9), MIX2=u(0x94D049BB133111EB),
                          S27=u(27), S29=u(29), S30=u(30), S31=u(31))


@functools.lru_cache(maxsize=1)
def distance_kernels():
    """The :mod:`mpievo.kernels.cuda.row_reduce` kernels of the centroid distances."""
    import math

    from numba import types as nbt

    term = device_function(_distance_term, float64=nbt.float64)
    finish = device_function(_distance_finish, math=math)
    return cuda_row_reduce.build(term, finish)
