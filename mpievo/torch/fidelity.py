"""Cheaper fitness for models: a :class:`~.problem.ModelProblem` or
:class:`~.recipes.RecipeProblem` that can also score a genome on some rows of its data.

:func:`row_scores` gives such a problem what :mod:`mpievo.evo.fidelity` asks of a problem
with fidelity: ``fidelity_rows`` (the rows of the validation data) and
``evaluate_rows(genomes, rows)``, which writes each genome into the model as
``evaluate`` does and calls ``score_rows(model, rows)`` instead of ``evaluate(model)``.
``score_rows`` is a mean over ``rows`` of a per-row score whose mean over all rows is the
problem's fitness (the race adds stages up). Then ``problem.fidelity_sample`` (or
:func:`mpievo.evo.fidelity.with_fidelity`) turns the racing on.

Example::

    def score_rows(model, rows):            # rows: indices into the validation lines
        return accuracy(model, val_x[rows], val_y[rows])

    problem = row_scores(RecipeProblem(model, lambda m: score_rows(m, slice(None)), sources),
                         score_rows, rows=len(val_x))
    mpievo.minimize(problem, config={"problem": {"fidelity_sample": 0.125}}, budget=300)
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .problem import score_each


def row_scores(problem, score_rows: Callable, rows: int):
    """``problem`` (a ModelProblem or RecipeProblem) scoring genomes on rows of its data
    too: ``score_rows(model, rows) -> float`` (``rows`` a sorted int array in
    ``[0, rows)``; the mean over those rows of a per-row score, in the problem's sense, that
    over all rows is its fitness); returns ``problem``, given ``fidelity_rows`` and
    ``evaluate_rows`` (module docstring).

    Raises:
        ValueError: ``rows`` not an int >= 1, or a problem that is neither kind.
        TypeError: ``score_rows`` not callable.

    Example::

        problem = row_scores(problem, lambda model, rows: accuracy(model, val[rows]), rows=len(val))
        problem.evaluate_rows(genomes, np.arange(32))      # the first 32 rows' scores
    """
    if not callable(score_rows):
        raise TypeError(f"expected a callable score_rows(model, rows) -> float, got {type(score_rows).__name__}")
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ValueError(f"rows: expected an int >= 1, got {rows!r}")
    put = getattr(problem, "materialize", None) or getattr(getattr(problem, "flat", None), "write", None)
    if put is None or not hasattr(problem, "model"):
        raise ValueError(f"expected a ModelProblem or RecipeProblem, got {type(problem).__name__}")

    def evaluate_rows(genomes, subset) -> np.ndarray:
        subset = np.asarray(subset, dtype=np.int64)
        return score_each(problem.model, lambda model: score_rows(model, subset), genomes, put)

    problem.fidelity_rows = int(rows)
    problem.evaluate_rows = evaluate_rows
    return problem
