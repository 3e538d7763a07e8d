"""Device (Numba CUDA) versions of the counter-based breeding kernels of
:mod:`mpievo.kernels.counter_operators`, for a GPU island's large genomes.

Same arguments as the host kernels with numba device arrays for the genomes, the
same random mapping and the same result bits, so a device run can agree bit for bit
with a host run (SBX excepted on a GPU: its ``pow`` may differ from libm's in the
last bit). Small per-call inputs (parent indices, weights, step sizes, the box) may
be host arrays, copied on the launch's stream. Kernels: :mod:`.cuda_counter_kernels`.
Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import numpy as np

from ..counter_operators import CROSSOVER_CODES, TILE
from .counter_kernels import cross_kernel, fill_kernel, resample_kernel, vary_dense_kernel, vary_sparse_kernel
from .fast_math import check_device_math
from .operator_kernels import interpolate_kernel
from .operators import genome_dtype, mode_code, check_parents, require_device, to_device, launch_dims_2d
from ..random import check_key


# ------------------------------------------------------------- arguments
def _rows(x, name: str) -> str:
    """dtype key of the device genome array ``x`` (2-D, float32 or float64)."""
    return genome_dtype(require_device(x, name), name)


def _vector(arr, n: int, dtype: str, name: str, stream):
    """``arr`` as an (n,) device array of ``dtype`` (host arrays are copied and cast)."""
    arr = to_device(arr, stream, dtype)
    if np.dtype(arr.dtype) != np.dtype(dtype):
        raise TypeError(f"expected {name} of dtype {np.dtype(dtype)}, got {np.dtype(arr.dtype)}")
    if tuple(arr.shape) != (n,):
        raise ValueError(f"expected {name} of shape ({n},), got {tuple(arr.shape)}")
    return arr


def _box(lower, upper, dim: int, dtype: str, stream):
    return _vector(lower, dim, dtype, "lower", stream), _vector(upper, dim, dtype, "upper", stream)


def _key_args(key, base) -> tuple:
    """The kernels' trailing ``k0, k1, k2, k3, base`` (uint64 scalars)."""
    if int(base) < 0:
        raise ValueError(f"expected a first block >= 0, got {base}")
    return (*(np.uint64(k) for k in check_key(key)), np.uint64(int(base)))


def _host_counts(counts, n: int) -> np.ndarray:
    if counts is None:
        return np.empty(n, np.int64)
    if (not isinstance(counts, np.ndarray) or counts.dtype != np.int64 or counts.shape != (n,)
            or not counts.flags.c_contiguous):
        raise TypeError(f"expected counts to be a contiguous host numpy int64 array of shape ({n},), "
                        f"got {type(counts).__name__} {getattr(counts, 'dtype', None)} "
                        f"{tuple(getattr(counts, 'shape', ()))}")
    return counts


def _interpolation(genomes, idx_a, idx_b, omega, x, dtype: str, stream):
    """Checked ``(genomes, idx_a, idx_b, omega)`` on the device for interpolating into ``x``."""
    genomes_dtype = _rows(genomes, "genomes")
    if genomes_dtype != dtype or genomes.shape[1] != x.shape[1]:
        raise ValueError(f"expected genomes of dtype {np.dtype(dtype)} and {x.shape[1]} genes (like x), "
                         f"got {np.dtype(genomes_dtype)} and {genomes.shape[1]}")
    n = x.shape[0]
    return (genomes, _vector(idx_a, n, np.dtype(np.int64).str, "idx_a", stream),
            _vector(idx_b, n, np.dtype(np.int64).str, "idx_b", stream),
            _vector(omega, n, dtype, "omega", stream))


