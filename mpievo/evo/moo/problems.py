"""Problems with several objectives: ``f(X) -> (n, m)``, every objective minimised.

:class:`MultiObjectiveProblem` is a :class:`~mpievo.evo.problems.Problem` whose
function returns one row of ``n_obj`` objectives per genome. A wrong shape is refused
with what was expected and what came; a row with a NaN or infinity in any objective is
an invalid evaluation, counted as one non-finite evaluation (as a NaN fitness of a
single-objective problem) and ranked below every valid row.

Built-ins (:data:`BUILTIN_MOO`, vectorised numpy, the definitions of Zitzler, Deb and
Thiele 2000 and Deb, Thiele, Laumanns and Zitzler 2002, as pymoo states them): ZDT1-4
and ZDT6 (two objectives) and DTLZ1-7 (``n_obj`` >= 2); WFG1-9 (``n_obj`` >= 2) are
pymoo's (:mod:`.wfg`). Each carries a ``reference_point`` for the hypervolume: 1.1 times
the nadir of its true front (WFG: 1.1 times the toolkit's objective scales).

Example::

    problem = moo_problem("dtlz2", n_obj=3)              # dim 12 (k = 10)
    problem = MultiObjectiveProblem(f, dim=8, lower=0, upper=1, n_obj=2,
                                    reference_point=[2.0, 2.0])
"""

from __future__ import annotations

import numpy as np

from ..archive_records import sanitize_fitness
from ..problems import Problem, check_fitness
from .archive import sanitize_objectives
from .wfg import WFG, position_genes, wfg_box, wfg_function, wfg_scales

#: margin of the built-ins' reference point over the nadir of the true front
REFERENCE_MARGIN = 1.1


def check_objectives(values, n: int, n_obj: int, name: str = "problem") -> np.ndarray:
    """A fitness function's output as float64 of shape ``(n, n_obj)``.

    Raises:
        ValueError: another shape. TypeError: not real numbers.
    """
    arr = np.asarray(values)
    if arr.shape != (n, n_obj):
        raise ValueError(f"expected objectives of shape ({n}, {n_obj}) from {name!r} ({n_obj} objectives "
                         f"per genome), got {type(values).__name__} of shape {arr.shape}")
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"expected real-valued objectives (float or int dtype) from {name!r}, "
                        f"got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def sanitized_values(values, n_obj: int, name: str, n: int | None = None) -> tuple[np.ndarray, int]:
    """An island's evaluated values and the count of invalid evaluations: fitness (n,)
    with every non-finite value +inf, or, for ``n_obj > 1``, objectives (n, n_obj) with
    every row holding one all +inf. Checked as ``n`` genomes' output when ``n`` is given."""
    if n_obj > 1:
        if n is not None:
            values = check_objectives(values, n, n_obj, name)
        return sanitize_objectives(np.asarray(values, dtype=np.float64).reshape(-1, n_obj))
    return sanitize_fitness(values if n is None else check_fitness(values, n, name))


def check_algorithm_objectives(algorithm, problem, n_obj: int) -> None:
    """Raise ValueError unless ``algorithm`` handles ``n_obj`` objectives (a multi-objective
    algorithm has ``multi_objective = True``)."""
    if bool(getattr(algorithm, "multi_objective", False)) != (n_obj > 1):
        wanted = "a multi-objective algorithm (nsga2, smsemoa, moead)" if n_obj > 1 else "one objective"
        raise ValueError(f"expected {wanted} for algorithm {algorithm.name!r} and problem {problem.name!r}, "
                         f"got {n_obj} objective(s)")


