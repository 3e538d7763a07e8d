"""Evaluation shares: how a run's generations and budget divide into island evaluations.

The rule (the same on every rank, from the settings alone):

* **Rounds.** A generation of the run is a *round* of ``R`` evaluations per island,
  ``R`` the largest planned batch of any island (:func:`round_size`). In round ``g``
  each island steps until the children it evaluated since its initial population
  reach ``g * R`` (at least one step when it is behind). A GA island with batch 64
  beside a CMA-ES island with 10 children: with ``R = 64`` the GA steps once per
  round and CMA-ES about six times, so their evaluation counts stay within one batch
  of each other. Migration every ``K`` generations is every ``K * R`` evaluations.
* **Budget.** ``budget`` evaluations in total (initial populations included) split
  into one share per island (:func:`evaluation_shares`: ``budget // n``, the first
  ``budget % n`` islands one more). An island never evaluates beyond its share: its
  last step evaluates only the children left. Every island has spent its share by
  round :func:`budget_rounds`, where the run ends.

:func:`plan` applies the rule to a run's engine settings; nothing here communicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..evo.config import EngineConfig
from ..evo.island import initial_population, planned_batch


@dataclass(frozen=True)
class SharePlan:
    """How a run's evaluations divide over its islands (identical on every rank).

    Attributes:
        round_size: ``R``, evaluations per island per generation.
        initial: each island's initial population (evaluated before generation 1).
        shares: each island's share of the budget (None: no budget).
        budget_generation: the generation by which every share is spent (None: no budget).
    """

    round_size: int
    initial: list[int]
    shares: list[int] | None
    budget_generation: int | None


def plan(engines: Sequence[EngineConfig], dim: int, budget: int | None = None) -> SharePlan:
    """The :class:`SharePlan` of islands with resolved settings ``engines`` on a ``dim``-gene problem.

    Raises:
        ValueError: a budget that does not cover the initial populations.
    """
    initial = [initial_population(e) for e in engines]
    size = round_size([planned_batch(e, dim) for e in engines])
    if budget is None:
        return SharePlan(size, initial, None, None)
    shares = evaluation_shares(budget, len(engines))
    return SharePlan(size, initial, shares, budget_rounds(shares, initial, size))


def round_size(batches: Sequence[int]) -> int:
    """``R``: the largest of the islands' planned batches (>= 1)."""
    return max(1, *batches)


def evaluation_shares(budget: int, n_islands: int) -> list[int]:
    """Each island's evaluations out of ``budget``: ``budget // n``, the first
    ``budget % n`` islands one more (they add up to ``budget``)."""
    base, extra = divmod(int(budget), int(n_islands))
    return [base + (1 if i < extra else 0) for i in range(n_islands)]


def smallest_budget(initial: Sequence[int]) -> int:
    """The smallest budget whose shares cover every island's initial population."""
    n = len(initial)
    return max((p - 1) * n + i + 1 if p > 0 else 0 for i, p in enumerate(initial))


def budget_rounds(shares: Sequence[int], initial: Sequence[int], size: int) -> int:
    """The round by which every island has spent its share (see the module docstring).

    Raises:
        ValueError: a share smaller than the island's initial population.
    """
    short = [i for i, (share, start) in enumerate(zip(shares, initial)) if share < start]
    if short:
        raise ValueError(f"expected a budget of at least {smallest_budget(initial)} evaluations (the "
                         f"initial populations), got {sum(shares)}: islands {short} start beyond their share")
    return max(-(-(share - start) // size) for share, start in zip(shares, initial))
