"""Numba CUDA kernel templates of the counter-based breeding operators, and their
compiled forms: the device twins of :mod:`mpievo.kernels.counter_operators`.

Same random mapping (see that module's docstring), the same generator
(:func:`mpievo.kernels.random.device_functions`) and the same arithmetic, types
included: every product the host follows with an add goes through the bound ``mul``
/ ``mul64`` (libdevice ``*_rn`` on a GPU), so the compiler cannot fuse it into an FMA.

Layouts (2-D grid-stride loops, x along the genome, y over children):

* dense mutation -- one thread per (child, gene pair): the pair's block gives both
  mask words and both normals; the interpolation is fused into the same pass.
* sparse mutation -- one thread per (child, tile) walking the geometric gaps of its
  tile like the host; the interpolation runs before it as its own pass
  (:func:`mpievo.kernels.cuda.operator_kernels.interpolate_kernel`, the host's bits).
* crossover, resampling, uniform fill -- one thread per (child, quad of genes).

Counts are summed per thread and added with one atomic per thread and row. The
templates' free names are bound per genome dtype by
:func:`mpievo.kernels.cuda.reduce.bind_globals`; nothing here touches CUDA at import time.
"""

from __future__ import annotations

import functools

import numpy as np

from ..counter_operators import CROSS_BLEND, CROSS_UNIFORM, TILE
from .reduce import bind_globals, compile_kernel, device_function
from .fast_math import check_device_math, fast_functions
from .operator_kernels import arithmetic
from ..operators import BOUND_CLIP, BOUND_RESAMPLE
from ..random import device_functions

_CONSTANTS = {"U": np.uint64, "TILE": TILE, "CROSS_UNIFORM": CROSS_UNIFORM, "CROSS_BLEND": CROSS_BLEND,
              "BOUND_CLIP": BOUND_CLIP, "BOUND_RESAMPLE": BOUND_RESAMPLE, "F_ZERO": np.float32(0.0),
              "M24": np.uint64(0xFFFFFF), "S31": np.uint64(31), "TWO_M24": np.float64(2.0 ** -24),
              "TWO_M32": np.float64(2.0 ** -32)}
#: registers per thread on a GPU: uncapped, the dense mutation takes 70, which holds an
#: H100 SM to 3 blocks of 256 threads; at 64 it holds 4 (spilling a few bytes) and the
#: dense mutation and crossover ran 15-40% faster on an H100
MAX_REGISTERS = 64


# ------------------------------------------------------------- device functions
# Free names: cuda, U, mul (genome dtype), mul64, float64, bound_value, block,
# normal_pair, log_unit, uniform_word, the constants above, and each other.

def _mutated(v, lo, hi, mode, k0, k1, k2, k3, base, n, pairs, i, g):
    # mirrors counter_operators._mutated, types included
    if mode == BOUND_CLIP:  # noqa: F821
        return min(max(v, lo), hi)
    u = 0.0
    if mode == BOUND_RESAMPLE and not (v >= lo and v <= hi):  # noqa: F821
        w0, _, _, w3 = block(base + U(n * pairs + i * pairs + (g >> 1)), k0, k1, k2, k3)  # noqa: F821
        u = mul64(float64(w0 if g & 1 == 0 else w3), TWO_M32)  # noqa: F821
    return bound_value(v, lo, hi, mode, u)  # noqa: F821


def _start_value(genomes, a, b, w, x, i, g, lower, upper, interpolate):
    # gene g before mutation: the clipped interpolation of the parents, or x's own
    if interpolate:
        gb = genomes[b, g]
        return min(max(gb + mul(w, genomes[a, g] - gb), lower[g]), upper[g])  # noqa: F821
    return x[i, g]


def _step_gene(x, i, g, v, z, step, scale, lower, upper, mode, k0, k1, k2, k3, base, pairs):
    x[i, g] = mutated(v + mul(mul(step, scale[g]), z), lower[g], upper[g], mode,  # noqa: F821
                      k0, k1, k2, k3, base, x.shape[0], pairs, i, g)


def _in_box(x, i, g, lo, hi, w):
    # as counter_operators.resample_outside: the product is rounded to the genome
    # dtype on store, then added to lo in that dtype
    x[i, g] = mul64(mul64(float64(w), TWO_M32), float64(hi - lo))  # noqa: F821
    x[i, g] = min(lo + x[i, g], hi)


