"""mpievo.evo.pipeline: making child i + 1 overlaps using child i; errors reach the caller."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mpievo.evo.pipeline import pipelined


def test_the_next_child_is_made_while_this_one_is_used_and_the_values_are_in_order():
    made = [threading.Event() for _ in range(4)]
    buffers = [np.empty(3), np.empty(3)]
    rows = np.arange(12.0).reshape(4, 3)
    overlapped = []

    def make(index, slot):
        np.copyto(buffers[slot], rows[index])
        made[index].set()

    def use(index, slot):
        # child index + 1 is made on the helper thread while this one is in use
        overlapped.append(index + 1 == len(rows) or made[index + 1].wait(timeout=5))
        return float(buffers[slot].sum())

    assert pipelined(4, make, use).tolist() == rows.sum(axis=1).tolist()
    assert overlapped == [True] * 4
    assert pipelined(0, make, use).shape == (0,)


@pytest.mark.parametrize("failing", ["make", "use"])
def test_an_error_reaches_the_caller_after_the_helper_is_done(failing):
    calls, names, started = [], set(), threading.Event()

    def make(index, slot):
        names.add(threading.current_thread().name)
        if failing == "make" and index == 2:
            raise ValueError("made badly")
        if index == 1:
            started.set()
            time.sleep(0.05)                # still making child 1 when child 0's use fails
        calls.append(("made", index))

    def use(index, slot):
        calls.append(("use", index))
        if failing == "use" and index == 0:
            started.wait(timeout=5)
            raise ValueError("used badly")
        return 0.0

    with pytest.raises(ValueError, match={"make": "made badly", "use": "used badly"}[failing]):
        pipelined(4, make, use)
    assert all(name.startswith("mpievo-pipeline") for name in names)
    if failing == "make":                   # the child that failed to be made is never used
        assert calls == [("made", 0), ("use", 0), ("made", 1), ("use", 1)]
    else:                                   # the helper finished child 1 before the error was raised
        assert calls == [("made", 0), ("use", 0), ("made", 1)]