class MultiObjectiveProblem(Problem):
    """A batch function ``func(X) -> (n, n_obj)`` over a box, every objective minimised.

    Args:
        func, dim, lower, upper, name, batched, initial: as :class:`Problem`
            (``batched=False``: ``func(x)`` gives one row of ``n_obj`` values).
        n_obj: objectives per genome (>= 2).
        reference_point: (n_obj,) point the hypervolume is measured to (every point of
            interest dominates it); None: no hypervolume in the logs.

    Raises:
        ValueError: n_obj < 2, a reference point of the wrong shape, or ``maximize``.

    Example::

        def two(X):                              # (n, 2) -> (n, 2): both minimised
            return np.stack([X[:, 0], 1 - np.sqrt(X[:, 0]) + X[:, 1] ** 2], axis=1)

        problem = MultiObjectiveProblem(two, 2, 0.0, 1.0, n_obj=2, reference_point=[1.1, 1.1])
        mpievo.minimize(problem, algorithm="nsga2", budget=5_000).front["hypervolume"]
    """

    def __init__(self, func, dim: int, lower, upper, *, n_obj: int, reference_point=None,
                 maximize: bool = False, **kwargs):
        if maximize:
            raise ValueError("expected objectives to minimise (negate the ones to maximise), got maximize=True")
        if isinstance(n_obj, bool) or not isinstance(n_obj, (int, np.integer)) or n_obj < 2:
            raise ValueError(f"expected n_obj to be an int >= 2, got {n_obj!r}")
        super().__init__(func, dim, lower, upper, **kwargs)
        self.n_obj = int(n_obj)
        if reference_point is not None:
            reference_point = np.asarray(reference_point, dtype=np.float64)
            if reference_point.shape != (self.n_obj,) or not np.all(np.isfinite(reference_point)):
                raise ValueError(f"expected a finite reference point of shape ({self.n_obj},), "
                                 f"got {reference_point!r}")
        self.reference_point = reference_point

    def __repr__(self) -> str:
        return f"MultiObjectiveProblem({self.name!r}, dim={self.dim}, n_obj={self.n_obj})"

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        """The (n, n_obj) objectives of an (n, dim) batch (validated, float64)."""
        genomes = np.asarray(genomes)
        if genomes.ndim != 2 or genomes.shape[1] != self.dim:
            raise ValueError(f"expected genomes of shape (n, {self.dim}), got {genomes.shape}")
        values = self.func(genomes) if self.batched else [self.func(row) for row in genomes]
        return check_objectives(values, genomes.shape[0], self.n_obj, self.name)


# --- ZDT ---------------------------------------------------------------------------

def _zdt_g(x: np.ndarray) -> np.ndarray:
    return 1.0 + 9.0 * x[:, 1:].sum(axis=1) / (x.shape[1] - 1)


def _two(f1, f2) -> np.ndarray:
    return np.column_stack([f1, f2])


def zdt1(x):
    g = _zdt_g(x)
    return _two(x[:, 0], g * (1.0 - np.sqrt(x[:, 0] / g)))


def zdt2(x):
    g = _zdt_g(x)
    return _two(x[:, 0], g * (1.0 - (x[:, 0] / g) ** 2))


def zdt3(x):
    g, f1 = _zdt_g(x), x[:, 0]
    return _two(f1, g * (1.0 - np.sqrt(f1 / g) - f1 / g * np.sin(10.0 * np.pi * f1)))


def zdt4(x):
    rest = x[:, 1:]
    g = 1.0 + 10.0 * rest.shape[1] + (rest ** 2 - 10.0 * np.cos(4.0 * np.pi * rest)).sum(axis=1)
    return _two(x[:, 0], g * (1.0 - np.sqrt(x[:, 0] / g)))


def zdt6(x):
    f1 = 1.0 - np.exp(-4.0 * x[:, 0]) * np.sin(6.0 * np.pi * x[:, 0]) ** 6
    g = 1.0 + 9.0 * (x[:, 1:].sum(axis=1) / (x.shape[1] - 1)) ** 0.25
    return _two(f1, g * (1.0 - (f1 / g) ** 2))


# --- DTLZ --------------------------------------------------------------------------

def _g_multimodal(xm):      # DTLZ1 and DTLZ3
    return 100.0 * (xm.shape[1] + ((xm - 0.5) ** 2 - np.cos(20.0 * np.pi * (xm - 0.5))).sum(axis=1))


def _g_sphere(xm):          # DTLZ2, 4, 5
    return ((xm - 0.5) ** 2).sum(axis=1)


