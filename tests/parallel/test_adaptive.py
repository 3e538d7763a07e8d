"""Adaptive migration interval: a pure function of the islands' diversities."""

import math

import pytest

from mpievo.parallel.adaptive import AdaptiveInterval

RULE = AdaptiveInterval(minimum=2, maximum=40, collapse_below=0.01, diverse_above=0.1)


@pytest.mark.parametrize("current, diversities, expected", [
    (10, [0.5, 0.005, 0.5], 5),        # one island collapsed: migrate sooner
    (3, [0.001], 2),                   # never below the minimum
    (10, [0.5, 0.2], 20),              # all diverse: migrate later
    (30, [0.5, 0.2], 40),              # never above the maximum
    (10, [0.5, 0.05], 10),             # in between: unchanged
    (10, [math.nan, 0.5], 20),         # non-finite values are ignored
    (10, [math.nan], 10),
])
def test_next_interval(current, diversities, expected):
    assert RULE.next(current, diversities) == expected


def test_rule_validation():
    with pytest.raises(ValueError, match="minimum <= maximum"):
        AdaptiveInterval(5, 2, 0.0, 1.0)
    with pytest.raises(ValueError, match="collapse_below <= diverse_above"):
        AdaptiveInterval(1, 2, 1.0, 0.5)
    with pytest.raises(ValueError, match="minimum to be an int >= 1"):
        AdaptiveInterval(0, 2, 0.0, 0.5)
