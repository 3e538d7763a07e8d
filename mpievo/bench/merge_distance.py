"""The fitness of ``mpievo bench genomes --device cuda`` on the GPU (Numba CUDA).

``out[i] = sum_j (x[i, j] - t[j])**2`` with ``t[j] = sum_b w[b] * bases[b, j]`` in
float64, as :class:`mpievo.bench.genomes.MergeDistance` computes on the host:
the target is formed gene by gene inside the per-row reduction of
:mod:`mpievo.kernels.cuda.row_reduce`, so nothing genome-sized is allocated (only
the reduction's ``(rows, blocks)`` partials). Equal to the host's values to rounding:
the sums run in another order, and the GPU may fuse a product into an FMA.

Nothing here touches CUDA at import time; the kernels compile on first use.
"""

from __future__ import annotations

import functools

import numpy as np

from ..kernels.cuda import row_reduce as cuda_row_reduce
from ..kernels.cuda.reduce import device_function
from ..kernels.cuda.operators import GENOME_DTYPES, require_device


# ------------------------------------------------------------- templates
# Free name float64 is bound by bind_globals.

def _term(x, i, j, bases, weights):
    target = 0.0
    for b in range(bases.shape[0]):
        target += weights[b] * float64(bases[b, j])  # noqa: F821
    diff = float64(x[i, j]) - target  # noqa: F821
    return diff * diff, 0.0


def _finish(a, b, length):
    return a


@functools.lru_cache(maxsize=1)
def _kernels():
    from numba import types as nbt

    return cuda_row_reduce.build(device_function(_term, float64=nbt.float64),
                                 device_function(_finish, float64=nbt.float64))


def merge_distance(genomes, bases, weights) -> np.ndarray:
    """Squared distances (host float64 ``(n,)``) of device ``genomes`` to ``weights @ bases``.

    Args:
        genomes: (n, dim) device array, float32 or float64.
        bases: (B, dim) device array, float32 or float64.
        weights: (B,) float64 device array.

    Raises:
        TypeError / ValueError: host arrays, other dtypes or shapes that do not fit.
    """
    require_device(genomes, "genomes")
    require_device(bases, "bases")
    require_device(weights, "weights")
    if len(genomes.shape) != 2 or np.dtype(genomes.dtype) not in GENOME_DTYPES:
        raise TypeError(f"expected genomes: a 2-D float32 or float64 array, got {genomes.dtype} of "
                        f"shape {tuple(genomes.shape)}")
    n, dim = genomes.shape
    count = bases.shape[0]
    if tuple(bases.shape) != (count, dim) or tuple(weights.shape) != (count,):
        raise ValueError(f"expected bases of (B, {dim}) and weights of (B,), got {tuple(bases.shape)} "
                         f"and {tuple(weights.shape)}")
    if np.dtype(weights.dtype) != np.float64:
        raise TypeError(f"expected float64 weights, got {weights.dtype}")
    out = np.empty(n)
    if n:
        cuda_row_reduce.reduce_rows(_kernels(), genomes, bases, weights).copy_to_host(out)
    return out
