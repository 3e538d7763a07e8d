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
* **The leader's share** (``run.leader_rate = m > 1``, island scheme): at each
  migration, before the migrants move, the budget left is split again
  (:func:`split_left`): the island with the best fitness (:func:`leader`) gets ``m``
  parts, every other island one, and from then on the leader steps ``m * R``
  children per round, the others ``R``, so all spend their new shares in the same
  rounds (:func:`rounds_to_spend`) and the run's end moves with each split.
  With ``run.leader_rate_final = M > m`` the rate grows once half the budget is
  spent (:func:`rate_at`): geometrically from ``m`` to ``M`` over the second half, so
  a portfolio explores with moderate shares first and commits late. With
  ``run.leader_margin = e > 0`` the lead changes hands only when another island is
  better by more than ``e`` times the spread of the islands' best fitness at the
  first split (:func:`lead_scale`): an island that polishes an immigrant's copy does
  not take the budget from the island that found it.
* **Finishing** (``run.finish_diversity = d > 0`` and/or ``run.finish_reserve = r > 0``,
  with the leader's share): at a split, the leader (:func:`finisher`; the margin of
  ``run.leader_margin`` applies) switches, once, to a local CMA-ES started at its best
  member with a step of its own spread (its diversity, box-relative): when it is not a
  CMA-ES island and its members have converged (diversity <= ``d``), or, any island,
  once at most ``r`` of the budget is left. It leads from then on, so the local run
  gets the leader's share: a DE population that converged to 1e-6 of the optimum
  spends the end of the budget on steps that now shrink geometrically.
