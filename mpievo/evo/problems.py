"""Problems: batch fitness functions over a box.

A :class:`Problem` wraps ``f(X) -> (n,)`` where ``X`` is an (n, dim) batch of genomes
(one per row). The engine minimises: :meth:`Problem.evaluate` negates the values of a
maximisation problem, and :meth:`Problem.to_user` turns them back.

Built-in benchmark functions (:mod:`mpievo.evo.builtin_functions`): sphere, ellipsoid, rastrigin,
rosenbrock, ackley, griewank, schwefel; each optionally shifted and rotated, the shift
and the rotation derived from a seed (:func:`builtin_problem`). A shifted/rotated
function is evaluated at ``z = R (x - o) + x*`` where ``x*`` is the unshifted optimum,
so its optimum lies at ``x = o``. (Rotating schwefel moves points outside its native
box, where its optimum no longer holds; use it unrotated.)

User problems come as a Python callable or a ``"module:function"`` string
(:func:`make_problem`); a wrong output shape or dtype raises a clear error. A
:class:`Problem` may bring its islands' starting genomes (``initial``), e.g. known
good solutions to improve on; without it they start uniform in the box.

Example::

    problem = make_problem("rastrigin", dim=10, shift=True, rotate=True, seed=3)
    problem = make_problem("mypkg.fitness:score", dim=64, lower=-1, upper=1, maximize=True)
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from typing import Callable

import numpy as np

from . import half, operators
from ..kernels.host import BFLOAT16
from .base_models import as_bases
from .builtin_functions import BUILTIN_PROBLEMS, ShiftedRotated, random_rotation
from .operators import box_arrays, counter_based
from .streams import stream


def check_fitness(values, n: int, name: str = "problem") -> np.ndarray:
    """Validate a fitness function's output and return it as float64 of shape (n,).

    Raises:
        ValueError: shape other than (n,).
        TypeError: not real numbers (bool, complex, object, strings).

    Example::

        check_fitness([1, 2, 3], 3)        # array([1., 2., 3.])
        check_fitness([1, 2], 3)           # ValueError: expected ... shape (3,) ...
    """
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ValueError(
            f"expected fitness of shape ({n},) from {name!r}, got {type(values).__name__} "
            f"of shape {arr.shape}")
    if arr.dtype.kind not in "fiu":
        raise TypeError(
            f"expected real-valued fitness (float or int dtype) from {name!r}, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


#: bounds kept in their own dtype (a delta island's row box, in the rows' dtype)
_ROW_BOUND_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)
#: genes checked at a time (model-sized rows: no genome-sized mask, no element-wise bfloat16)
_CHECK_CHUNK = 1 << 20


def _wide(part: np.ndarray) -> np.ndarray:
    """A chunk as numpy compares it exactly: half types widened to float32 (a bit kernel)."""
    return half.widen_into(part, np.empty(part.shape, np.float32)) if half.is_half(part.dtype) else part


def nonfinite_count(values: np.ndarray) -> int:
    """NaN and +-inf values in ``values`` (any shape), a chunk at a time.

    Example:
        >>> nonfinite_count(np.array([[1.0, np.inf], [np.nan, 0.0]], np.float16))
        2
    """
    flat = np.asarray(values).reshape(-1)
    if flat.dtype.kind in "iu":
        return 0
    if half.is_half(flat.dtype):      # exponent bits all ones, from the bits
        infinity = 0x7F80 if flat.dtype == BFLOAT16 else 0x7C00
        bits = flat.view(np.uint16)
        return sum(int(np.count_nonzero((bits[i:i + _CHECK_CHUNK] & 0x7FFF) >= infinity))
                   for i in range(0, bits.size, _CHECK_CHUNK))
    return sum(int(np.count_nonzero(~np.isfinite(flat[i:i + _CHECK_CHUNK])))
               for i in range(0, flat.size, _CHECK_CHUNK))


def _ordered(lower: np.ndarray, upper: np.ndarray) -> bool:
    """``np.all(lower < upper)``, a chunk at a time."""
    if lower.strides == upper.strides == (0,):
        return bool(np.all(_wide(lower[:1]) < _wide(upper[:1])))
    return all(np.all(_wide(lower[i:i + _CHECK_CHUNK]) < _wide(upper[i:i + _CHECK_CHUNK]))
               for i in range(0, lower.size, _CHECK_CHUNK))


def _as_bound(value, dim: int, name: str) -> np.ndarray:
    """A bound as a (dim,) float64 array (a float32, float16 or bfloat16 array stays as it
    is: the box of a delta island's rows, exact in float64, with no float64 copy of genome
    size); a scalar as a read-only broadcast view of one number (no genome-sized array for
    the common uniform box)."""
    arr = np.asarray(value)
    if arr.dtype not in _ROW_BOUND_DTYPES:
        arr = arr.astype(np.float64, copy=False)
    if arr.ndim == 0:
        arr = np.broadcast_to(arr, (dim,))
    if arr.shape != (dim,):
        raise ValueError(f"expected {name} to be a scalar or of shape ({dim},), got shape {arr.shape}")
    if nonfinite_count(arr[:1] if arr.strides == (0,) else arr):
        raise ValueError(f"expected finite {name} bounds, got {arr[~np.isfinite(arr)][:3]}")
    return arr


def integer_genes(integer, dim: int, lower, upper) -> np.ndarray | None:
    """The sorted indices of a problem's integer genes (None: none), from a (dim,) bool
    mask or gene indices; their bounds must be integers.

    Raises:
        ValueError: another shape, an index outside ``[0, dim)``, or a fractional bound
            of an integer gene (named).

    Example::

        integer_genes([True, False, True], 3, 0.0, [1.0, 0.5, 4.0])    # array([0, 2])
    """
    if integer is None:
        return None
    arr = np.asarray(integer)
    if arr.dtype == bool:
        if arr.shape != (dim,):
            raise ValueError(f"integer: expected a bool mask of shape ({dim},) or gene indices, got shape {arr.shape}")
        arr = np.flatnonzero(arr)
    elif arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"integer: expected a bool mask of shape ({dim},) or int gene indices, "
                         f"got {arr.dtype} of shape {arr.shape}")
    columns = np.unique(arr.astype(np.int64))
    if columns.size and (columns[0] < 0 or columns[-1] >= dim):
        raise ValueError(f"integer: expected gene indices in [0, {dim}), got {columns[0] if columns[0] < 0 else columns[-1]}")
    if not columns.size:
        return None
    for name, bound in (("lower", lower), ("upper", upper)):
        values = np.asarray(bound, np.float64)[columns]
        fractional = np.flatnonzero(values != np.rint(values))
        if fractional.size:
            gene = int(columns[fractional[0]])
            raise ValueError(f"integer: expected integer bounds of integer genes, got gene {gene}'s {name} "
                             f"{values[fractional[0]]}")
    return columns


class Problem:
    """A batch fitness function over the box ``[lower, upper]``.

    ``X`` has the island's genome dtype (float32 by default) and must not be kept
    or modified by ``func`` (the engine reuses the buffer).

    Args:
        func: ``func(X) -> (n,)`` for an (n, dim) batch (``batched=True``), or
            ``func(x) -> float`` for one genome (``batched=False``, evaluated row by
            row; slower).
        dim: number of genes.
        lower, upper: scalars or (dim,) arrays, ``lower < upper``.
        maximize: True when larger values are better.
        name: label for messages.
        batched: see ``func``.
        initial: ``initial(rng, n) -> (n, dim)`` genomes of an island's generation 0
            (e.g. known good solutions), drawn from the island's keyed ``init``
            stream; None: uniform in the box. See :meth:`initial_genomes`.
        device: ``func`` takes batches on the GPU (a CuPy array, or a Numba device
            array without CuPy; anything with ``__cuda_array_interface__`` or DLPack)
            and may return fitness on the device or the host: islands with
            ``engine.device = "auto"`` then breed on the GPU (see :mod:`mpievo.evo.device`).
        bases: base models for ``engine.genome = "delta"`` or ``"seeded"``: a
            :class:`~mpievo.evo.genomes.BaseModels`, an array ``(count, dim)`` or ``(dim,)``,
            or a path to a ``.npy`` file (see :mod:`mpievo.evo.genomes`).
        integer: the integer genes: a (dim,) bool mask or gene indices (their bounds
            integers; ``[0, 1]``: a binary gene). They are bred like the others and
            rounded to the nearest integer wherever a genome is made (generation 0, every
            child an island asks for), so archives, migrants and checkpoints hold
            integers; CMA-ES learns from its continuous samples with a margin
            (:mod:`mpievo.evo.algorithms.cmaes`). Dense host genomes only.

    Raises:
        ValueError, TypeError: bad dimension or bounds.

    Example::

        import numpy as np
        problem = Problem(lambda X: (X * X).sum(axis=1), dim=5, lower=-1.0, upper=1.0, name="sphere")
        problem.evaluate(np.zeros((2, 5), np.float32))          # array([0., 0.])
    """

    def __init__(self, func: Callable, dim: int, lower, upper, *, maximize: bool = False,
                 name: str | None = None, batched: bool = True, initial: Callable | None = None,
                 device: bool = False, bases=None, integer=None):
        if not callable(func):
            raise TypeError(f"expected a callable fitness function, got {type(func).__name__}")
        if initial is not None and not callable(initial):
            raise TypeError(f"expected a callable initial(rng, n) or None, got {type(initial).__name__}")
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"expected dim to be an int >= 1, got {dim!r}")
        self.func = func
        self.dim = int(dim)
        self.lower = _as_bound(lower, self.dim, "lower")
        self.upper = _as_bound(upper, self.dim, "upper")
        if not _ordered(self.lower, self.upper):
            bad = int(np.argmin(self.upper - self.lower))
            raise ValueError(f"expected lower < upper for every gene, got gene {bad}: "
                             f"[{self.lower[bad]}, {self.upper[bad]}]")
        self.maximize = bool(maximize)
        self.name = name or getattr(func, "__name__", type(func).__name__)
        self.batched = bool(batched)
        self.initial = initial
        self.device = bool(device)

        self.bases = as_bases(bases)
        self.integer = integer_genes(integer, self.dim, self.lower, self.upper)

    def __repr__(self) -> str:
        sense = "maximize" if self.maximize else "minimize"
        return f"Problem({self.name!r}, dim={self.dim}, {sense})"

    @property
    def width(self) -> np.ndarray:
        """``upper - lower`` per gene in float64; a uniform box's is a broadcast view of
        one number (no genome-sized array)."""
        lower, upper = self.lower, self.upper
        if lower.strides == upper.strides == (0,):
            return np.broadcast_to(np.subtract(upper[:1], lower[:1], dtype=np.float64), (self.dim,))
        return np.subtract(upper, lower, dtype=np.float64)

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        """User-facing values of an (n, dim) batch (validated, float64)."""
        genomes = np.asarray(genomes)
        if genomes.ndim != 2 or genomes.shape[1] != self.dim:
            raise ValueError(f"expected genomes of shape (n, {self.dim}), got {genomes.shape}")
        n = genomes.shape[0]
        if self.batched:
            values = self.func(genomes)
        else:
            values = list(map(self.func, genomes))  # no bytecode per row
        return check_fitness(values, n, self.name)

    def initial_genomes(self, rng: np.random.Generator, n: int, dtype, out: np.ndarray | None = None) -> np.ndarray:
        """An island's ``n`` generation-0 genomes, in ``dtype`` and inside the box.

        ``initial(rng, n)`` when the problem has one, else uniform in the box (from
        :data:`~.operators.COUNTER_DIM` genes counter-based, as on a device island); either
        is cast to ``dtype`` and clipped to the box (in ``dtype``, rounded inwards), into
        ``out`` ((n, dim) of ``dtype``) when given: an archive's own rows, so that no
        population is held beside the archive it enters.

        Raises:
            ValueError: ``initial`` returned another shape or a non-finite gene.
            TypeError: ``initial`` returned something other than real numbers.
        """
        lower, upper = box_arrays(self.lower, self.upper, dtype)
        genomes = np.empty((n, self.dim), dtype) if out is None else out
        if self.initial is None:
            if counter_based(self.dim):  # large genomes: counter-based, as on the device
                genomes = half.uniform_genomes(operators, rng, lower, upper, genomes)
                operators.round_integers(genomes, getattr(self, "integer", None))
                return genomes
            for row in genomes:  # one float64 row at a time: the same draws as one (n, dim) call
                row[...] = rng.uniform(self.lower, self.upper)
        else:
            np.copyto(genomes, self._check_initial(self.initial(rng, n), n), casting="unsafe")
        np.clip(genomes, lower, upper, out=genomes)
        operators.round_integers(genomes, getattr(self, "integer", None))
        return genomes

    def starting_from(self, x0) -> "Problem":
        """A copy of this problem whose islands all start with ``x0`` (SciPy's starting
        point): row 0 of every island's generation 0, the other rows as before (the
        ``initial`` hook's, else uniform in the box), drawn from the same stream.

        Raises:
            ValueError: ``x0`` is not ``(dim,)`` finite numbers inside the box.
        """
        start = np.asarray(x0, dtype=np.float64)
        if start.shape != (self.dim,):
            raise ValueError(f"expected x0 of shape ({self.dim},), got shape {start.shape}")
        outside = ~((start >= self.lower) & (start <= self.upper))    # NaN is outside too
        if outside.any():
            gene = int(np.argmax(outside))
            raise ValueError(f"expected x0 inside the box, got gene {gene} = {start[gene]} outside "
                             f"[{self.lower[gene]}, {self.upper[gene]}]")
        inner = self

        def initial(rng: np.random.Generator, n: int) -> np.ndarray:
            genomes = inner.initial_genomes(rng, n, np.float64)
            genomes[0] = start
            return genomes

        started = copy.copy(self)
        started.initial = initial
        return started

    def _check_initial(self, genomes, n: int) -> np.ndarray:
        arr = np.asarray(genomes)
        if arr.shape != (n, self.dim):
            raise ValueError(f"expected initial genomes of shape ({n}, {self.dim}) from {self.name!r}, "
                             f"got shape {arr.shape}")
        if arr.dtype.kind not in "fiu" and not half.is_half(arr.dtype):   # bfloat16 is kind "V"
            raise TypeError(f"expected real-valued initial genomes from {self.name!r}, got dtype {arr.dtype}")
        bad = nonfinite_count(arr)
        if bad:
            raise ValueError(f"expected finite initial genomes from {self.name!r}, got {bad} non-finite genes")
        return arr

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        """Fitness to minimise (values negated for a maximisation problem)."""
        values = self(genomes)
        return -values if self.maximize else values

    def to_user(self, fitness):
        """Turn minimised fitness back into the user's sense (negate when maximising)."""
        return -fitness if self.maximize else fitness


