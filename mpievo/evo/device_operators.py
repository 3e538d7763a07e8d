"""Variation operators of a device island: the callables of :mod:`.operators` with
genomes, children and the box as Numba device arrays.

Same signatures and draw order as the host operators. Per-row numbers (parents,
``omega``, step sizes) are drawn on the host from the same keyed stream; every
per-gene number comes from the counter-based generator
(:mod:`mpievo.kernels.random`) keyed by that stream, which the host also uses for
genomes of :data:`~.operators.COUNTER_DIM` genes or more. So from the same parents
a device island breeds the same children, bit for bit, as a host island at that
size (the device kernels round every product on its own, as the host does). What
differs is the fitness: the device sums a row in another order than the host, so
fitness values -- and then, rarely, a selection between near-equal members -- may
differ in the last bits; and the uniform genomes of a start or a restart come from
:func:`uniform_genomes` (counter-based) instead of numpy's generator.

Breeding into a caller's children array (the GA's, one per island) goes through
that array's :class:`~mpievo.kernels.cuda.workspace.BreedWorkspace`, made on first
use and kept as long as the array: the per-row numbers go up in one transfer on the
island's own stream, the counts come back in one, and no device memory is
allocated after the first generation.

The mutation's arithmetic follows :func:`device_math` ("exact": the host's bits, the
default; "fast": hardware normals and FMA, see :mod:`mpievo.kernels.cuda.fast_math`),
which an island sets around its breeding from ``engine.device_math``.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref

import numpy as np

from . import operators as host
from .operators import (SELECTIONS, counter_blocks, draw_omega, rank_selection,  # noqa: F401
                        self_adapt_steps, tournament_selection, uniform_selection)

CROSSOVERS = host.CROSSOVERS


def _kernels():
    from mpievo.kernels.cuda import counter_operators as cuda_counter_operators

    return cuda_counter_operators


def place(arr):
    """A (dim,) host array of the box or scale, on the device."""
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(arr))


def empty(shape, dtype):
    """An uninitialised device array for children."""
    from numba import cuda

    return cuda.device_array(shape, dtype)


#: the mutation's device math in this context (thread): see :func:`device_math`
_DEVICE_MATH = contextvars.ContextVar("device_math", default="exact")


@contextlib.contextmanager
def device_math(mode: str):
    """Breed with ``mode`` ("exact" or "fast") inside the ``with`` block (this thread only).

    Raises:
        ValueError: an unknown mode.
    """
    from mpievo.kernels.cuda.fast_math import check_device_math

    token = _DEVICE_MATH.set(check_device_math(mode))
    try:
        yield
    finally:
        _DEVICE_MATH.reset(token)


#: id of a children array -> (weak reference to it, its breeding workspace); the entry
#: goes with the array (device arrays are not all hashable: no WeakKeyDictionary)
_WORKSPACES: dict = {}


def workspace(children):
    """The :class:`~mpievo.kernels.cuda.workspace.BreedWorkspace` of device ``children``
    (made on first use, remade if the array's rows or dtype no longer fit)."""
    from mpievo.kernels.cuda.workspace import BreedWorkspace

    key, (n, dtype) = id(children), (children.shape[0], children.dtype)
    ref, found = _WORKSPACES.get(key, (None, None))
    if ref is None or ref() is not children or not found.fits(n, dtype):
        found = BreedWorkspace(n, dtype)
        _WORKSPACES[key] = (weakref.ref(children, lambda _, key=key: _WORKSPACES.pop(key, None)), found)
    return found


def _output(out, n, genomes):
    if out is None:
        return empty((n, genomes.shape[1]), genomes.dtype)
    if tuple(out.shape) != (n, genomes.shape[1]) or np.dtype(out.dtype) != np.dtype(genomes.dtype):
        raise ValueError(f"expected out of shape {(n, genomes.shape[1])} and dtype {genomes.dtype}, "
                         f"got {tuple(out.shape)} {out.dtype}")
    return out


def _vary(x, rng, lower, upper, *, rate, steps, scale, code, parents=None, persistent=True) -> np.ndarray:
    """Interpolation (``parents``) and mutation of ``x``; ``persistent``: ``x`` is the
    caller's children array, bred through its workspace."""
    n, dim = x.shape
    interpolate = parents is not None
    if not interpolate:
        parents = (x, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, x.dtype))
    plan = host.vary_plan(rng, n, dim, rate, code)
    return _kernels().vary(*parents, interpolate, x, host.steps_array(steps, n, x.dtype), scale,
                           lower, upper, code, plan.threshold, plan.inv_log_q, plan.dense,
                           plan.key, plan.base, workspace=workspace(x) if persistent and n else None,
                           math=_DEVICE_MATH.get())


