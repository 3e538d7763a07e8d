"""Stagnation detection: generations since a population last made real progress.

:class:`StagnationMonitor` is fed, once per generation, the best and the median
fitness (minimised) of a population. Progress means that one of them beat its
*reference* -- its value at the last progress -- by more than ``tol * |reference|``;
many tiny steps that add up to that much count too, because a reference only moves
on progress. Watching the median as well keeps a large population that is still
converging (its bulk improving while the best member waits) from counting as
stuck. After ``patience`` generations without progress the monitor reports
stagnation (the GA then restarts, see :mod:`mpievo.evo.algorithms.ga`).

The state is three plain numbers, for checkpoints.
"""

from __future__ import annotations

import math


def _improved(value: float, reference: float, tol: float) -> bool:
    return value < reference and (math.isinf(reference) or reference - value > tol * abs(reference))


class StagnationMonitor:
    """Counts generations in which neither the best nor the median improved by ``tol``.

    Args:
        patience: generations without progress that mean stagnation; 0: never.
        tol: relative improvement that counts as progress (>= 0).

    Raises:
        ValueError: a negative or non-int patience, or a negative tol.
    """

    def __init__(self, patience: int, tol: float):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"expected patience to be an int >= 0, got {patience!r}")
        if not tol >= 0.0:
            raise ValueError(f"expected tol >= 0, got {tol!r}")
        self.patience = patience
        self.tol = float(tol)
        self.reset()

    def reset(self) -> None:
        """Forget the references: the next values count as progress."""
        self.best = math.inf
        self.median = math.inf
        self.stalled = 0

    def update(self, best: float, median: float) -> bool:
        """Record a generation's best and median fitness; returns True on progress."""
        progress = False
        if _improved(best, self.best, self.tol):
            self.best = best
            progress = True
        if _improved(median, self.median, self.tol):
            self.median = median
            progress = True
        self.stalled = 0 if progress else self.stalled + 1
        return progress

    @property
    def stagnated(self) -> bool:
        """True once ``patience`` (> 0) generations passed without progress."""
        return 0 < self.patience <= self.stalled

    def state_dict(self) -> dict:
        return {"best": float(self.best), "median": float(self.median), "stalled": int(self.stalled)}

    def load_state_dict(self, state: dict) -> None:
        self.best = float(state["best"])
        self.median = float(state["median"])
        self.stalled = int(state["stalled"])