def _spherical(angles, g, m: int) -> np.ndarray:
    """(1 + g) times the unit-sphere point of ``angles`` (fractions of pi/2, (n, m-1))."""
    cos, sin = np.cos(angles * np.pi / 2), np.sin(angles * np.pi / 2)
    out = np.empty((len(g), m))
    for i in range(m):
        part = np.prod(cos[:, :m - 1 - i], axis=1)
        out[:, i] = part if i == 0 else part * sin[:, m - 1 - i]
    return (1.0 + g)[:, None] * out


def _dtlz1(x, m):
    g = _g_multimodal(x[:, m - 1:])
    xs = x[:, :m - 1]
    out = np.empty((len(x), m))
    for i in range(m):
        part = np.prod(xs[:, :m - 1 - i], axis=1)
        out[:, i] = part if i == 0 else part * (1.0 - xs[:, m - 1 - i])
    return 0.5 * (1.0 + g)[:, None] * out


def _dtlz2(x, m):
    return _spherical(x[:, :m - 1], _g_sphere(x[:, m - 1:]), m)


def _dtlz3(x, m):
    return _spherical(x[:, :m - 1], _g_multimodal(x[:, m - 1:]), m)


def _dtlz4(x, m):
    return _spherical(x[:, :m - 1] ** 100.0, _g_sphere(x[:, m - 1:]), m)


def _degenerate(x, m, g):   # DTLZ5 and DTLZ6: every angle but the first squeezed by g
    theta = (1.0 + 2.0 * g[:, None] * x[:, :m - 1]) / (2.0 * (1.0 + g[:, None]))
    theta[:, 0] = x[:, 0]
    return _spherical(theta, g, m)


def _dtlz5(x, m):
    return _degenerate(x, m, _g_sphere(x[:, m - 1:]))


def _dtlz6(x, m):
    return _degenerate(x, m, (x[:, m - 1:] ** 0.1).sum(axis=1))


def _dtlz7(x, m):
    xm = x[:, m - 1:]
    g = 1.0 + 9.0 / xm.shape[1] * xm.sum(axis=1)
    f = x[:, :m - 1]
    h = m - (f / (1.0 + g[:, None]) * (1.0 + np.sin(3.0 * np.pi * f))).sum(axis=1)
    return np.column_stack([f, (1.0 + g) * h])


_DTLZ = {"dtlz1": (_dtlz1, 5), "dtlz2": (_dtlz2, 10), "dtlz3": (_dtlz3, 10), "dtlz4": (_dtlz4, 10),
         "dtlz5": (_dtlz5, 10), "dtlz6": (_dtlz6, 10), "dtlz7": (_dtlz7, 20)}
_ZDT = {"zdt1": (zdt1, 30), "zdt2": (zdt2, 30), "zdt3": (zdt3, 30), "zdt4": (zdt4, 10), "zdt6": (zdt6, 10)}
#: built-in multi-objective problems (name -> default number of genes for 2 objectives)
BUILTIN_MOO = ({name: dim for name, (_, dim) in _ZDT.items()}
               | {name: k + 1 for name, (_, k) in _DTLZ.items()} | WFG)
#: the DTLZ7 front's largest value of its first m - 1 objectives (the last is at most 2m)
_DTLZ7_EDGE = 0.8594


def nadir(name: str, n_obj: int) -> np.ndarray:
    """The nadir point (worst value of each objective over the true front) of a ZDT or DTLZ."""
    if name in ("zdt1", "zdt2", "zdt4"):
        return np.array([1.0, 1.0])
    if name == "zdt3":
        return np.array([0.8518, 1.0])
    if name == "zdt6":
        return np.array([1.0, 0.9211])
    if name == "dtlz1":
        return np.full(n_obj, 0.5)
    if name in ("dtlz5", "dtlz6"):     # the front is a curve: all but the last at most (1/sqrt 2)^(m-2)
        return np.append(np.full(n_obj - 1, 2.0 ** (-(n_obj - 2) / 2)), 1.0)
    if name == "dtlz7":
        return np.append(np.full(n_obj - 1, _DTLZ7_EDGE), 2.0 * n_obj)
    return np.ones(n_obj)


#: objectives of a scalable built-in (DTLZ, WFG) when not given: three, the count of
#: Deb, Thiele, Laumanns and Zitzler's and Huband et al.'s examples and the default of
#: pymoo's DTLZ and of pygmo's ``dtlz`` and ``wfg``
SCALABLE_OBJECTIVES = 3


