"""The built-in benchmark problems on the device (Numba CUDA).

:func:`evaluate` computes the fitness of device genomes as
:class:`mpievo.evo.builtin_functions.ShiftedRotated` does on the host, in float64: at
``z = x`` (plain) or ``z = R (x - o) + x*`` (``o`` the shift, else ``x*``; ``x*`` the
unshifted optimum, one value per gene). Each row's sum runs through
:mod:`mpievo.kernels.cuda.row_reduce` (a row split over many blocks, partials combined
in a fixed order): the same bits on every run, equal to the host's to rounding
(sums in another order, the device's ``cos``/``exp``). A rotation first writes
``R (x - o)`` for every row to a float64 buffer (O(n dim^2); rotations are meant
for dims up to a few thousand).

Nothing here touches CUDA at import time; kernels compile on first use, per problem.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import row_reduce as cuda_row_reduce
from .reduce import device_function
from .operators import GENOME_DTYPES, is_device, require_device, to_device
from .rows import describe
from .workspace import scratch

#: problems :func:`evaluate` runs (mpievo.evo.builtin_functions.BUILTIN_PROBLEMS)
DEVICE_PROBLEMS = ("sphere", "ellipsoid", "rastrigin", "rosenbrock", "ackley", "griewank",
                   "schwefel")
SCHWEFEL_CONSTANT = 418.9828872724338  # mpievo.evo.builtin_functions.schwefel's


# ------------------------------------------------------------- templates
# Free names (load, math, float64, TWO_PI, E, SCHWEFEL) are bound by bind_globals.
# A term returns (summed value, second value); the second is summed, or multiplied
# for griewank. ``load`` gives z[i, j].

def _load_plain(x, i, j, shift, opt):
    return float64(x[i, j])  # noqa: F821


def _load_shifted(x, i, j, shift, opt):
    return (float64(x[i, j]) - shift[j]) + opt  # noqa: F821


def _load_rotated(x, i, j, shift, opt):
    # x holds R (x - o) (float64): add x* as the host does after the product
    return x[i, j] + opt


def _sphere(x, i, j, shift, opt):
    z = load(x, i, j, shift, opt)  # noqa: F821
    return z * z, 0.0


def _ellipsoid(x, i, j, shift, opt):
    z = load(x, i, j, shift, opt)  # noqa: F821
    weight = 10.0 ** (6.0 * j / max(x.shape[1] - 1, 1))
    return z * z * weight, 0.0


def _rastrigin(x, i, j, shift, opt):
    z = load(x, i, j, shift, opt)  # noqa: F821
    return z * z - 10.0 * math.cos(TWO_PI * z), 0.0  # noqa: F821


def _rosenbrock(x, i, j, shift, opt):
    if j + 1 >= x.shape[1]:
        return 0.0, 0.0
    z = load(x, i, j, shift, opt)  # noqa: F821
    t = load(x, i, j + 1, shift, opt) - z * z  # noqa: F821
    return 100.0 * (t * t) + (1.0 - z) * (1.0 - z), 0.0


def _ackley(x, i, j, shift, opt):
    z = load(x, i, j, shift, opt)  # noqa: F821
    return z * z, math.cos(TWO_PI * z)  # noqa: F821


def _griewank(x, i, j, shift, opt):
    z = load(x, i, j, shift, opt)  # noqa: F821
    return z * z, math.cos(z / math.sqrt(float64(j + 1)))  # noqa: F821


def _schwefel(x, i, j, shift, opt):
    z = load(x, i, j, shift, opt)  # noqa: F821
    return z * math.sin(math.sqrt(abs(z))), 0.0  # noqa: F821


def _finish_sum(a, b, dim):
    return a


def _finish_rastrigin(a, b, dim):
    return 10.0 * dim + a


def _finish_ackley(a, b, dim):
    return (-20.0 * math.exp(-0.2 * math.sqrt(a / dim)) - math.exp(b / dim)  # noqa: F821
            + 20.0 + E)  # noqa: F821


def _finish_griewank(a, b, dim):
    return 1.0 + a / 4000.0 - b


def _finish_schwefel(a, b, dim):
    return SCHWEFEL * dim - a  # noqa: F821


def _rotation_term(x, p, j, rotation, shift):
    # virtual row p = (row i, output gene k): R[k, j] (x[i, j] - o[j])
    dim = x.shape[1]
    i = p // dim
    k = p - i * dim
    return rotation[k, j] * (float64(x[i, j]) - shift[j]), 0.0  # noqa: F821


#: name -> (term, finish, second value multiplied)
_PROBLEMS = {
    "sphere": (_sphere, _finish_sum, False),
    "ellipsoid": (_ellipsoid, _finish_sum, False),
    "rastrigin": (_rastrigin, _finish_rastrigin, False),
    "rosenbrock": (_rosenbrock, _finish_sum, False),
    "ackley": (_ackley, _finish_ackley, False),
    "griewank": (_griewank, _finish_griewank, True),
    "schwefel": (_schwefel, _finish_schwefel, False),
}
_LOADS = {"plain": _load_plain, "shifted": _load_shifted, "rotated": _load_rotated}


# ------------------------------------------------------------- factories
def _names() -> dict:
    from numba import types as nbt

    return dict(math=math, float64=nbt.float64, TWO_PI=2.0 * np.pi, E=float(np.e),
                SCHWEFEL=SCHWEFEL_CONSTANT)


@functools.lru_cache(maxsize=None)
def _kernels(name: str, load: str):
    """Compiled reduction kernels of problem ``name`` reading z through ``load``."""
    term, finish, product = _PROBLEMS[name]
    names = _names()
    names["load"] = device_function(_LOADS[load], **names)
    return cuda_row_reduce.build(device_function(term, **names),
                                 device_function(finish, **names), product=product)


@functools.lru_cache(maxsize=1)
def _rotation_kernels():
    names = _names()
    return cuda_row_reduce.build(device_function(_rotation_term, **names),
                                 device_function(_finish_sum, **names))


# ------------------------------------------------------------- evaluation
def _float64_input(arr, shape: tuple, name: str, stream):
    if not is_device(arr):
        arr = np.asarray(arr)
        if arr.dtype.kind not in "fiu":
            raise TypeError(f"expected {name} of real numbers, got dtype {arr.dtype}")
    dev = to_device(arr, stream, np.float64)
    if tuple(dev.shape) != shape or np.dtype(dev.dtype) != np.float64:
        raise ValueError(f"expected {name} of shape {shape} and dtype float64, got "
                         f"{tuple(dev.shape)} {dev.dtype}")
    return dev


def evaluate(name: str, genomes, *, shift=None, rotation=None, optimum: float = 0.0, out=None,
             stream=0) -> np.ndarray:
    """Fitness (host float64 ``(n,)``) of device ``genomes`` under built-in ``name``.

    Args:
        name: one of :data:`DEVICE_PROBLEMS`.
        genomes: (n, dim) device array, float32 or float64.
        shift: (dim,) optimum location ``o`` (host or device float64), or None.
        rotation: (dim, dim) orthogonal matrix (host or device float64), or None.
        optimum: the unshifted optimum ``x*`` (every gene).
        out: host float64 array of shape (n,) to fill (allocated when None).
        stream: numba stream.

    Returns:
        ``out``: ``f(x)`` for plain genomes (no shift, no rotation), else
        ``f(R (x - o) + x*)``.

    Raises:
        ValueError / TypeError: unknown name, host genomes, bad shapes or dtypes.
    """
    from numba import cuda

    if name not in _PROBLEMS:
        raise ValueError(f"expected a device problem among {DEVICE_PROBLEMS}, got {name!r}")
    require_device(genomes, "genomes")
    if np.dtype(genomes.dtype) not in GENOME_DTYPES or len(genomes.shape) != 2:
        raise TypeError(f"expected genomes: a 2-D float32 or float64 array, got "
                        f"{genomes.dtype} of shape {tuple(genomes.shape)}")
    n, dim = genomes.shape
    if out is None:
        out = np.empty(n)
    elif not isinstance(out, np.ndarray) or out.shape != (n,) or out.dtype != np.float64:
        raise ValueError(f"expected out: a float64 numpy array of shape ({n},), "
                         f"got {describe(out)}")
    opt = np.float64(optimum)
    if shift is not None:
        shift = _float64_input(shift, (dim,), "shift", stream)
    if n == 0:
        return out
    if rotation is not None:
        rotation = _float64_input(rotation, (dim, dim), "rotation", stream)
        if shift is None:
            shift = cuda.to_device(np.full(dim, opt), stream=stream)
        z = cuda_row_reduce.reduce_rows(_rotation_kernels(), genomes, rotation, shift, rows=n * dim,
                                        out=scratch("rotated rows", (n * dim,), np.float64, stream),
                                        stream=stream).reshape(n, dim)
        values = cuda_row_reduce.reduce_rows(_kernels(name, "rotated"), z, shift, opt,
                                             out=scratch("fitness", (n,), np.float64, stream),
                                             stream=stream)
    else:
        load = "plain" if shift is None else "shifted"
        if shift is None:
            shift = scratch("unread shift", (1,), np.float64, stream)
        # downloaded below before returning: a scratch array, no allocation per call
        values = cuda_row_reduce.reduce_rows(_kernels(name, load), genomes, shift, opt,
                                             out=scratch("fitness", (n,), np.float64, stream),
                                             stream=stream)
    values.copy_to_host(out, stream=stream)
    if not isinstance(stream, int):
        stream.synchronize()
    return out
