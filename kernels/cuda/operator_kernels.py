"""Numba CUDA kernel templates of the device variation operators, and their compiled forms.

The templates are plain Python functions whose free names (``cuda``, ``mul``,
``mul64``, ``float64``, ``bound_value``, ...) are bound per genome dtype by
:func:`mpievo.kernels.cuda.reduce.bind_globals`; the factories compile each once per dtype
on first use. :mod:`mpievo.kernels.cuda.operators` checks arguments and launches them.
Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import functools

import numpy as np

from .reduce import compile_kernel, device_function, simulator_enabled
from ..operators import BOUND_REFLECT, BOUND_RESAMPLE


# ------------------------------------------------------------- templates
# Free names (cuda, mul, mul64, float64, bound_value, ...) are bound per dtype by
# bind_globals; see mpievo.kernels.cuda.reduce.

def _bound_value(x, lo, hi, mode, u):
    # mirrors mpievo.kernels.operators._bound_value, types included
    if x >= lo and x <= hi:
        return x
    if mode == BOUND_RESAMPLE:
        y = lo + mul64(u, float64(hi - lo))  # noqa: F821
    elif mode == BOUND_REFLECT:
        width = hi - lo
        if width <= 0:
            y = lo
        else:
            # host numba types ``2 * width`` (int * float32) as float64
            twice = float64(2.0) * float64(width)  # noqa: F821
            r = float64(x - lo) % twice  # noqa: F821
            y = lo + (r if r <= width else twice - r)
    else:
        y = x
    if not (y >= lo):
        return lo
    if y > hi:
        return hi
    return y


def _mutate_row(x, i, k, start, pos_uniforms, normals, resample_uniforms, step, scale,
                lower, upper, mode, positions):
    # Floyd's sampling as on the host; membership is checked against the genes
    # already chosen for this row (kept in ``positions``) instead of a mark array.
    dim = x.shape[1]
    for t in range(k):
        if k == dim:
            gene = t
        else:
            top = dim - k + t
            gene = int(pos_uniforms[start + t] * (top + 1))
            if gene > top:
                gene = top
            for s in range(t):
                if positions[start + s] == gene:
                    gene = top
                    break
            positions[start + t] = gene
        u = resample_uniforms[start + t] if mode == BOUND_RESAMPLE else 0.0
        v = x[i, gene] + mul(mul(step, scale[gene]), normals[start + t])  # noqa: F821
        x[i, gene] = bound_value(v, lower[gene], upper[gene], mode, u)  # noqa: F821


def _interpolate_kernel(genomes, idx_a, idx_b, omega, lower, upper, out):
    j0, i0 = cuda.grid(2)  # noqa: F821
    sj, si = cuda.gridsize(2)  # noqa: F821
    for i in range(i0, out.shape[0], si):
        a = idx_a[i]
        b = idx_b[i]
        w = omega[i]
        for j in range(j0, out.shape[1], sj):
            gb = genomes[b, j]
            v = gb + mul(w, genomes[a, j] - gb)  # noqa: F821
            out[i, j] = min(max(v, lower[j]), upper[j])


def _uniform_kernel(genomes, idx_a, idx_b, uniforms, swap_prob, out):
    j0, i0 = cuda.grid(2)  # noqa: F821
    sj, si = cuda.gridsize(2)  # noqa: F821
    for i in range(i0, out.shape[0], si):
        a = idx_a[i]
        b = idx_b[i]
        for j in range(j0, out.shape[1], sj):
            out[i, j] = genomes[b, j] if uniforms[i, j] < swap_prob else genomes[a, j]


def _mutate_sparse_kernel(x, counts, starts, pos_uniforms, normals, resample_uniforms, steps,
                          scale, lower, upper, mode, positions):
    i0 = cuda.grid(1)  # noqa: F821
    si = cuda.gridsize(1)  # noqa: F821
    for i in range(i0, x.shape[0], si):
        mutate_row(x, i, counts[i], starts[i], pos_uniforms, normals, resample_uniforms,  # noqa: F821
                   steps[i], scale, lower, upper, mode, positions)


def _bound_rows_kernel(x, lower, upper, mode, moved):
    j0, i0 = cuda.grid(2)  # noqa: F821
    sj, si = cuda.gridsize(2)  # noqa: F821
    count = 0
    for i in range(i0, x.shape[0], si):
        for j in range(j0, x.shape[1], sj):
            v = x[i, j]
            if not (v >= lower[j] and v <= upper[j]):
                x[i, j] = bound_value(v, lower[j], upper[j], mode, 0.0)  # noqa: F821
                count += 1
    if count > 0:
        cuda.atomic.add(moved, 0, count)  # noqa: F821


def _mutate_rng_kernel(x, states, rate, steps, scale, lower, upper, mode, counts):
    # one thread (and one generator) per row, genes in order: the result depends
    # only on the seed, never on the launch configuration
    i0 = cuda.grid(1)  # noqa: F821
    si = cuda.gridsize(1)  # noqa: F821
    for i in range(i0, x.shape[0], si):
        k = 0
        step = steps[i]
        for j in range(x.shape[1]):
            if uniform64(states, i) < rate:  # noqa: F821
                z = normal(states, i)  # noqa: F821
                u = uniform64(states, i) if mode == BOUND_RESAMPLE else 0.0  # noqa: F821
                v = x[i, j] + mul(mul(step, scale[j]), z)  # noqa: F821
                x[i, j] = bound_value(v, lower[j], upper[j], mode, u)  # noqa: F821
                k += 1
        counts[i] = k


# ------------------------------------------------------------- factories
def _sim_mul32(a, b):
    return np.float32(a) * np.float32(b)


def _sim_mul64(a, b):
    return np.float64(a) * np.float64(b)


@functools.lru_cache(maxsize=None)
def arithmetic(dtype_str: str) -> dict:
    """Names shared by every template for genomes of ``dtype_str``."""
    from numba import types as nbt

    if simulator_enabled():
        mul32, mul64 = _sim_mul32, _sim_mul64
    else:
        from numba.cuda import libdevice

        mul32, mul64 = libdevice.fmul_rn, libdevice.dmul_rn
    names = {"mul": mul64 if np.dtype(dtype_str) == np.float64 else mul32, "mul64": mul64,
             "float64": nbt.float64, "BOUND_RESAMPLE": BOUND_RESAMPLE,
             "BOUND_REFLECT": BOUND_REFLECT}
    names["bound_value"] = device_function(_bound_value, **names)
    return names


def _kernel(template, dtype_str: str, **extra):
    return compile_kernel(template, **arithmetic(dtype_str), **extra)


@functools.lru_cache(maxsize=None)
def interpolate_kernel(dtype_str: str):
    """Compiled interpolation-crossover kernel for genomes of ``dtype_str``."""
    return _kernel(_interpolate_kernel, dtype_str)


@functools.lru_cache(maxsize=None)
def uniform_kernel(dtype_str: str):
    """Compiled uniform-crossover kernel."""
    return _kernel(_uniform_kernel, dtype_str)


@functools.lru_cache(maxsize=None)
def mutate_sparse_kernel(dtype_str: str):
    """Compiled pre-drawn Gaussian mutation kernel (one thread per row)."""
    mutate_row = device_function(_mutate_row, **arithmetic(dtype_str))
    return _kernel(_mutate_sparse_kernel, dtype_str, mutate_row=mutate_row)


@functools.lru_cache(maxsize=None)
def bound_rows_kernel(dtype_str: str):
    """Compiled clip/reflect kernel."""
    return _kernel(_bound_rows_kernel, dtype_str)


@functools.lru_cache(maxsize=None)
def mutate_rng_kernel(dtype_str: str):
    """Compiled device-RNG Gaussian mutation kernel."""
    from numba.cuda import random as curand

    normal = (curand.xoroshiro128p_normal_float64 if np.dtype(dtype_str) == np.float64
              else curand.xoroshiro128p_normal_float32)
    return _kernel(_mutate_rng_kernel, dtype_str, normal=normal,
                   uniform64=curand.xoroshiro128p_uniform_float64)