def builtin_problem(name: str, dim: int, *, shift: bool = False, rotate: bool = False,
                    seed: int = 0, lower=None, upper=None, maximize: bool = False) -> Problem:
    """A built-in benchmark as a :class:`Problem`.

    Args:
        name: one of :data:`BUILTIN_PROBLEMS`.
        dim: number of genes.
        shift: move the optimum to a point drawn from ``seed`` (inside the middle 80%
            of the box).
        rotate: apply a random rotation drawn from ``seed``.
        seed: seed of the shift and the rotation (int >= 0).
        lower, upper: box (default: the function's usual box).
        maximize: maximise the function instead (rarely useful for these).

    Raises:
        ValueError: unknown name or bad box.

    Example::

        problem = builtin_problem("rastrigin", 30, shift=True, rotate=True, seed=3)
        problem.lower[0], problem.upper[0]          # (-5.12, 5.12)
    """
    if name not in BUILTIN_PROBLEMS:
        raise ValueError(f"expected a built-in problem among {sorted(BUILTIN_PROBLEMS)}, got {name!r}")
    bench = BUILTIN_PROBLEMS[name]
    lo = _as_bound(bench.lower if lower is None else lower, dim, "lower")
    hi = _as_bound(bench.upper if upper is None else upper, dim, "upper")
    offset = None
    if shift:
        margin = 0.1 * (hi - lo)
        offset = stream(seed, 0, 0, "problem").uniform(lo + margin, hi - margin)
    rotation = random_rotation(dim, stream(seed, 0, 1, "problem")) if rotate else None
    func = ShiftedRotated(name, dim, offset, rotation)
    label = name + ("+shift" if shift else "") + ("+rotate" if rotate else "")
    return Problem(func, dim, lo, hi, maximize=maximize, name=label)


