"""Restart policies of the CMA-ES island: IPOP, BIPOP and plain restarts.

When a run meets a termination criterion, the island starts a new one from a
uniformly random point of the box (as IPOP-CMA-ES does: the archive keeps the best
found so far, and a new start explores another basin). A policy is a plain callable
``policy(schedule, rng) -> Run`` that decides the new run's population size and
initial step; :class:`Schedule` holds the counters it reads and writes.

* ``ipop`` (Auger & Hansen 2005): every restart multiplies the population by
  ``growth`` (2: doubling), up to ``max_popsize``; step ``sigma0``.
* ``bipop`` (Hansen 2009): two regimes share the evaluation budget. The first run
  and every doubling restart belong to the *large* regime (as ``ipop``); once one
  large restart happened, a restart goes to the *small* regime whenever that regime
  has used fewer evaluations so far: population
  ``floor(base * (large / (2 base)) ** (U1 ** 2))`` with ``large`` the current
  large-regime population, and step ``sigma0 * 10 ** (-2 U2)`` (U1, U2 uniform),
  i.e. short, local runs between the long global ones.
* ``none``: every run keeps the initial population and step.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import NamedTuple

import numpy as np

LARGE, SMALL = 0, 1


class Run(NamedTuple):
    """What the next run starts with."""

    popsize: int
    sigma_factor: float   # times sigma0
    regime: int           # LARGE or SMALL


class Schedule:
    """Restart counters: the policy's memory between runs (plain ints, checkpointed).

    Args:
        base: the first run's population.
        growth: population factor per large restart (> 1 for ipop/bipop to grow).
        max_popsize: the largest population a restart may reach.
    """

    def __init__(self, base: int, growth: float, max_popsize: int):
        self.base = int(base)
        self.growth = float(growth)
        self.max_popsize = int(max_popsize)
        self.restarts = 0
        self.large_restarts = 0
        self.regime = LARGE
        self.evaluations = [0, 0]   # used by the LARGE and the SMALL regime

    def large_popsize(self) -> int:
        """Population of the large regime after ``large_restarts`` growth steps."""
        return min(self.max_popsize, int(round(self.base * self.growth ** self.large_restarts)))

    def count(self, evaluations: int) -> None:
        """Charge ``evaluations`` to the current regime."""
        self.evaluations[self.regime] += int(evaluations)

    def state_dict(self) -> dict:
        return {"restarts": self.restarts, "large_restarts": self.large_restarts, "regime": self.regime,
                "evaluations_large": self.evaluations[LARGE], "evaluations_small": self.evaluations[SMALL]}

    def load_state_dict(self, state: dict) -> None:
        self.restarts = int(state["restarts"])
        self.large_restarts = int(state["large_restarts"])
        self.regime = int(state["regime"])
        self.evaluations = [int(state["evaluations_large"]), int(state["evaluations_small"])]


def same(schedule: Schedule, rng: np.random.Generator) -> Run:
    """Plain restart: the first run's population and step. Draws nothing."""
    return Run(schedule.base, 1.0, LARGE)


def ipop(schedule: Schedule, rng: np.random.Generator) -> Run:
    """Grow the population by ``growth``; step ``sigma0``. Draws nothing."""
    schedule.large_restarts += 1
    return Run(schedule.large_popsize(), 1.0, LARGE)


def bipop(schedule: Schedule, rng: np.random.Generator) -> Run:
    """The regime with the smaller budget used so far (see the module docstring).
    Draws: two uniforms for a small-regime run, nothing otherwise."""
    if schedule.large_restarts == 0 or schedule.evaluations[SMALL] >= schedule.evaluations[LARGE]:
        return ipop(schedule, rng)
    u_pop, u_sigma = rng.random(2)
    ratio = schedule.large_popsize() / (2.0 * schedule.base)
    popsize = int(schedule.base * max(ratio, 1.0) ** (u_pop ** 2))
    return Run(popsize, 10.0 ** (-2.0 * u_sigma), SMALL)


#: policy name -> callable (read-only)
POLICIES = MappingProxyType({"ipop": ipop, "bipop": bipop, "none": same})


def restart(schedule: Schedule, policy: str, rng: np.random.Generator) -> Run:
    """Count a restart and let ``policy`` pick the next run (it sets the regime)."""
    run = POLICIES[policy](schedule, rng)
    schedule.restarts += 1
    schedule.regime = run.regime
    return run
