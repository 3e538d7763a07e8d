"""Deterministic per-row float64 reductions on the device (Numba CUDA).

``out[i] = finish(sum_j a(i, j), combine_j b(i, j), length)`` where a per-element
``term(x, i, j, aux1, aux2) -> (a, b)`` is summed and ``b`` is summed or multiplied
(griewank's product). Used by the built-in problems
(:mod:`mpievo.kernels.cuda.problems`) and the archive's diversity
(:func:`mpievo.kernels.cuda.rows.centroid_distances`).

No float atomics: each row is split over ``blocks_x`` blocks that each reduce their
share in shared memory (a fixed tree) and write one float64 partial to an
``(rows, blocks_x)`` buffer; a second kernel combines each row's partials in index
order. The result is the same bits on every run for a given device and shape (the
split follows the device's multiprocessor count, so another GPU model may round
differently). A row of 10^7 genes and 8 rows fill the whole GPU.

Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import math

import numpy as np

from .reduce import BLOCKS_PER_SM, compile_kernel, device_function, device_sm_count, launch_dims
from .reduce import simulator_enabled
from .workspace import scratch

#: threads per reduction block (a power of two: the tree halves it)
REDUCE_THREADS = 256
#: the simulator runs each thread as a Python thread: small blocks and grids there
#: (still more rows and genes than blocks, so both grid-stride loops are exercised)
SIMULATOR_REDUCE_THREADS, SIMULATOR_GRID = 8, (2, 3)
#: CUDA's limit on gridDim.y; rows beyond it are covered by the row loop
MAX_GRID_Y = 65535


# ------------------------------------------------------------- templates
# Free names (cuda, float64, THREADS, term, combine, INIT, finish) are bound by
# bind_globals; see mpievo.kernels.cuda.reduce.

def _partials_template(x, aux1, aux2, part_a, part_b):
    # block (bx, by): rows by, by + gridDim.y, ...; genes of this block's stripes
    buf_a = cuda.shared.array(THREADS, float64)  # noqa: F821
    buf_b = cuda.shared.array(THREADS, float64)  # noqa: F821 (own line: the simulator keys by line)
    tid = cuda.threadIdx.x  # noqa: F821
    bx = cuda.blockIdx.x  # noqa: F821
    length = x.shape[1]
    for i in range(cuda.blockIdx.y, part_a.shape[0], cuda.gridDim.y):  # noqa: F821
        a = 0.0
        b = INIT  # noqa: F821
        for j in range(bx * THREADS + tid, length, cuda.gridDim.x * THREADS):  # noqa: F821
            ta, tb = term(x, i, j, aux1, aux2)  # noqa: F821
            a += ta
            b = combine(b, tb)  # noqa: F821
        buf_a[tid] = a
        buf_b[tid] = b
        cuda.syncthreads()  # noqa: F821
        step = THREADS // 2  # noqa: F821
        while step > 0:
            if tid < step:
                buf_a[tid] += buf_a[tid + step]
                buf_b[tid] = combine(buf_b[tid], buf_b[tid + step])  # noqa: F821
            cuda.syncthreads()  # noqa: F821
            step //= 2
        if tid == 0:
            part_a[i, bx] = buf_a[0]
            part_b[i, bx] = buf_b[0]
        cuda.syncthreads()  # noqa: F821 (the buffers are refilled for the next row)


def _finish_template(part_a, part_b, length, out):
    # one thread per row, partials in index order
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):  # noqa: F821
        a = 0.0
        b = INIT  # noqa: F821
        for k in range(part_a.shape[1]):
            a += part_a[i, k]
            b = combine(b, part_b[i, k])  # noqa: F821
        out[i] = finish(a, b, length)  # noqa: F821


def _add(a, b):
    return a + b


def _multiply(a, b):
    return a * b


# ------------------------------------------------------------- building
def reduce_threads() -> int:
    """Threads per reduction block on the current backend."""
    return SIMULATOR_REDUCE_THREADS if simulator_enabled() else REDUCE_THREADS


def build(term, finish, *, product: bool = False):
    """``(partials_kernel, finish_kernel)`` for a reduction.

    Args:
        term: device function ``term(x, i, j, aux1, aux2) -> (a, b)`` (float64 pair).
        finish: device function ``finish(a, b, length) -> float64``.
        product: combine ``b`` by multiplication (identity 1) instead of a sum.

    The kernels compile on first launch; callers cache what this returns.
    """
    from numba import cuda
    from numba import types as nbt

    combine = device_function(_multiply if product else _add)
    names = dict(cuda=cuda, float64=nbt.float64, THREADS=reduce_threads(), term=term,
                 combine=combine, INIT=1.0 if product else 0.0, finish=finish)
    return compile_kernel(_partials_template, **names), compile_kernel(_finish_template, **names)


def grid(rows: int, length: int) -> tuple[int, int]:
    """``(blocks_x, blocks_y)`` of the partials kernel: enough blocks to fill the device."""
    threads = reduce_threads()
    per_row = max(1, math.ceil(length / threads))
    if simulator_enabled():
        return min(per_row, SIMULATOR_GRID[0]), max(1, min(rows, SIMULATOR_GRID[1]))
    blocks_y = max(1, min(rows, MAX_GRID_Y))
    target = device_sm_count() * BLOCKS_PER_SM
    return max(1, min(per_row, math.ceil(target / blocks_y))), blocks_y


def reduce_rows(kernels, x, aux1, aux2, *, rows: int | None = None, out=None, stream=0):
    """Run a :func:`build` reduction over the rows of device array ``x``.

    Args:
        kernels: what :func:`build` returned.
        x: 2-D device array; ``x.shape[1]`` is the reduced length.
        aux1, aux2: passed to ``term`` (arrays or scalars).
        rows: rows reduced (default ``x.shape[0]``; ``term`` maps a row index to
            what it reads, so this may exceed ``x.shape[0]``).
        out: float64 device array of ``rows`` elements (allocated when None).
        stream: numba stream.

    Returns:
        ``out`` (device, not waited for).
    """
    from numba import cuda

    rows = x.shape[0] if rows is None else rows
    if out is None:
        out = cuda.device_array(rows, "float64", stream=stream)
    if rows == 0:
        return out
    partials, finish = kernels
    blocks = grid(rows, x.shape[1])
    # read only by the finish kernel queued right after on the same stream: reusable
    part_a = scratch("reduce partials a", (rows, blocks[0]), np.float64, stream)
    part_b = scratch("reduce partials b", (rows, blocks[0]), np.float64, stream)
    partials[blocks, reduce_threads(), stream](x, aux1, aux2, part_a, part_b)
    finish_blocks, finish_threads = launch_dims(rows)
    finish[finish_blocks, finish_threads, stream](part_a, part_b, x.shape[1], out)
    return out
