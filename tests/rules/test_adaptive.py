"""Adaptive migration interval: a pure function of the islands' diversities."""

import math

import pytest

from mpievo.rules.adaptive import AdaptiveInterval

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


COUNTING = AdaptiveInterval(minimum=2, maximum=40, collapse_below=0.01, diverse_above=0.1, emigrants=True)


@pytest.mark.parametrize("current, most, diversities, expected", [
    (2, 4, [0.5, 0.005], 4),           # one island collapsed: send more
    (4, 4, [0.005], 4),                # never above the policy's count
    (4, 4, [0.5, 0.2], 2),             # all diverse: send fewer
    (1, 4, [0.5, 0.2], 1),             # never below one
    (3, 4, [0.5, 0.05], 3),            # in between: unchanged
    (0, 0, [0.005], 0),                # a policy of no emigrants stays so
])
def test_next_emigrants(current, most, diversities, expected):
    assert COUNTING.next_emigrants(current, most, diversities) == expected
    assert RULE.next_emigrants(current, most, diversities) == current   # the count does not adapt


def _scheme(rule, emigrants=4):
    from mpievo.comm.protocol import SelfComm
    from mpievo.evo import EngineConfig, MigrationPolicy, make_problem
    from mpievo.parallel import IslandScheme, MigrationSchedule, build_topology

    engines = EngineConfig(capacity=8, batch_size=8).resolve_all(3)
    schedule = MigrationSchedule(build_topology("ring", 3), interval=2, adaptive=rule)
    return IslandScheme(SelfComm(), make_problem("sphere", 4), engines, seed=1,
                        policy=MigrationPolicy(emigrants=emigrants, unique=False), schedule=schedule)


@pytest.mark.parametrize("collapse_below, diverse_above, counts, after", [
    (0.0, 0.0, [4, 2, 1, 1], 1),       # always diverse: 4, then halved down to one
    (1e9, 1e9, [4, 4, 4, 4], 4),       # always collapsed: the policy's count (the most)
])
def test_the_scheme_sends_the_adapted_count(collapse_below, diverse_above, counts, after):
    scheme = _scheme(AdaptiveInterval(2, 2, collapse_below, diverse_above, emigrants=True))
    scheme.initialize()
    sent = []
    while len(sent) < len(counts):
        step = scheme.step()
        if step.migration is not None:
            sent.append(step.migration.sent // 3)      # per edge of the 3-island ring
    assert sent == counts
    assert scheme.run_state()["emigrants"] == after


def test_the_count_is_saved_and_restored():
    scheme = _scheme(AdaptiveInterval(2, 2, 0.0, 0.0, emigrants=True))
    scheme.initialize()
    while scheme.migrations < 2:
        scheme.step()
    state, islands = scheme.run_state(), scheme.island_states()
    assert state["emigrants"] == 1
    again = _scheme(AdaptiveInterval(2, 2, 0.0, 0.0, emigrants=True))
    again.restore(islands, state)
    assert again.emigrants == 1
    old = {k: v for k, v in state.items() if k != "emigrants"}   # a checkpoint from before
    again.restore(islands, old)
    assert again.emigrants == 4
