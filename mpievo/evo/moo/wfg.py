"""The WFG toolkit's problems WFG1-9 (Huband, Hingston, Barone and While 2006), from pymoo.

The issue asked for WFG "where a well-kept library provides them": pymoo does, so its
implementation is evaluated here rather than written again. pymoo is imported on first
use (the ``moo`` extra). Every WFG problem has ``dim = k + l`` genes: ``k`` position
genes (a multiple of ``n_obj - 1``; here 4 for two objectives, else ``2 (n_obj - 1)``,
pymoo's default) and ``l`` distance genes (even for WFG2 and WFG3); gene ``i`` lies in
``[0, 2 i]``. Objective ``m`` (from 1) has the toolkit's scale ``2 m``: the true fronts
reach it (WFG1's passes it by about 0.07, WFG3's degenerate front stays below it), so
their reference point is 1.1 times ``(2, 4, ..., 2 n_obj)`` rather than a computed nadir.
"""

from __future__ import annotations

import numpy as np

#: the WFG problems (name -> default genes: k = 4 position and 20 distance genes)
WFG = {f"wfg{i}": 24 for i in range(1, 10)}


def position_genes(n_obj: int) -> int:
    """``k``, the position genes of a WFG problem with ``n_obj`` objectives."""
    return 4 if n_obj == 2 else 2 * (n_obj - 1)


def _check_dim(name: str, dim: int, n_obj: int) -> None:
    k = position_genes(n_obj)
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= k:
        raise ValueError(f"expected dim to be an int > {k} for {name} with {n_obj} objectives "
                         f"({k} position genes and at least one distance gene), got {dim!r}")
    if name in ("wfg2", "wfg3") and (dim - k) % 2:
        raise ValueError(f"expected an even number of distance genes (dim - {k}) for {name}, "
                         f"got dim {dim}")


def wfg_function(name: str, dim: int | None, n_obj: int):
    """``(f, dim)``: ``f(X) -> (n, n_obj)`` of pymoo's ``name`` on ``dim`` genes (None:
    20 distance genes after the position genes); ``n_obj`` an int >= 2.

    Raises:
        ValueError: a dim that makes no WFG problem.
        ImportError: pymoo is not installed.
    """
    if dim is None:
        dim = 20 + position_genes(n_obj)
    _check_dim(name, dim, n_obj)
    try:
        from pymoo.problems import get_problem
    except ImportError as err:
        raise ImportError(f"expected pymoo for {name} (pip install 'mpievo[moo]'), got: {err}") from None
    problem = get_problem(name, n_var=int(dim), n_obj=n_obj, k=position_genes(n_obj))

    def evaluate(x):
        return problem.evaluate(np.asarray(x, dtype=np.float64), return_values_of=["F"])

    evaluate.__name__ = name
    return evaluate, int(dim)


def wfg_box(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The box of a WFG problem: gene ``i`` (from 1) in ``[0, 2 i]``."""
    return np.zeros(dim), 2.0 * np.arange(1, dim + 1)


def wfg_scales(n_obj: int) -> np.ndarray:
    """``(2, 4, ..., 2 n_obj)``: the toolkit's scale of each objective."""
    return 2.0 * np.arange(1, n_obj + 1)
