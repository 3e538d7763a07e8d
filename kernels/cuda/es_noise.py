"""Numba CUDA twin of :mod:`mpievo.kernels.es_noise`: an ES generation's members and the
mean's update on the device, from the generation's key alone (full noise).

Same noise (pair ``j``'s genes ``4b .. 4b + 3`` are the four normals of block ``base + j *
stride + b``: the :func:`~mpievo.kernels.random.normal_pair` of words 1 and 2, then of
words 3 and 0; :func:`mpievo.kernels.random.device_functions`, the host's bits) and the
same float64 arithmetic in the same order: every product the host follows with an add
goes through ``mul64`` (libdevice ``dmul_rn`` on a GPU), so the compiler cannot fuse it
into an FMA; ``sqrt`` and ``/`` are correctly rounded on both. So a device island's
members and mean are the host's bits.

* :func:`members`: one thread per (pair, block of four genes); both members of the pair
  from one draw, each clipped into the box (the host's ``np.clip`` after the rows).
* :func:`adam_update`, :func:`sgd_update`: one thread per block of four genes, summing
  ``c_j z_j`` over the pairs in order (float64), then the optimizer's step and the
  mean's clip, in place: no genome-sized temporary.

Nothing here touches CUDA at import time: the kernels compile on first use.

Example::

    rows = cuda.device_array((popsize, dim), np.float32)
    members(rows, mean, sigma, key, base, lower, upper)          # mean, lower, upper on the device
    adam_update(mean, m, v, coeffs, key, base, lower, upper, decay=0.0, lr=0.01, beta1=0.9,
                beta2=0.999, eps=1e-8, step=1)
"""

from __future__ import annotations

import functools

import numpy as np

from ..es_noise import pair_stride
from ..random import check_key, device_functions
from .operator_kernels import arithmetic
from .operators import genome_dtype, launch_dims_2d, require_device, to_device
from .reduce import compile_kernel, device_function, launch_dims


# ------------------------------------------------------------- device functions
# Free names: cuda, U, mul64, float64, sqrt, block, normal_pair, member_gene, step_gene.

def _member_gene(out, mean, sigma, lower, upper, j, g, z):
    # rows 2j and 2j + 1 at gene g: mean +- sigma z in float64, rounded once, then clipped
    if g < out.shape[1]:
        x = float64(mean[g])  # noqa: F821
        e = float64(z)  # noqa: F821
        out[2 * j, g] = x + mul64(sigma, e)  # noqa: F821
        out[2 * j, g] = min(max(out[2 * j, g], lower[g]), upper[g])
        out[2 * j + 1, g] = x + mul64(-sigma, e)  # noqa: F821
        out[2 * j + 1, g] = min(max(out[2 * j + 1, g], lower[g]), upper[g])


def _step_gene(mean, m, v, lower, upper, i, s, decay, lr, beta1, beta2, eps, fix1, fix2, momentum):
    # es_noise._step's arithmetic for gene i, whose sum_j c_j z_j is s; then the clip
    if i < mean.shape[0]:
        x = float64(mean[i])  # noqa: F821
        g = -s + mul64(decay, x)  # noqa: F821
        if v.shape[0] > 0:
            mi = mul64(beta1, float64(m[i])) + mul64(1.0 - beta1, g)  # noqa: F821
            vi = mul64(beta2, float64(v[i])) + mul64(mul64(1.0 - beta2, g), g)  # noqa: F821
            m[i] = mi
            v[i] = vi
            mean[i] = x - mul64(lr, mi / fix1) / (sqrt(vi / fix2) + eps)  # noqa: F821
        else:
            if m.shape[0] > 0:
                g = mul64(momentum, float64(m[i])) + g  # noqa: F821
                m[i] = g
            mean[i] = x - mul64(lr, g)  # noqa: F821
        mean[i] = min(max(mean[i], lower[i]), upper[i])


