"""Stop requests: signal handlers that only set a flag, and the run loop acting on it (one rank)."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from fault_jobs import FakeClock, RecordingCheckpointer, StopAfter, run_loop

from mpievo.faults import DEFAULT_STOP_SIGNALS, EXIT_CHECKPOINTED_REQUEUE, StopRequest, install_stop_handlers
from mpievo.parallel import RunSettings


@pytest.fixture
def comm():
    from mpi4py import MPI

    from mpievo.comm import Communicator

    return Communicator(MPI.COMM_SELF)


def test_requeue_exit_code_is_85():
    assert EXIT_CHECKPOINTED_REQUEUE == 85
    assert set(DEFAULT_STOP_SIGNALS) == {signal.SIGTERM, signal.SIGUSR1}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_signal_sets_the_flag_and_the_process_carries_on(signum):
    before = signal.getsignal(signum)
    with install_stop_handlers() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signum)
        assert stop.requested and stop.signal_name == signal.Signals(signum).name
    assert signal.getsignal(signum) is before


def test_request_and_clear_from_code():
    stop = StopRequest()
    stop.request()
    assert stop.requested and stop.signal_name is None
    stop.clear()
    assert not stop.requested


def test_custom_signal_list_and_existing_flag():
    stop = StopRequest()
    with install_stop_handlers([signal.SIGUSR2], stop) as same:
        assert same is stop
        os.kill(os.getpid(), signal.SIGUSR2)
    assert stop.requested and stop.signal_name == "SIGUSR2"


def test_installing_outside_the_main_thread_is_refused():
    errors = []

    def body():
        try:
            install_stop_handlers()
        except RuntimeError as err:
            errors.append(str(err))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]


class _SignalAt:
    """A reporter that sends ``signum`` to this process when generation ``generation`` is logged."""

    def __init__(self, generation: int, signum: int):
        self.generation, self.signum = generation, signum

    def on_log(self, point) -> None:
        if point.generation == self.generation:
            os.kill(os.getpid(), self.signum)

    def on_finish(self, result) -> None:
        pass


def test_a_signal_stops_the_run_loop_after_the_current_generation_with_a_checkpoint(comm):
    recorder = RecordingCheckpointer()
    with install_stop_handlers([signal.SIGUSR1]) as stop:
        loop, scheme = run_loop(comm, RunSettings(12, log_every=1), stop=stop, checkpointer=recorder,
                                reporters=[_SignalAt(5, signal.SIGUSR1)])
        result = loop.run()
    assert stop.signal_name == "SIGUSR1"
    assert result.stopped and result.generations == scheme.generation == 5
    assert recorder.generations == [5] and result.checkpoints == ["ckpt-5"]


def test_a_stop_at_the_last_generation_completes_the_run(comm):
    recorder = RecordingCheckpointer()
    loop, scheme = run_loop(comm, RunSettings(12, log_every=4), checkpointer=recorder)
    loop.stop = StopAfter(scheme, 12)
    result = loop.run()
    assert not result.stopped and result.generations == 12 and recorder.generations == [12]


def test_a_time_based_checkpoint_is_taken_after_the_generation_that_found_it_due(comm, monkeypatch):
    recorder = RecordingCheckpointer()
    loop, scheme = run_loop(comm, RunSettings(12, log_every=4, checkpoint_seconds=100), checkpointer=recorder)
    # the clock jumps past the period during generation 5, and stands still after that
    monkeypatch.setattr("mpievo.parallel.runner.time", FakeClock(lambda: 1000.0 if scheme.generation >= 5 else 0.0))
    result = loop.run()
    assert not result.stopped and recorder.generations == [5, 12]

