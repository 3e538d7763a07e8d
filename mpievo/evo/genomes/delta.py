"""``engine.genome = "delta"``: a row is a genome's difference from a base model.

The base is the first of the problem's bases (``bases[0]``), held once per node (see
:mod:`.bases`). The row box is the problem's box shifted by the base
(``[lower - base, upper - base]``), so every operator, algorithm and bound mode works
on deltas exactly as on genomes; an island starts from the problem's starting genomes
minus the base (uniform in the box when it has none). A genome is
``clip(base + delta, lower, upper)`` in the engine's dtype.

Deltas are dense rows in the engine's dtype: neither sparse nor low-precision. The
operators do not allow either without changing results: interpolation crossover
``omega*a + (1-omega)*b`` of two sparse deltas is their union (sparsity is lost within
a few generations), and the operators compute in the rows' dtype, so float16 deltas
would round every child. What ``delta`` saves is the base: one copy per node instead
of one per rank, and checkpoints that hold deltas and the base's checksum. For
genomes far larger than memory use ``seeded``.
"""

from __future__ import annotations

import numpy as np

from ..problems import Problem
from .bases import BaseModels
from .encoded import EncodedProblem, genome_box


class DeltaProblem(EncodedProblem):
    """The user's ``problem`` over deltas from ``bases[0]`` (module docstring)."""

    genome = "delta"

    def __init__(self, problem: Problem, bases: BaseModels, *, dtype, budget: int):
        base = bases.array[0].astype(np.float64)  # the box shift is float64, like the box
        initial = None if problem.initial is None else self._initial_deltas
        super().__init__(problem, bases, row_dim=problem.dim, row_lower=problem.lower - base,
                         row_upper=problem.upper - base, row_dtype=dtype, dtype=dtype,
                         budget=budget, initial=initial)
        self._box = genome_box(problem, dtype)

    def _initial_deltas(self, rng: np.random.Generator, n: int) -> np.ndarray:
        genomes = self.inner._check_initial(self.inner.initial(rng, n), n)
        return genomes.astype(np.float64) - self.bases.array[0]

    def materialize_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        np.add(self.bases.array[0], rows, out=out, casting="unsafe")
        np.clip(out, *self._box, out=out)