def _cross_gene(kind, a, b, w, swap_threshold, alpha, coef, power):
    # mirrors counter_operators._cross_gene, types included
    if kind == CROSS_UNIFORM:  # noqa: F821
        return b if w < swap_threshold else a
    if kind == CROSS_BLEND:  # noqa: F821
        low = min(a, b)
        span = abs(a - b)
        return low - mul(alpha, span) + mul(uniform_word(w), mul(coef, span))  # noqa: F821
    u = mul64(float64(w & M24), TWO_M24)  # noqa: F821
    beta = (2.0 * u) ** power if u <= 0.5 else (0.5 / (1.0 - u)) ** power
    beta = beta if w >> S31 else -beta  # noqa: F821
    return mul64(0.5, mul64(1.0 + beta, float64(a)) + mul64(1.0 - beta, float64(b)))  # noqa: F821


# ------------------------------------------------------------------ kernels
def _vary_dense_kernel(genomes, idx_a, idx_b, omega, interpolate, x, steps, scale, lower, upper,
                       mode, threshold, k0, k1, k2, k3, base, counts):
    q0, i0 = cuda.grid(2)  # noqa: F821
    sq, si = cuda.gridsize(2)  # noqa: F821
    n, dim = x.shape
    pairs = (dim + 1) // 2
    for i in range(i0, n, si):
        a = idx_a[i] if interpolate else 0
        b = idx_b[i] if interpolate else 0
        w = omega[i] if interpolate else steps[i]
        step = steps[i]
        row = base + U(i * pairs)  # noqa: F821
        count = 0
        for q in range(q0, pairs, sq):
            g = 2 * q
            w0, w1, w2, w3 = block(row + U(q), k0, k1, k2, k3)  # noqa: F821
            m0 = w0 < threshold
            m1 = w3 < threshold and g + 1 < dim
            z0, z1 = F_ZERO, F_ZERO  # noqa: F821
            if m0 or m1:
                z0, z1 = normal_pair(w1, w2)  # noqa: F821
            v = start_value(genomes, a, b, w, x, i, g, lower, upper, interpolate)  # noqa: F821
            if m0:
                step_gene(x, i, g, v, z0, step, scale, lower, upper, mode, k0, k1, k2, k3,  # noqa: F821
                          base, pairs)
                count += 1
            elif interpolate:
                x[i, g] = v
            if g + 1 < dim:
                v = start_value(genomes, a, b, w, x, i, g + 1, lower, upper, interpolate)  # noqa: F821
                if m1:
                    step_gene(x, i, g + 1, v, z1, step, scale, lower, upper, mode,  # noqa: F821
                              k0, k1, k2, k3, base, pairs)
                    count += 1
                elif interpolate:
                    x[i, g + 1] = v
        if count > 0:
            cuda.atomic.add(counts, i, count)  # noqa: F821


def _vary_sparse_kernel(x, steps, scale, lower, upper, mode, inv_log_q, k0, k1, k2, k3, base, counts):
    t0, i0 = cuda.grid(2)  # noqa: F821
    st, si = cuda.gridsize(2)  # noqa: F821
    n, dim = x.shape
    pairs = (dim + 1) // 2
    tiles = (dim + TILE - 1) // TILE  # noqa: F821
    for i in range(i0, n, si):
        row = base + U(i * pairs)  # noqa: F821
        step = steps[i]
        count = 0
        for t in range(t0, tiles, st):
            g = t * TILE  # noqa: F821
            g1 = min(g + TILE, dim)  # noqa: F821
            while g < g1:  # the gap sequence restarts at every tile, as on the host
                w0, _, _, w3 = block(row + U(g >> 1), k0, k1, k2, k3)  # noqa: F821
                gap = mul64(float64(log_unit(w0 if g & 1 == 0 else w3)), inv_log_q)  # noqa: F821
                if gap >= g1 - g:
                    break
                g += int(gap)
                _, w1, w2, _ = block(row + U(g >> 1), k0, k1, k2, k3)  # noqa: F821
                z0, z1 = normal_pair(w1, w2)  # noqa: F821
                step_gene(x, i, g, x[i, g], z0 if g & 1 == 0 else z1, step, scale, lower, upper,  # noqa: F821
                          mode, k0, k1, k2, k3, base, pairs)
                count += 1
                g += 1
        if count > 0:
            cuda.atomic.add(counts, i, count)  # noqa: F821


def _cross_kernel(genomes, idx_a, idx_b, kind, swap_threshold, alpha, coef, power, k0, k1, k2, k3,
                  base, out):
    q0, i0 = cuda.grid(2)  # noqa: F821
    sq, si = cuda.gridsize(2)  # noqa: F821
    n, dim = out.shape
    quads = (dim + 3) // 4
    for i in range(i0, n, si):
        a = idx_a[i]
        b = idx_b[i]
        row = base + U(i * quads)  # noqa: F821
        for q in range(q0, quads, sq):
            ws = block(row + U(q), k0, k1, k2, k3)  # noqa: F821
            for k in range(4):
                g = 4 * q + k
                if g < dim:
                    out[i, g] = cross_gene(kind, genomes[a, g], genomes[b, g], ws[k],  # noqa: F821
                                           swap_threshold, alpha, coef, power)