# ------------------------------------------------------------------ kernels
def _members_kernel(out, mean, sigma, lower, upper, base, stride, k0, k1, c2, c3):
    b0, j0 = cuda.grid(2)  # noqa: F821
    sb, sj = cuda.gridsize(2)  # noqa: F821
    for j in range(j0, out.shape[0] // 2, sj):
        row = base + U(j) * U(stride)  # noqa: F821
        for b in range(b0, stride, sb):
            w0, w1, w2, w3 = block(row + U(b), k0, k1, c2, c3)  # noqa: F821
            z0, z1 = normal_pair(w1, w2)  # noqa: F821
            z2, z3 = normal_pair(w3, w0)  # noqa: F821
            g = 4 * b
            member_gene(out, mean, sigma, lower, upper, j, g, z0)  # noqa: F821
            member_gene(out, mean, sigma, lower, upper, j, g + 1, z1)  # noqa: F821
            member_gene(out, mean, sigma, lower, upper, j, g + 2, z2)  # noqa: F821
            member_gene(out, mean, sigma, lower, upper, j, g + 3, z3)  # noqa: F821


def _update_kernel(mean, m, v, coeffs, lower, upper, decay, lr, beta1, beta2, eps, fix1, fix2, momentum,
                   base, stride, k0, k1, c2, c3):
    start = cuda.grid(1)  # noqa: F821
    for b in range(start, stride, cuda.gridsize(1)):  # noqa: F821
        s0, s1, s2, s3 = 0.0, 0.0, 0.0, 0.0
        for j in range(coeffs.shape[0]):      # the pairs in order, as the host
            w0, w1, w2, w3 = block(base + U(j) * U(stride) + U(b), k0, k1, c2, c3)  # noqa: F821
            z0, z1 = normal_pair(w1, w2)  # noqa: F821
            z2, z3 = normal_pair(w3, w0)  # noqa: F821
            c = coeffs[j]
            s0 = s0 + mul64(c, float64(z0))  # noqa: F821
            s1 = s1 + mul64(c, float64(z1))  # noqa: F821
            s2 = s2 + mul64(c, float64(z2))  # noqa: F821
            s3 = s3 + mul64(c, float64(z3))  # noqa: F821
        g = 4 * b
        step_gene(mean, m, v, lower, upper, g, s0, decay, lr, beta1, beta2, eps, fix1, fix2, momentum)  # noqa: F821
        step_gene(mean, m, v, lower, upper, g + 1, s1, decay, lr, beta1, beta2, eps, fix1, fix2,  # noqa: F821
                  momentum)
        step_gene(mean, m, v, lower, upper, g + 2, s2, decay, lr, beta1, beta2, eps, fix1, fix2,  # noqa: F821
                  momentum)
        step_gene(mean, m, v, lower, upper, g + 3, s3, decay, lr, beta1, beta2, eps, fix1, fix2,  # noqa: F821
                  momentum)


def _zero_kernel(x):
    start = cuda.grid(1)  # noqa: F821
    for i in range(start, x.shape[0], cuda.gridsize(1)):  # noqa: F821
        x[i] = 0


# ---------------------------------------------------------------- factories
@functools.lru_cache(maxsize=None)
def _names(dtype_str: str) -> dict:
    import math

    fns = device_functions()
    names = dict(arithmetic(dtype_str), U=np.uint64, sqrt=math.sqrt, block=fns["block"],
                 normal_pair=fns["normal_pair"])
    names["member_gene"] = device_function(_member_gene, **names)
    names["step_gene"] = device_function(_step_gene, **names)
    return names


@functools.lru_cache(maxsize=None)
def members_kernel(dtype_str: str):
    """Compiled members of a generation, one thread per (pair, block of four genes).

    Example::

        members_kernel("<f4")[blocks, threads](out, mean, sigma, lower, upper, base, stride, *key)
    """
    return compile_kernel(_members_kernel, **_names(dtype_str))


@functools.lru_cache(maxsize=None)
def update_kernel(dtype_str: str):
    """Compiled optimizer step of the mean (Adam or SGD), one thread per block of four genes.

    Example::

        update_kernel("<f4")   # launched by adam_update and sgd_update
    """
    return compile_kernel(_update_kernel, **_names(dtype_str))


@functools.lru_cache(maxsize=None)
def zero_kernel():
    """Compiled ``x[:] = 0`` of a 1-D device array.

    Example::

        zero_kernel()[blocks, threads](moment)
    """
    return compile_kernel(_zero_kernel)


# ----------------------------------------------------------------- callers
def _key(key, base) -> tuple:
    return np.uint64(int(base)), *(np.uint64(k) for k in check_key(key))


def _vector(arr, dim: int, dtype, name: str):
    arr = to_device(arr, 0, dtype)
    if tuple(arr.shape) != (dim,) or np.dtype(arr.dtype) != np.dtype(dtype):
        raise ValueError(f"expected {name} of shape ({dim},) and dtype {np.dtype(dtype)}, "
                         f"got {tuple(arr.shape)} {np.dtype(arr.dtype)}")
    return arr


def members(out, mean, sigma: float, key, base: int, lower, upper) -> None:
    """Every member of a generation into the rows of device ``out`` (popsize, dim), clipped
    into ``[lower, upper]``: the bits of :func:`mpievo.kernels.es_noise.members` followed by
    ``np.clip`` (``mean``, ``lower``, ``upper``: (dim,) of ``out``'s dtype, device or host).

    Example::

        members(rows, mean, 0.02, key, base, lower, upper)
    """
    dtype = genome_dtype(require_device(out, "out"), "out")
    popsize, dim = out.shape
    if popsize % 2:
        raise ValueError(f"expected an even number of rows (antithetic pairs), got {popsize}")
    mean = _vector(require_device(mean, "mean"), dim, dtype, "mean")
    lower, upper = _vector(lower, dim, dtype, "lower"), _vector(upper, dim, dtype, "upper")
    stride = pair_stride(dim)
    blocks, threads = launch_dims_2d(popsize // 2, stride)
    first, *words = _key(key, base)
    members_kernel(dtype)[blocks, threads](out, mean, np.float64(sigma), lower, upper, first, np.int64(stride),
                                           *words)


def _update(mean, m, v, coeffs, key, base, lower, upper, hyper) -> None:
    require_device(mean, "mean")
    dtype = np.dtype(mean.dtype)
    if len(mean.shape) != 1 or dtype not in (np.float32, np.float64):
        raise ValueError(f"expected the mean as a 1-D float32 or float64 device array, got shape "
                         f"{tuple(mean.shape)} of dtype {dtype}")
    dim = mean.shape[0]
    for arr, name in ((m, "m"), (v, "v")):
        if len(require_device(arr, name).shape) != 1 or arr.shape[0] not in (0, dim) or arr.dtype != dtype:
            raise ValueError(f"expected {name} of shape ({dim},) or (0,) and dtype {dtype}, got "
                             f"{tuple(arr.shape)} {np.dtype(arr.dtype)}")
    lower, upper = _vector(lower, dim, dtype, "lower"), _vector(upper, dim, dtype, "upper")
    coeffs = to_device(np.ascontiguousarray(coeffs, np.float64), 0)
    stride = pair_stride(dim)
    blocks, threads = launch_dims(stride)
    first, *words = _key(key, base)
    update_kernel(dtype.str)[blocks, threads](mean, m, v, coeffs, lower, upper, *(np.float64(h) for h in hyper),
                                              first, np.int64(stride), *words)


def adam_update(mean, m, v, coeffs, key, base: int, lower, upper, *, decay: float, lr: float, beta1: float,
                beta2: float, eps: float, step: int | None) -> None:
    """One Adam step in place on the device mean (``m``, ``v`` its moments), then the clip
    into ``[lower, upper]``: the bits of :func:`mpievo.kernels.es_noise.adam_update` over
    the whole genome followed by ``np.clip``.

    Example::

        adam_update(mean, m, v, coeffs, key, base, lower, upper, decay=0.0, lr=0.01,
                    beta1=0.9, beta2=0.999, eps=1e-8, step=1)
    """
    fix1, fix2 = (1.0, 1.0) if step is None else (1.0 - beta1 ** step, 1.0 - beta2 ** step)
    if v.shape[0] == 0:
        raise ValueError(f"expected Adam's second moments of shape ({mean.shape[0]},), got (0,)")
    _update(mean, m, v, coeffs, key, base, lower, upper, (decay, lr, beta1, beta2, eps, fix1, fix2, 0.0))


def sgd_update(mean, m, coeffs, key, base: int, lower, upper, *, decay: float, lr: float,
               momentum: float) -> None:
    """One SGD-with-momentum step in place on the device mean (``m`` the velocity; empty:
    the plain step), then the clip: the bits of :func:`mpievo.kernels.es_noise.sgd_update`.

    Example::

        sgd_update(mean, m, coeffs, key, base, lower, upper, decay=0.0, lr=0.01, momentum=0.9)
    """
    _update(mean, m, m[:0], coeffs, key, base, lower, upper, (decay, lr, 0.0, 0.0, 0.0, 1.0, 1.0, momentum))


def zeros(n: int, dtype):
    """A device array of ``n`` zeros of ``dtype`` (made on the device: no host copy).

    Example::

        moment = zeros(dim, np.float32)
    """
    from numba import cuda

    out = cuda.device_array(int(n), dtype)
    fill_zero(out)
    return out


def fill_zero(x) -> None:
    """``x[:] = 0`` in place on a 1-D device array.

    Example::

        fill_zero(moment)
    """
    if x.shape[0]:
        blocks, threads = launch_dims(x.shape[0])
        zero_kernel()[blocks, threads](x)


# ------------------------------------------------- the state of a device island's ES
def empty(shape, dtype):
    """An uninitialised device array (a generation's rows).

    Example::

        rows = empty((popsize, dim), np.float32)
    """
    from numba import cuda

    return cuda.device_array(shape, dtype)


def place(host: np.ndarray):
    """A device copy of a host array (the box).

    Example::

        lower = place(np.full(dim, -5.0, np.float32))
    """
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(host))


def copy(rows):
    """A device copy of a device array (the mean from an archive's row).

    Example::

        mean = copy(archive.genomes[best])
    """
    out = empty(tuple(rows.shape), rows.dtype)
    out.copy_to_device(rows)
    return out


def assign(out, values) -> None:
    """``out[:] = values`` on the device, from a device or a host array of ``out``'s shape.

    Example::

        assign(mean, immigrant_row)
    """
    if tuple(values.shape) != tuple(out.shape):
        raise ValueError(f"expected values of shape {tuple(out.shape)}, got {tuple(values.shape)}")
    if len(out.shape) and out.shape[0]:
        out.copy_to_device(values if hasattr(values, "__cuda_array_interface__")
                           else np.ascontiguousarray(values, out.dtype))


def to_host(arr) -> np.ndarray:
    """A host copy of a device array (for a checkpoint).

    Example::

        state = {"mean": to_host(mean)}
    """
    return arr.copy_to_host()
