"""Stagnation detection: generations since a population last made real progress.

:class:`StagnationMonitor` is fed, once per generation, the best and the median
fitness (minimised) of a population. Progress means that one of them beat its
*reference* -- its value at the last progress -- by more than ``tol * scale``;
many tiny steps that add up to that much count too, because a reference only moves
on progress. Watching the median as well keeps a large population that is still
converging (its bulk improving while the best member waits) from counting as
stuck. After ``patience`` generations without progress the monitor reports
stagnation (the GA then restarts, see :mod:`mpievo.evo.algorithms.ga`).

The scale is the spread ``median - best`` of the first generation after a reset
(the first with a finite spread), in the spirit of pycma's ``tolfunrel`` (relative
to the first generation's median minus the least median since). A difference of
fitness values, it makes the criterion invariant to adding a constant to the
fitness (and to scaling it): the same run on ``f`` and ``f + c`` stalls at the same
generations. A tolerance relative to ``|f|`` did not have that property: how close
the values were to 0 -- an arbitrary origin -- decided when a run stalled. A spread
measured anew each generation would shrink with a converging population as fast as
its steps do, so a population settling into a local minimum would never count as
stuck. Until a finite spread is seen (no fitness yet, or more than half of it
invalid) any strict improvement counts.

The state is plain numbers, for checkpoints (``scale`` is -1 while unknown: NaN
would make equal states compare unequal).
"""

from __future__ import annotations

import math

UNKNOWN = -1.0   # the scale before a finite spread was seen (spreads are >= 0)


def _improved(value: float, reference: float, step: float) -> bool:
    return value < reference and (math.isinf(reference) or reference - value > step)


class StagnationMonitor:
    """Counts generations in which neither the best nor the median improved by
    ``tol * scale`` (see the module docstring).

    Args:
        patience: generations without progress that mean stagnation; 0: never.
        tol: improvement that counts as progress, as a fraction of the scale (>= 0).

    Raises:
        ValueError: a negative or non-int patience, or a negative tol.

    Example::

        monitor = StagnationMonitor(patience=3, tol=1e-4)
        for _ in range(4):
            monitor.update(best=1.0, median=2.0)   # progress the first time only
        monitor.stagnated                          # True: 3 generations without progress
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
        """Forget the references and the scale: the next values count as progress."""
        self.best = math.inf
        self.median = math.inf
        self.scale = UNKNOWN
        self.stalled = 0

    def scaled(self, fraction: float) -> float:
        """``fraction * scale``; 0 while no scale is known."""
        return 0.0 if self.scale == UNKNOWN else fraction * self.scale

    @property
    def step(self) -> float:
        """The improvement that counts as progress: ``tol * scale``."""
        return self.scaled(self.tol)

    def update(self, best: float, median: float) -> bool:
        """Record a generation's best and median fitness; returns True on progress."""
        spread = median - best
        if self.scale == UNKNOWN and math.isfinite(spread):
            self.scale = max(spread, 0.0)   # a best above the median: no spread
        progress = False
        step = self.step
        if _improved(best, self.best, step):
            self.best = best
            progress = True
        if _improved(median, self.median, step):
            self.median = median
            progress = True
        self.stalled = 0 if progress else self.stalled + 1
        return progress

    @property
    def stagnated(self) -> bool:
        """True once ``patience`` (> 0) generations passed without progress."""
        return 0 < self.patience <= self.stalled

    def state_dict(self) -> dict:
        return {"best": float(self.best), "median": float(self.median), "scale": float(self.scale),
                "stalled": int(self.stalled)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; a state without a scale takes the next generation's."""
        self.best = float(state["best"])
        self.median = float(state["median"])
        self.scale = float(state.get("scale", UNKNOWN))
        self.stalled = int(state["stalled"])