def _resample_kernel(x, lower, upper, k0, k1, k2, k3, base, moved):
    q0, i0 = cuda.grid(2)  # noqa: F821
    sq, si = cuda.gridsize(2)  # noqa: F821
    n, dim = x.shape
    quads = (dim + 3) // 4
    count = 0
    for i in range(i0, n, si):
        row = base + U(i * quads)  # noqa: F821
        for q in range(q0, quads, sq):
            for k in range(4):
                g = 4 * q + k
                if g < dim:
                    v = x[i, g]
                    if not (v >= lower[g] and v <= upper[g]):
                        ws = block(row + U(q), k0, k1, k2, k3)  # noqa: F821
                        in_box(x, i, g, lower[g], upper[g], ws[k])  # noqa: F821
                        count += 1
    if count > 0:
        cuda.atomic.add(moved, 0, count)  # noqa: F821


def _fill_kernel(x, lower, upper, k0, k1, k2, k3, base):
    q0, i0 = cuda.grid(2)  # noqa: F821
    sq, si = cuda.gridsize(2)  # noqa: F821
    n, dim = x.shape
    quads = (dim + 3) // 4
    for i in range(i0, n, si):
        row = base + U(i * quads)  # noqa: F821
        for q in range(q0, quads, sq):
            ws = block(row + U(q), k0, k1, k2, k3)  # noqa: F821
            for k in range(4):
                g = 4 * q + k
                if g < dim:
                    in_box(x, i, g, lower[g], upper[g], ws[k])  # noqa: F821


# ---------------------------------------------------------------- factories
@functools.lru_cache(maxsize=None)
def _names(dtype_str: str, math_mode: str = "exact") -> dict:
    """Names shared by the templates for genomes of ``dtype_str`` (device functions
    compiled); ``math_mode`` "fast": the normals and products of
    :mod:`.cuda_fast_math`, and the functions that use them compiled with fastmath."""
    fns = device_functions()
    names = dict(arithmetic(dtype_str), **_CONSTANTS, block=fns["block"], normal_pair=fns["normal_pair"],
                 log_unit=fns["log_unit"], uniform_word=fns["uniform_word"])
    compile_ = device_function
    if check_device_math(math_mode) == "fast":
        from numba import cuda

        names.update(fast_functions())
        fast = cuda.jit(device=True, fastmath=True)

        def compile_(template, **bound):
            return fast(bind_globals(template, cuda=cuda, **bound))
    names["mutated"] = compile_(_mutated, **names)
    names["start_value"] = compile_(_start_value, **names)
    names["step_gene"] = compile_(_step_gene, **names)
    names["in_box"] = device_function(_in_box, **names)
    names["cross_gene"] = device_function(_cross_gene, **names)
    return names


def _kernel(template, dtype_str: str, math_mode: str = "exact"):
    options = {"max_registers": MAX_REGISTERS}
    if math_mode == "fast":
        options["fastmath"] = True
    return compile_kernel(template, options=options, **_names(dtype_str, math_mode))


@functools.lru_cache(maxsize=None)
def vary_dense_kernel(dtype_str: str, math_mode: str = "exact"):
    """Compiled mask-word mutation (with fused interpolation), one thread per (child, pair),
    in ``math_mode`` (:data:`~.cuda_fast_math.DEVICE_MATH`)."""
    return _kernel(_vary_dense_kernel, dtype_str, math_mode)


@functools.lru_cache(maxsize=None)
def vary_sparse_kernel(dtype_str: str, math_mode: str = "exact"):
    """Compiled geometric-gap mutation, one thread per (child, tile), in ``math_mode``."""
    return _kernel(_vary_sparse_kernel, dtype_str, math_mode)


@functools.lru_cache(maxsize=None)
def cross_kernel(dtype_str: str):
    """Compiled uniform / blend / SBX crossover, one thread per (child, quad)."""
    return _kernel(_cross_kernel, dtype_str)


@functools.lru_cache(maxsize=None)
def resample_kernel(dtype_str: str):
    """Compiled resampling of the genes outside the box, one thread per (child, quad)."""
    return _kernel(_resample_kernel, dtype_str)


@functools.lru_cache(maxsize=None)
def fill_kernel(dtype_str: str):
    """Compiled uniform fill of the box, one thread per (child, quad)."""
    return _kernel(_fill_kernel, dtype_str)