def _search_current_directory() -> None:
    """Put the current directory first on ``sys.path`` as ``python -m`` does (an installed
    ``mpievo`` script starts with its own directory there instead), so that
    ``mymod:f`` finds ``./mymod.py`` on every rank whichever way the rank was started."""
    here = os.getcwd()
    if not any(entry in ("", here) for entry in sys.path):
        sys.path.insert(0, here)


def load_object(spec: str):
    """Import ``"package.module:attribute"`` (the attribute may be dotted).

    Raises:
        ValueError: not of the form 'module:attribute', or the import failed.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or spec.startswith(":") or spec.endswith(":"):
        raise ValueError(f"expected 'module:attribute', got {spec!r}")
    module_name, attr_path = spec.split(":")
    _search_current_directory()
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0]:   # the module was found; something it imports was not
            raise ValueError(f"cannot import module {module_name!r} for {spec!r}: {exc}") from exc
        raise ValueError(f"cannot import module {module_name!r} for {spec!r}: no {exc.name!r} in the "
                         f"current directory {os.getcwd()} nor elsewhere on sys.path {sys.path}; "
                         "run from the directory that holds it or add that directory to PYTHONPATH") from exc
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} for {spec!r}: {exc}") from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"expected {spec!r} to name an object, but {module_name!r} has no {attr_path!r}")
        obj = getattr(obj, part)
    return obj


def make_problem(spec, dim: int | None = None, *, lower=None, upper=None, maximize: bool = False,
                 shift: bool = False, rotate: bool = False, seed: int = 0,
                 batched: bool = True) -> Problem:
    """A :class:`Problem` from a name, a ``"module:function"`` string, a callable or a Problem.

    Args:
        spec: a :class:`Problem` (returned as is), a built-in name, ``"module:function"``
            naming a batch fitness function (or a Problem), or a callable.
        dim: number of genes (needed unless ``spec`` is a Problem).
        lower, upper: box; defaults to the built-in's box, required for user functions.
        maximize: larger is better.
        shift, rotate, seed: built-ins only (see :func:`builtin_problem`).
        batched: whether a user function takes a batch (True) or one genome.

    Raises:
        ValueError, TypeError: unknown name, import failure, missing dim or bounds.

    Example::

        make_problem("rosenbrock", 10)                          # a built-in
        make_problem("mymodule:fitness", 10, lower=-1, upper=1) # a function by name
        make_problem(lambda x: float(x @ x), 3, lower=-1, upper=1, batched=False)
    """
    if isinstance(spec, Problem):
        return spec
    if isinstance(spec, str) and ":" not in spec:
        if dim is None:
            raise ValueError(f"expected dim for problem {spec!r}, got None")
        return builtin_problem(spec, dim, shift=shift, rotate=rotate, seed=seed,
                               lower=lower, upper=upper, maximize=maximize)
    name = spec if isinstance(spec, str) else getattr(spec, "__name__", type(spec).__name__)
    func = load_object(spec) if isinstance(spec, str) else spec
    if isinstance(func, Problem):
        return func
    if shift or rotate:
        raise ValueError(f"expected shift/rotate only for built-in problems, got them for {name!r}")
    if dim is None or lower is None or upper is None:
        raise ValueError(f"expected dim, lower and upper for user problem {name!r}, "
                         f"got dim={dim!r}, lower={lower!r}, upper={upper!r}")
    return Problem(func, dim, lower, upper, maximize=maximize, name=name, batched=batched)
