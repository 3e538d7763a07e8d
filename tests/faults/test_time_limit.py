"""Wall-clock limits on fitness evaluations (signal and worker-process methods)."""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time

import numpy as np
import pytest
from fault_fitness import dying, failing, mpi_state, sleepy, sphere, spin, swallowing

from mpievo.evo.problem_wrappers import EvaluationError, TimeLimitedFitness


def test_signal_method_returns_values_within_the_limit():
    limited = TimeLimitedFitness(sphere, 5.0, method="signal")
    assert limited(np.array([1.0, 2.0])) == 5.0
    assert np.array_equal(limited.evaluate_many(np.eye(2)), [1.0, 1.0])
    assert (limited.evaluations, limited.timeouts) == (3, 0)


@pytest.mark.parametrize("fitness", [spin, swallowing, sleepy])
def test_signal_method_stops_a_late_evaluation_and_counts_it(fitness, caplog):
    limited = TimeLimitedFitness(fitness, 0.1, method="signal", worst=math.inf)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="mpievo.evo.problem_wrappers"):
        assert limited([5.0]) == math.inf
    assert time.monotonic() - start < 2.0
    assert limited.timeouts == 1 and limited.failures == 1
    assert "exceeded its 0.1 s limit" in caplog.text
    assert limited([0.0]) != math.inf and limited.timeouts == 1  # the next one runs normally


def test_signal_method_restores_the_previous_alarm_handler_and_timer():
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        TimeLimitedFitness(spin, 0.05, method="signal")([1.0])
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_signal_method_reraises_the_fitness_error():
    with pytest.raises(ValueError, match="bad genome"):
        TimeLimitedFitness(failing, 1.0, method="signal")([1.0])


def test_signal_method_outside_the_main_thread_is_refused():
    errors = []
    thread = threading.Thread(target=lambda: _capture(errors, TimeLimitedFitness(sphere, 1.0, method="signal"), [1.0]))
    thread.start()
    thread.join()
    assert len(errors) == 1 and "main thread" in str(errors[0])


def _capture(errors, fn, arg):
    try:
        fn(arg)
    except RuntimeError as err:
        errors.append(err)


def test_process_method_limits_evaluations_and_recovers():
    with TimeLimitedFitness(sleepy, 0.3, method="process", worst=-1.0) as limited:
        assert limited([0.01]) == 0.01
        start = time.monotonic()
        assert limited([30.0]) == -1.0
        assert time.monotonic() - start < 5.0
        assert limited([0.02]) == 0.02  # a fresh worker took over
        assert (limited.evaluations, limited.timeouts, limited.crashes) == (3, 1, 0)


def test_process_method_counts_a_dead_worker_as_failed():
    with TimeLimitedFitness(dying, 5.0, method="process") as limited:
        assert limited([1.0]) == math.inf
        assert limited.crashes == 1 and limited.failures == 1


def test_process_method_reports_fitness_errors_with_traceback():
    with TimeLimitedFitness(failing, 5.0, method="process") as limited:
        with pytest.raises(EvaluationError, match=r"(?s)ValueError: bad genome \[1\.0\]"):
            limited([1.0])


def test_process_worker_never_initialises_mpi_and_parent_env_is_untouched():
    before = os.environ.get("MPI4PY_RC_INITIALIZE")
    with TimeLimitedFitness(mpi_state, 60.0, method="process") as limited:
        assert limited([0.0]) is False
    assert os.environ.get("MPI4PY_RC_INITIALIZE") == before


def test_process_method_needs_a_picklable_fitness():
    with pytest.raises(TypeError, match="picklable fitness.*method='signal'"):
        TimeLimitedFitness(lambda g: 0.0, 1.0, method="process")


@pytest.mark.parametrize("kwargs, words", [
    ({"seconds": 0}, "time limit > 0"), ({"seconds": math.inf}, "finite time limit"),
    ({"seconds": 1, "method": "thread"}, "expected method among \\('process', 'signal'\\), got 'thread'"),
])
def test_invalid_settings_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        TimeLimitedFitness(sphere, **kwargs)
