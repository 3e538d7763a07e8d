"""Device (Numba CUDA) versions of the engine's hot variation operators.

They take the same arguments as the host kernels of :mod:`mpievo.kernels.operators`
with device arrays in place of numpy ones, so a GPU island keeps its genomes on the
device and copies them to the host only to migrate or checkpoint:

* :func:`interpolate_rows` -- ``out[i] = clip(b + w_i (a - b))`` (= ``w a + (1-w) b``).
* :func:`uniform_rows` -- each gene from parent b where a pre-drawn uniform is below
  ``swap_prob``, else from parent a.
* :func:`mutate_sparse` -- Gaussian mutation of ``counts[i]`` distinct genes of row
  ``i`` from pre-drawn numbers (positions by Floyd's sampling), then box handling.
* :func:`breed_interpolate_mutate` -- the two above in sequence.
* :func:`bound_rows` -- clip or reflect every gene into the box.
* :func:`gaussian_mutation_rng` -- per-gene Gaussian mutation drawing its random
  numbers on the device (xoroshiro128+ states from :func:`make_rng_states`), when
  the host draws are not wanted.

With the same pre-drawn numbers the first five give the same bits as the host
kernels: products are rounded on their own (libdevice ``*_rn``: the GPU compiler
would otherwise fuse ``a + w * d`` into one FMA with a different rounding) and
mixed float32/float64 expressions are written with the types numba's host typing
gives them. Nothing here touches CUDA at import time; kernels compile on first use
and are cached per dtype.
"""

from __future__ import annotations

import numpy as np

from .reduce import is_device, launch_dims, simulator_enabled
from .workspace import zeroed_counter
from .operator_kernels import (bound_rows_kernel, interpolate_kernel, mutate_rng_kernel, mutate_sparse_kernel, uniform_kernel)
from ..operators import BOUND_CLIP, BOUND_MODES, BOUND_REFLECT, BOUND_RESAMPLE