def _cross(genomes, idx_a, idx_b, rng, out, kind, *, swap_threshold=0, alpha=0.0, eta=0.0):
    """Crossover ``kind`` into ``out`` (None: new children; given: the caller's children
    array, its indices uploaded through its workspace)."""
    from mpievo.kernels import counter_operators

    persistent = out is not None
    out = _output(out, len(idx_a), genomes)
    key, base = counter_blocks(rng, counter_operators.gene_blocks(*out.shape))
    dtype = np.dtype(genomes.dtype).type
    _kernels().cross(genomes, idx_a, idx_b, kind, swap_threshold, dtype(alpha), dtype(1 + 2 * alpha),
                     float(eta), host.key_words(key), base, out,
                     workspace=workspace(out) if persistent and out.shape[0] else None)
    return out


def interpolate_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *, omega=None):
    """As :func:`.operators.interpolate_crossover`, on the device."""
    persistent = out is not None
    out = _output(out, len(idx_a), genomes)
    w = draw_omega(rng, len(idx_a), omega, genomes.dtype)
    _vary(out, rng, lower, upper, rate=0.0, steps=0.0, scale=lower, code=host.kernels.BOUND_CLIP,
          parents=(genomes, np.asarray(idx_a, np.int64), np.asarray(idx_b, np.int64), w),
          persistent=persistent)
    return out


def uniform_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *, swap_prob=0.5):
    """As :func:`.operators.uniform_crossover` (counter-based draws), on the device."""
    from mpievo.kernels import counter_operators

    return _cross(genomes, idx_a, idx_b, rng, out, counter_operators.CROSS_UNIFORM,
                  swap_threshold=counter_operators.rate_threshold(swap_prob))


def blend_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *, alpha=0.5):
    """As :func:`.operators.blend_crossover` (counter-based draws), on the device."""
    from mpievo.kernels import counter_operators

    return _cross(genomes, idx_a, idx_b, rng, out, counter_operators.CROSS_BLEND, alpha=alpha)


def sbx_crossover(genomes, idx_a, idx_b, rng, lower, upper, out=None, *, eta=15.0):
    """As :func:`.operators.sbx_crossover` (counter-based draws), on the device."""
    from mpievo.kernels import counter_operators

    return _cross(genomes, idx_a, idx_b, rng, out, counter_operators.CROSS_SBX, eta=eta)


def gaussian_mutation(x, rng, lower, upper, *, rate, steps, scale, bounds="clip") -> np.ndarray:
    """As :func:`.operators.gaussian_mutation` (counter-based draws), on the device;
    returns the host (n,) counts."""
    return _vary(x, rng, lower, upper, rate=rate, steps=steps, scale=scale,
                 code=host.bound_code(bounds))


def breed(genomes, idx_a, idx_b, rng, lower, upper, out=None, *, omega=None, rate, steps, scale,
          bounds="clip"):
    """As :func:`.operators.breed`, on the device: (children, host per-row counts)."""
    code = host.bound_code(bounds)
    n = len(idx_a)
    persistent = out is not None
    out = _output(out, n, genomes)
    w = draw_omega(rng, n, omega, genomes.dtype)
    counts = _vary(out, rng, lower, upper, rate=rate, steps=steps, scale=scale, code=code,
                   parents=(genomes, np.asarray(idx_a, np.int64), np.asarray(idx_b, np.int64), w),
                   persistent=persistent)
    return out, counts


def apply_bounds(x, lower, upper, rng=None, *, mode="clip") -> int:
    """As :func:`.operators.apply_bounds` (resample: counter-based draws), on the device."""
    code = host.bound_code(mode)
    if code == host.kernels.BOUND_RESAMPLE:
        from mpievo.kernels import counter_operators

        if rng is None:
            raise ValueError("expected a Generator for bounds mode 'resample', got None")
        key, base = counter_blocks(rng, counter_operators.gene_blocks(*x.shape))
        return int(_kernels().resample_outside(x, lower, upper, host.key_words(key), base))
    from mpievo.kernels.cuda import operators as cuda_operators

    return cuda_operators.bound_rows(x, lower, upper, mode)


def uniform_genomes(rng, lower, upper, out):
    """Uniform genomes in the box (``lower``/``upper`` in the genome dtype), counter-based."""
    from mpievo.kernels import counter_operators

    key, base = counter_blocks(rng, counter_operators.gene_blocks(*out.shape))
    _kernels().uniform_fill(out, lower, upper, host.key_words(key), base)
    return out