* **Progress** (``run.progress_rate = p > 1``, with the leader's share): at each split
  every island's progress since the previous split is measured as the orders of
  magnitude by which it closed its gap to the best fitness now, per 1,000 of its
  evaluations (:func:`progress`), and an island that is not the leader gets
  ``1 + (p - 1) * its progress / the largest progress`` parts (rounded) instead of 1
  (:func:`progress_rates`): an island that is catching up quickly is fed before it
  leads, a stalled one gets the floor of 1 part.
* **Restarts** (``run.restart_after = k > 0``): an island that does not run CMA-ES, is
  not the leader and made no progress at ``k`` splits in a row restarts as CMA-ES
  (:func:`losers`): its engine's ``cma_*`` settings, the first restart of its policy
  (IPOP: the grown population; BIPOP: the regime with the smaller budget used) from a
  uniformly random point. From then on CMA-ES's own criteria restart it.

:func:`plan` applies the rule to a run's engine settings; nothing here communicates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..evo.engine_config import EngineConfig
from ..evo.island_sizes import initial_population, planned_batch


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
    return rounds_to_spend(shares, initial, size, [1] * len(shares))


# ---------------------------------------------------------------- the leader's share
#
# With ``run.leader_rate = m > 1`` the budget left at each migration is split again:
# the island with the best fitness (the *leader*) evaluates m children for each child
# of any other island until the next migration. A portfolio thus spends its budget on
# the kind of island that works on the problem at hand (CMA-ES on a rotated function,
# DE on a separable one) without knowing it in advance. The rule uses only values
# every rank gathers alike, so runs stay bit-identical on any rank count.


def leader(best: Sequence[float], current: int | None, margin: float = 0.0) -> int:
    """The island holding the best (lowest) fitness in ``best``; ``current`` keeps the
    lead while its best is within ``margin`` of the lowest (a tie at 0), so an
    immigrant's copy, or a copy another island polished by less than ``margin``, never
    takes the lead from the island that found it; else the lowest index among the
    best. NaN never leads."""
    values = [float("inf") if v != v else float(v) for v in best]
    lowest = min(values)
    if current is not None and values[current] <= lowest + margin:
        return current
    return values.index(lowest)


def lead_scale(best: Sequence[float]) -> float:
    """The spread of the islands' best fitness (max - min over the finite ones; 0 with
    fewer than two): the run's own fitness scale, taken at its first split, that
    ``run.leader_margin`` is a fraction of (shift- and scale-invariant)."""
    finite = [float(v) for v in best if math.isfinite(v)]
    return max(finite) - min(finite) if len(finite) > 1 else 0.0


def leader_rates(n_islands: int, lead: int, rate: int) -> list[int]:
    """Children per round unit of each island: ``rate`` for the leader, 1 for the others."""
    return [rate if i == lead else 1 for i in range(n_islands)]


#: the fraction of the budget spent before the leader's rate starts to grow
COMMIT_FROM = 0.5


def rate_at(spent: int, budget: int, rate: int, final: int) -> int:
    """The leader's rate at a split once ``spent`` of ``budget`` evaluations are spent:
    ``rate`` up to :data:`COMMIT_FROM` of the budget, then geometric to ``final`` at
    the whole budget (rounded; never below ``rate``).

    Late commitment: the island leading early (often the fastest to a local optimum,
    e.g. CMA-ES on separable Rastrigin) is not yet trusted with the budget, and the one
    leading late, which found the best basin, gets nearly all of what is left."""
    if final <= rate or budget <= 0:
        return rate
    progress = (spent / budget - COMMIT_FROM) / (1.0 - COMMIT_FROM)
    if progress <= 0:
        return rate
    return max(rate, int(round(rate * (final / rate) ** min(1.0, progress))))


def split_left(budget: int, evaluations: Sequence[int], rates: Sequence[int]) -> list[int]:
    """New shares: each island keeps what it evaluated, and the budget left is split in
    proportion to ``rates`` (floors; the remainder one each to the first islands)."""
    left = max(0, int(budget) - sum(int(e) for e in evaluations))
    total = sum(rates)
    parts = [left * r // total for r in rates]
    for i in range(left - sum(parts)):
        parts[i] += 1
    return [int(e) + p for e, p in zip(evaluations, parts)]


def rounds_to_spend(shares: Sequence[int], base: Sequence[int], size: int, rates: Sequence[int]) -> int:
    """Rounds after a split by which every island, stepping ``size * rate`` children per
    round from ``base`` evaluations, has spent its share."""
    return max(-(-(s - b) // (size * r)) for s, b, r in zip(shares, base, rates))


# ---------------------------------------------------------------- finishing


def finisher(best: Sequence[float], diversity: Sequence[float], kinds: Sequence[str], finished: Sequence[int],
             tolerance: float, late: bool, lead: int | None = None) -> int | None:
    """The island to switch to a finishing run at this split, or None: the leader
    ``lead`` (None: the lowest index holding the best, lowest, fitness), not switched
    before (``finished``), either converged (``diversity`` at most ``tolerance`` > 0, an
    island whose ``kinds`` entry is not ``"cmaes"``: a CMA-ES run converges to full
    precision on its own) or ``late`` (the budget's reserve is reached). NaN never
    finishes. Given the leader (:func:`leader`, with its margin), a DE island that only
    polished an immigrant's copy of a CMA-ES optimum by a hair does not finish and take
    the lead (and the budget) from the CMA-ES island, whose larger restart may be the
    one that gets below the local optima near the best.

    Example::

        >>> finisher([3.0, 1e-6, 2.0], [0.2, 1e-4, 0.1], ["cmaes", "shade", "cmaes"], [], 1e-3, False)
        1
        >>> finisher([1e-6, 1e-6 - 1e-12, 2.0], [0.2, 1e-4, 0.1], ["cmaes", "shade", "cmaes"], [], 1e-3, False, lead=0)
    """
    values = [float("inf") if v != v else float(v) for v in best]
    if lead is None:
        lead = values.index(min(values))
    if lead in finished or not math.isfinite(values[lead]):
        return None
    converged = tolerance > 0 and kinds[lead] != "cmaes" and diversity[lead] <= tolerance
    return lead if converged or late else None


def finish_step(diversity: float, sigma0: float) -> float:
    """The finishing run's initial step (box-relative): the island's own spread, within
    [1e-12, ``sigma0``].

    Example::

        >>> finish_step(1e-4, 0.3), finish_step(0.5, 0.3)
        (0.0001, 0.3)
    """
    return min(max(float(diversity), 1e-12), float(sigma0))


# ---------------------------------------------------------------- progress and restarts


def progress(before: Sequence[float], now: Sequence[float], spent: Sequence[int], scale: float) -> list[float]:
    """Each island's progress per 1,000 evaluations since the previous split: the orders
    of magnitude by which it closed its gap to the best fitness now,
    ``log10((before - best + floor) / (now - best + floor)) * 1000 / spent``, the floor
    ``1e-12 * scale + 1e-300`` (``scale``: :func:`lead_scale`). 0 for an island that did
    not improve, spent nothing, or has no finite value.

    Example::

        >>> [round(p, 3) for p in progress([10.0, 5.0, 2.0], [1.0, 0.5, 2.0], [1000, 1000, 1000], 10.0)]
        [1.279, 11.653, 0.0]
    """
    finite = [float(v) for v in now if math.isfinite(v)]
    if not finite:
        return [0.0] * len(now)
    best, floor = min(finite), 1e-12 * scale + 1e-300
    out = []
    for b, n, e in zip(before, now, spent):
        if not (math.isfinite(n) and e > 0 and n < b):
            out.append(0.0)
            continue
        gap_before = (b - best + floor) if math.isfinite(b) else math.inf
        out.append(1000.0 * math.log10(min(gap_before, 1e300) / (n - best + floor)) / e)
    return out


def progress_rates(rates: Sequence[int], lead: int, gains: Sequence[float], rate: int) -> list[int]:
    """``rates`` with every island but the leader at ``1 + (rate - 1) * gain / max gain``
    (rounded; 1 when no island progressed).

    Example::

        >>> progress_rates([1, 7, 1, 1], 1, [0.5, 2.0, 1.0, 0.0], 5)
        [2, 7, 3, 1]
    """
    top = max(gains, default=0.0)
    if top <= 0:
        return list(rates)
    return [r if i == lead else 1 + int(round((rate - 1) * max(0.0, g) / top)) for i, (r, g) in
            enumerate(zip(rates, gains))]


def losers(stalls: Sequence[int], lead: int, patience: int, eligible: Sequence[bool]) -> list[int]:
    """The islands to restart: ``eligible`` (not running CMA-ES, whose own restarts take
    care of it: a large IPOP run may spend several splits on one generation), not the
    leader, without progress at ``patience`` splits in a row.

    Example::

        >>> losers([3, 0, 5, 4], lead=2, patience=3, eligible=[True, True, True, False])
        [0]
    """
    return [i for i, s in enumerate(stalls) if i != lead and eligible[i] and patience > 0 and s >= patience]