#: 2-D launch: threads per block along genes (x) and rows (y), and the grid cap
THREADS_2D = (32, 8)
MAX_BLOCKS_2D = (64, 512)
SIMULATOR_THREADS_2D, SIMULATOR_BLOCKS_2D = (4, 2), (2, 2)
GENOME_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# ------------------------------------------------------------- launching
def launch_dims_2d(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(blocks, threads)`` for a 2-D grid-stride kernel (x: genes, y: rows)."""
    if simulator_enabled():
        threads, cap = SIMULATOR_THREADS_2D, SIMULATOR_BLOCKS_2D
    else:
        threads, cap = THREADS_2D, MAX_BLOCKS_2D
    blocks = (max(1, min(-(-cols // threads[0]), cap[0])), max(1, min(-(-rows // threads[1]), cap[1])))
    return blocks, threads


def require_device(arr, name: str):
    if not is_device(arr):
        raise TypeError(f"expected {name} to be a numba device array, got "
                        f"{type(arr).__module__}.{type(arr).__name__} "
                        "(copy it once with numba.cuda.to_device; genomes stay on the device)")
    return arr


def to_device(arr, stream, dtype=None):
    """Small per-call inputs (indices, weights, box): device arrays pass through."""
    if is_device(arr):
        return arr
    from numba import cuda

    host = np.ascontiguousarray(arr if dtype is None else np.asarray(arr, dtype=dtype))
    return cuda.to_device(host, stream=stream)


def genome_dtype(arr, name: str) -> str:
    dtype = np.dtype(arr.dtype)
    if dtype not in GENOME_DTYPES:
        raise TypeError(f"expected {name} of dtype float32 or float64, got {dtype}")
    if len(arr.shape) != 2:
        raise ValueError(f"expected {name} to be 2-D (rows, genes), got shape {tuple(arr.shape)}")
    return dtype.str


def _check_len(arr, n: int, name: str) -> None:
    if arr.shape[0] != n:
        raise ValueError(f"expected {name} of length {n}, got shape {tuple(arr.shape)}")


def _box(lower, upper, dim: int, dtype, stream):
    lower, upper = to_device(lower, stream, dtype), to_device(upper, stream, dtype)
    _check_len(lower, dim, "lower")
    _check_len(upper, dim, "upper")
    return lower, upper


def check_parents(genomes, idx_a, idx_b, out, stream):
    dtype = genome_dtype(require_device(genomes, "genomes"), "genomes")
    require_device(out, "out")
    if np.dtype(out.dtype) != np.dtype(dtype) or out.shape[1] != genomes.shape[1]:
        raise ValueError(f"expected out of shape (n, {genomes.shape[1]}) and dtype {np.dtype(dtype)}, "
                         f"got {tuple(out.shape)} {out.dtype}")
    n = out.shape[0]
    idx_a, idx_b = to_device(idx_a, stream, np.int64), to_device(idx_b, stream, np.int64)
    _check_len(idx_a, n, "idx_a")
    _check_len(idx_b, n, "idx_b")
    return dtype, idx_a, idx_b


def mode_code(mode) -> int:
    if isinstance(mode, str):
        if mode not in BOUND_MODES:
            raise ValueError(f"expected bounds mode among {tuple(BOUND_MODES)}, got {mode!r}")
        return BOUND_MODES[mode]
    if mode not in BOUND_MODES.values():
        raise ValueError(f"expected bounds mode code among {tuple(BOUND_MODES.values())}, got {mode!r}")
    return int(mode)


def interpolate_rows(genomes, idx_a, idx_b, omega, lower, upper, out, *, stream=0) -> None:
    """``out[i] = clip(G[ib[i]] + omega[i] * (G[ia[i]] - G[ib[i]]))`` on the device.

    Args:
        genomes: (m, dim) device array, float32 or float64.
        idx_a, idx_b: (n,) parent rows (host or device, int64).
        omega: (n,) weights of parent a, genome dtype.
        lower, upper: (dim,) box, genome dtype.
        out: (n, dim) device array, written.
        stream: numba stream.

    Raises:
        TypeError / ValueError: host genomes or out, wrong dtypes or shapes.
    """
    dtype, idx_a, idx_b = check_parents(genomes, idx_a, idx_b, out, stream)
    omega = to_device(omega, stream, dtype)
    _check_len(omega, out.shape[0], "omega")
    lower, upper = _box(lower, upper, out.shape[1], dtype, stream)
    if out.shape[0] and out.shape[1]:
        blocks, threads = launch_dims_2d(out.shape[0], out.shape[1])
        interpolate_kernel(dtype)[blocks, threads, stream](genomes, idx_a, idx_b, omega,
                                                           lower, upper, out)


def uniform_rows(genomes, idx_a, idx_b, uniforms, swap_prob: float, out, *, stream=0) -> None:
    """``out[i, j] = G[ib[i], j] if uniforms[i, j] < swap_prob else G[ia[i], j]``.

    Args:
        uniforms: (n, dim) float64 in [0, 1) (host draws ``rng.random(out.shape)``,
            or device ones).
        swap_prob: probability of taking a gene from parent b.
    """
    dtype, idx_a, idx_b = check_parents(genomes, idx_a, idx_b, out, stream)
    uniforms = to_device(uniforms, stream, np.float64)
    if tuple(uniforms.shape) != tuple(out.shape):
        raise ValueError(f"expected uniforms of shape {tuple(out.shape)}, got {tuple(uniforms.shape)}")
    if out.shape[0] and out.shape[1]:
        blocks, threads = launch_dims_2d(out.shape[0], out.shape[1])
        uniform_kernel(dtype)[blocks, threads, stream](genomes, idx_a, idx_b, uniforms,
                                                       np.float64(swap_prob), out)


def mutate_sparse(x, counts, pos_uniforms, normals, resample_uniforms, steps, scale, lower,
                  upper, mode, *, stream=0) -> None:
    """Mutate ``counts[i]`` distinct genes of each row of device array ``x`` in place.

    Same arguments and results as :func:`mpievo.kernels.operators.mutate_sparse`
    (draws from ``mpievo.evo.operators.draw_mutation``), with ``x`` on the device.
    ``counts`` may be host or device; the other draws are copied when on the host.

    Raises:
        TypeError / ValueError: ``x`` not a device array, bad shapes or mode.
    """
    dtype = genome_dtype(require_device(x, "x"), "x")
    n, dim = x.shape
    code = mode_code(mode)
    counts_host = counts.copy_to_host() if is_device(counts) else np.asarray(counts, np.int64)
    if counts_host.shape != (n,) or (n and (counts_host.min() < 0 or counts_host.max() > dim)):
        raise ValueError(f"expected counts of shape ({n},) with values in [0, {dim}], got "
                         f"shape {counts_host.shape}")
    starts = np.zeros(n, np.int64)
    np.cumsum(counts_host[:-1], out=starts[1:])
    total = int(counts_host.sum())
    _check_draws(total, normals, pos_uniforms, resample_uniforms, counts_host, dim, code)
    if total == 0:
        return
    from numba import cuda

    args = (to_device(counts_host, stream), to_device(starts, stream),
            to_device(_nonempty(pos_uniforms, np.float64), stream, np.float64),
            to_device(normals, stream, dtype),
            to_device(_nonempty(resample_uniforms, np.float64), stream, np.float64),
            to_device(steps, stream, dtype), to_device(scale, stream, dtype),
            *_box(lower, upper, dim, dtype, stream))
    _check_len(args[5], n, "steps")
    _check_len(args[6], dim, "scale")
    positions = cuda.device_array(total, np.int64, stream=stream)
    blocks, threads = launch_dims(n)
    mutate_sparse_kernel(dtype)[blocks, threads, stream](x, *args, code, positions)


def _nonempty(arr, dtype):
    # a zero-length draw array still needs a valid device allocation
    if not is_device(arr) and np.asarray(arr).size == 0:
        return np.zeros(1, dtype)
    return arr


def _check_draws(total, normals, pos_uniforms, resample_uniforms, counts, dim, code) -> None:
    if normals.shape[0] != total:
        raise ValueError(f"expected {total} normals (sum of counts), got {normals.shape[0]}")
    needs_positions = bool(np.any((counts > 0) & (counts < dim)))
    if needs_positions and pos_uniforms.shape[0] < total:
        raise ValueError(f"expected {total} position uniforms, got {pos_uniforms.shape[0]}")
    if code == BOUND_RESAMPLE and resample_uniforms.shape[0] < total:
        raise ValueError(f"expected {total} resample uniforms, got {resample_uniforms.shape[0]}")


def breed_interpolate_mutate(genomes, idx_a, idx_b, omega, counts, pos_uniforms, normals,
                             resample_uniforms, steps, scale, lower, upper, mode, out, *,
                             stream=0) -> None:
    """:func:`interpolate_rows` into ``out`` then :func:`mutate_sparse` of ``out``.

    Same children as the host's fused kernel with the same draws.
    """
    interpolate_rows(genomes, idx_a, idx_b, omega, lower, upper, out, stream=stream)
    mutate_sparse(out, counts, pos_uniforms, normals, resample_uniforms, steps, scale,
                  lower, upper, mode, stream=stream)


def bound_rows(x, lower, upper, mode, *, stream=0) -> int:
    """Clip or reflect every gene of device array ``x`` into the box, in place.

    Returns:
        The number of genes that were outside (reading it waits for the stream).

    Raises:
        ValueError: mode "resample" (it needs one host draw per gene outside, in
            row-major order: use mpievo.evo.operators.apply_bounds on the host).
    """
    dtype = genome_dtype(require_device(x, "x"), "x")
    code = mode_code(mode)
    if code not in (BOUND_CLIP, BOUND_REFLECT):
        raise ValueError(f"expected bounds mode 'clip' or 'reflect' on the device, got {mode!r}")
    lower, upper = _box(lower, upper, x.shape[1], dtype, stream)
    if not (x.shape[0] and x.shape[1]):
        return 0
    moved = zeroed_counter("bounded genes", stream)
    blocks, threads = launch_dims_2d(x.shape[0], x.shape[1])
    bound_rows_kernel(dtype)[blocks, threads, stream](x, lower, upper, code, moved)
    return int(moved.copy_to_host(stream=stream)[0])


def make_rng_states(n: int, seed: int, *, stream=0):
    """``n`` independent xoroshiro128+ generators (one per row) seeded by ``seed``."""
    from numba.cuda.random import create_xoroshiro128p_states

    if n < 1:
        raise ValueError(f"expected n >= 1 generators, got {n}")
    return create_xoroshiro128p_states(n, seed=seed, stream=stream)


def gaussian_mutation_rng(x, states, rate: float, steps, scale, lower, upper, mode="clip",
                          counts=None, *, stream=0):
    """Per-gene Gaussian mutation with device random numbers, in place.

    Row ``i`` uses generator ``states[i]``: for each gene in order it draws a
    uniform; below ``rate`` the gene gets ``steps[i] * scale[j] * N(0, 1)`` (and
    one more uniform when ``mode`` is "resample"), then is put back in the box.

    Args:
        x: (n, dim) device genomes.
        states: at least n generators from :func:`make_rng_states` (advanced).
        rate: per-gene probability in [0, 1].
        steps: (n,) step sizes; scale, lower, upper: (dim,).
        mode: "clip", "reflect" or "resample".
        counts: optional (n,) int64 device array for the per-row number of
            mutated genes (allocated when None).

    Returns:
        ``counts`` (device).
    """
    dtype = genome_dtype(require_device(x, "x"), "x")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"expected mutation rate in [0, 1], got {rate}")
    n, dim = x.shape
    if states.shape[0] < n:
        raise ValueError(f"expected at least {n} generator states, got {states.shape[0]}")
    steps = to_device(steps, stream, dtype)
    _check_len(steps, n, "steps")
    scale = to_device(scale, stream, dtype)
    _check_len(scale, dim, "scale")
    lower, upper = _box(lower, upper, dim, dtype, stream)
    from numba import cuda

    if counts is None:
        counts = cuda.device_array(n, np.int64, stream=stream)
    _check_len(counts, n, "counts")
    if n:
        blocks, threads = launch_dims(n)
        kernel = mutate_rng_kernel(dtype)
        kernel[blocks, threads, stream](x, states, np.float64(rate), steps, scale, lower, upper,
                                        mode_code(mode), counts)
    return counts
