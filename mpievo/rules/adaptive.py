"""Migration interval (and optionally emigrant count) adapted to measured diversity.

Every rank gathers the diversity of every island (in island order) and applies the
same pure function to it, so the interval and the count, and therefore the migration
schedule, stay identical on all ranks and do not depend on how islands are placed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class AdaptiveInterval:
    """Rule for the next migration interval.

    Attributes:
        minimum, maximum: bounds of the interval in generations (1 <= minimum <= maximum).
        collapse_below: an island whose diversity is below this has collapsed: migrate
            sooner (the interval halves).
        diverse_above: when every island's diversity is above this, migrate later (the
            interval doubles).
        emigrants: adapt the emigrant count too, the other way: it doubles (up to the
            policy's ``emigrants``) when an island collapsed and halves (down to 1) when
            every island is diverse. False: the policy's count every time.
    """

    minimum: int
    maximum: int
    collapse_below: float
    diverse_above: float
    emigrants: bool = False

    def __post_init__(self):
        for name in ("minimum", "maximum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"expected {name} to be an int >= 1, got {value!r}")
        if self.minimum > self.maximum:
            raise ValueError(f"expected minimum <= maximum, got {self.minimum} > {self.maximum}")
        if not 0 <= self.collapse_below <= self.diverse_above:
            raise ValueError("expected 0 <= collapse_below <= diverse_above, got "
                             f"{self.collapse_below} and {self.diverse_above}")

    def clamp(self, interval: int) -> int:
        """``interval`` limited to [minimum, maximum]."""
        return max(self.minimum, min(self.maximum, int(interval)))

    def next(self, current: int, diversities: Sequence[float]) -> int:
        """The interval after a migration, from every island's diversity.

        Args:
            current: the interval used so far.
            diversities: one value per island (non-finite values are ignored).

        Returns:
            ``current // 2`` when an island collapsed, ``current * 2`` when all are
            diverse, else ``current``; always within [minimum, maximum].
        """
        return next_interval(current, diversities, self)

    def next_emigrants(self, current: int, most: int, diversities: Sequence[float]) -> int:
        """The emigrant count after a migration (``current`` when the count does not
        adapt): ``current * 2`` when an island collapsed, ``current // 2`` when all are
        diverse; always within [min(1, most), most]."""
        if not self.emigrants:
            return current
        step = _verdict(diversities, self)
        count = current * 2 if step == "collapsed" else current // 2 if step == "diverse" else current
        return max(min(1, most), min(most, count))


def next_interval(current: int, diversities: Sequence[float], rule: AdaptiveInterval) -> int:
    """See :meth:`AdaptiveInterval.next`."""
    step = _verdict(diversities, rule)
    if step == "collapsed":
        return rule.clamp(current // 2)
    if step == "diverse":
        return rule.clamp(current * 2)
    return rule.clamp(current)


def _verdict(diversities: Sequence[float], rule: AdaptiveInterval) -> str | None:
    """"collapsed" (an island's diversity below ``collapse_below``), "diverse" (every
    one above ``diverse_above``) or None; non-finite values are ignored."""
    values = [float(d) for d in diversities if math.isfinite(float(d))]
    if not values:
        return None
    if min(values) < rule.collapse_below:
        return "collapsed"
    if min(values) > rule.diverse_above:
        return "diverse"
    return None