def _quad_grid(x):
    return launch_dims_2d(x.shape[0], (x.shape[1] + 3) // 4)


def _read_back(dev, host, stream):
    dev.copy_to_host(host, stream=stream)
    if stream:  # a copy on a stream may return before it is done
        stream.synchronize()
    return host


# ------------------------------------------------------------- operators
def vary(genomes, idx_a, idx_b, omega, interpolate: bool, x, steps, scale, lower, upper, mode,
         threshold: int, inv_log_q: float, dense: bool, key, base: int, counts=None, *,
         stream=0, workspace=None, math: str = "exact") -> np.ndarray:
    """Interpolation crossover (optional) then Gaussian mutation of every row of device ``x``.

    Same arguments, meaning and result bits as :func:`mpievo.kernels.counter_operators.vary`.

    Args:
        genomes: (m, dim) device parents, read only when ``interpolate`` (as are
            ``idx_a``, ``idx_b`` (n,) int64 and ``omega`` (n,), genome dtype).
        x: (n, dim) device children (float32 or float64), mutated in place.
        steps: (n,); scale, lower, upper: (dim,); all of x's dtype, host or device.
        mode: bound mode code or name; threshold: ``rate_threshold(rate)`` (0: no
            mutation); inv_log_q: ``1 / log1p(-rate)`` (sparse); dense: mask words.
        key, base: stream key (four ints below 2**32) and first block.
        counts: optional (n,) host int64 array to write the counts into.
        stream: numba stream (the counts are read back on it).
        workspace: a :class:`~.cuda_workspace.BreedWorkspace` for x's rows and dtype:
            the host inputs go up in one transfer into its buffers, the counts come
            back from it, all on its stream (``stream`` is then ignored); no device
            allocation. Same results.
        math: "exact" (the host's bits) or "fast" (hardware normals and FMA for the
            mutation: repeatable on one GPU model, not the host's bits; see
            :mod:`.cuda_fast_math`).

    Returns:
        The (n,) int64 genes mutated per row, a host array (``counts`` when given).

    Raises:
        TypeError / ValueError: host genomes or x, wrong dtypes or shapes, bad mode or key.
    """
    dtype = _rows(x, "x")
    n, dim = x.shape
    code = mode_code(mode)
    out = _host_counts(counts, n)
    check_device_math(math)
    threshold = int(threshold)
    if threshold < 0:
        raise ValueError(f"expected a mutation threshold >= 0, got {threshold}")
    keys = _key_args(key, base)
    dev_counts = None
    if workspace is not None:
        stream = workspace.require(n, dtype).stream
        packed = workspace.upload(steps, *((idx_a, idx_b, omega) if interpolate else ()))
        steps, dev_counts = packed["steps"], packed["counts"]
        if interpolate:
            idx_a, idx_b, omega = packed["idx_a"], packed["idx_b"], packed["omega"]
    steps = _vector(steps, n, dtype, "steps", stream)
    scale = _vector(scale, dim, dtype, "scale", stream)
    lower, upper = _box(lower, upper, dim, dtype, stream)
    if interpolate:
        genomes, idx_a, idx_b, omega = _interpolation(genomes, idx_a, idx_b, omega, x, dtype, stream)
    out[:] = 0
    if not (n and dim):
        return out
    if interpolate and not (dense and threshold):
        blocks, threads = launch_dims_2d(n, dim)
        interpolate_kernel(dtype)[blocks, threads, stream](genomes, idx_a, idx_b, omega, lower, upper, x)
    if not threshold:
        return out
    if dev_counts is None:
        from numba import cuda

        dev_counts = cuda.to_device(out, stream=stream)
    if dense:
        if not interpolate:  # not read: stand-ins of the right types, no allocation
            genomes, idx_a, idx_b, omega = x, dev_counts, dev_counts, steps
        blocks, threads = launch_dims_2d(n, (dim + 1) // 2)
        vary_dense_kernel(dtype, math)[blocks, threads, stream](
            genomes, idx_a, idx_b, omega, bool(interpolate), x, steps, scale, lower, upper, np.int64(code),
            np.uint64(threshold), *keys, dev_counts)
    else:
        blocks, threads = launch_dims_2d(n, -(-dim // TILE))
        vary_sparse_kernel(dtype, math)[blocks, threads, stream](
            x, steps, scale, lower, upper, np.int64(code), np.float64(inv_log_q), *keys, dev_counts)
    if workspace is not None:
        return workspace.read_counts(out)
    return _read_back(dev_counts, out, stream)


def cross(genomes, idx_a, idx_b, kind: int, swap_threshold: int, alpha, coef, eta: float, key,
          base: int, out, *, stream=0, workspace=None) -> None:
    """Uniform, blend or SBX crossover of device rows ``idx_a[i]``, ``idx_b[i]`` into device ``out[i]``.

    Same arguments and result bits as :func:`mpievo.kernels.counter_operators.cross`
    (SBX to a few ulps on a GPU); ``alpha`` and ``coef`` are cast to the genome dtype,
    as the host's caller passes them.

    Raises:
        TypeError / ValueError: host arrays, wrong dtypes or shapes, unknown kind or bad key.
    """
    if workspace is not None:   # the indices go up in one transfer into its buffers, on its stream
        stream = workspace.require(out.shape[0], out.dtype).stream
        packed = workspace.upload(idx_a=idx_a, idx_b=idx_b)
        idx_a, idx_b = packed["idx_a"], packed["idx_b"]
    dtype, idx_a, idx_b = check_parents(genomes, idx_a, idx_b, out, stream)
    if kind not in CROSSOVER_CODES.values():
        raise ValueError(f"expected a crossover code among {tuple(CROSSOVER_CODES.values())}, got {kind!r}")
    keys = _key_args(key, base)
    if not (out.shape[0] and out.shape[1]):
        return
    cast = np.dtype(dtype).type
    blocks, threads = _quad_grid(out)
    cross_kernel(dtype)[blocks, threads, stream](
        genomes, idx_a, idx_b, np.int64(kind), np.uint64(swap_threshold), cast(alpha), cast(coef),
        np.float64(1.0 / (float(eta) + 1.0)), *keys, out)


def resample_outside(x, lower, upper, key, base: int, *, stream=0) -> int:
    """Genes of device ``x`` outside the box (or NaN) drawn uniformly in it, in place, as
    :func:`mpievo.kernels.counter_operators.resample_outside`.

    Returns:
        How many genes were outside (reading it waits for the stream).
    """
    dtype = _rows(x, "x")
    lower, upper = _box(lower, upper, x.shape[1], dtype, stream)
    keys = _key_args(key, base)
    if not (x.shape[0] and x.shape[1]):
        return 0
    from .workspace import zeroed_counter

    dev_moved = zeroed_counter("resampled genes", stream)
    blocks, threads = _quad_grid(x)
    resample_kernel(dtype)[blocks, threads, stream](x, lower, upper, *keys, dev_moved)
    return int(_read_back(dev_moved, np.zeros(1, np.int64), stream)[0])


def uniform_fill(x, lower, upper, key, base: int, *, stream=0) -> None:
    """Every gene of device ``x`` uniform in the box, in place, as
    :func:`mpievo.kernels.counter_operators.uniform_fill` (``gene_blocks(n, dim)`` blocks)."""
    dtype = _rows(x, "x")
    lower, upper = _box(lower, upper, x.shape[1], dtype, stream)
    keys = _key_args(key, base)
    if x.shape[0] and x.shape[1]:
        blocks, threads = _quad_grid(x)
        fill_kernel(dtype)[blocks, threads, stream](x, lower, upper, *keys)