def builtin_objectives(name: str) -> int | None:
    """The objectives of built-in ``name`` when not given: 2 for ZDT (fixed by its
    definition), :data:`SCALABLE_OBJECTIVES` for DTLZ and WFG; None for another name.

    Example::

        builtin_objectives("zdt1")       # 2
    """
    if name in _ZDT:
        return 2
    return SCALABLE_OBJECTIVES if name in BUILTIN_MOO else None


def fixed_objectives(name: str) -> int | None:
    """The objectives built-in ``name`` has by definition (ZDT: 2), None when it scales.

    Example::

        fixed_objectives("zdt4"), fixed_objectives("dtlz2")      # 2, None
    """
    return 2 if name in _ZDT else None


def builtin_dim(name: str, n_obj: int) -> int:
    """The genes of built-in ``name`` with ``n_obj`` objectives when not given (pymoo's):
    ZDT1-3 30, ZDT4 and ZDT6 10, DTLZ ``n_obj - 1 + k`` (k = 5 for DTLZ1, 20 for DTLZ7,
    10 for the others), WFG 20 distance genes after its position genes.

    Example::

        builtin_dim("dtlz2", 3)          # 12
    """
    if name in _ZDT:
        return _ZDT[name][1]
    if name in _DTLZ:
        return n_obj - 1 + _DTLZ[name][1]
    return 20 + position_genes(n_obj)


def moo_problem(name: str, dim: int | None = None, n_obj: int | None = None) -> MultiObjectiveProblem:
    """A built-in multi-objective problem.

    Args:
        name: one of :data:`BUILTIN_MOO`.
        dim: genes; None: :func:`builtin_dim` (pymoo's default).
        n_obj: objectives (ZDT: 2 only); None: :func:`builtin_objectives` (ZDT 2, DTLZ
            and WFG 3).

    Raises:
        ValueError: unknown name, or a dim or n_obj the problem does not take.

    Example::

        moo_problem("zdt1").dim, moo_problem("dtlz2").n_obj     # (30, 3): the problems' own
        problem = moo_problem("dtlz2", n_obj=2)
        problem.dim, problem.n_obj, problem.reference_point     # (11, 2, array([1.1, 1.1]))
    """
    if name not in BUILTIN_MOO:
        raise ValueError(f"expected a multi-objective problem among {sorted(BUILTIN_MOO)}, got {name!r}")
    n_obj = builtin_objectives(name) if n_obj is None else n_obj
    if name in _ZDT:
        func, default = _ZDT[name]
        if n_obj != 2:
            raise ValueError(f"expected n_obj = 2 for {name} (two objectives by definition), got {n_obj!r}")
        dim = default if dim is None else dim
        lower = np.zeros(dim) if name != "zdt4" else np.append(0.0, np.full(dim - 1, -5.0))
        upper = np.ones(dim) if name != "zdt4" else np.append(1.0, np.full(dim - 1, 5.0))
        least = 2
    elif isinstance(n_obj, bool) or not isinstance(n_obj, (int, np.integer)) or n_obj < 2:
        raise ValueError(f"expected n_obj to be an int >= 2 for {name}, got {n_obj!r}")
    elif name in _DTLZ:
        rule, _ = _DTLZ[name]
        dim = builtin_dim(name, n_obj) if dim is None else dim
        least = n_obj

        def func(x, rule=rule, m=int(n_obj)):
            return rule(np.asarray(x, dtype=np.float64), m)
        func.__name__ = name
        lower, upper = 0.0, 1.0
    else:
        func, dim = wfg_function(name, dim, int(n_obj))      # checks dim
        lower, upper = wfg_box(dim)
        least = 2
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < least:
        raise ValueError(f"expected dim to be an int >= {least} for {name}, got {dim!r}")
    return MultiObjectiveProblem(lambda x, f=func: f(np.asarray(x, dtype=np.float64)), int(dim),
                                 lower, upper, n_obj=n_obj, name=name,
                                 reference_point=REFERENCE_MARGIN * (wfg_scales(n_obj) if name in WFG
                                                                     else nadir(name, n_obj)))
