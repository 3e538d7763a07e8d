"""Stop handlers of ``mpievo run`` (issue 31): a second SIGINT/SIGTERM gets the default
action back (it ends the process at once); signals that came while ``python -m mpievo run``
was still importing become a stop request."""

from __future__ import annotations

import os
import signal

import pytest

from mpievo import early_signals
from mpievo.faults import install_stop_handlers


def test_after_a_stop_request_the_abort_signals_have_their_default_action_back():
    before = signal.getsignal(signal.SIGUSR2)
    with install_stop_handlers([signal.SIGUSR1, signal.SIGUSR2], abort_on_repeat=[signal.SIGUSR2]) as stop:
        assert signal.getsignal(signal.SIGUSR2) == stop.handle
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.requested
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL      # the next one ends the process
        assert signal.getsignal(signal.SIGUSR1) == stop.handle         # a repeated request stays one
    assert signal.getsignal(signal.SIGUSR2) == before


def test_abort_signals_must_be_caught_ones():
    with pytest.raises(ValueError, match="expected abort_on_repeat among the caught signals"):
        install_stop_handlers([signal.SIGUSR1], abort_on_repeat=[signal.SIGUSR2])


def test_signals_received_while_importing_become_a_stop_request():
    previous = signal.signal(signal.SIGUSR1, early_signals.record)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert early_signals.received == [signal.SIGUSR1]
        with install_stop_handlers([signal.SIGUSR1]) as stop:
            assert stop.requested and stop.signal_name == "SIGUSR1"
        assert early_signals.received == []
    finally:
        signal.signal(signal.SIGUSR1, previous)
        early_signals.received.clear()


def test_disarmed_takes_a_repeated_signal_as_a_repeat():
    # a run's last collectives: mpiexec's cleanup SIGTERM must not kill a rank still finishing
    with install_stop_handlers([signal.SIGUSR1, signal.SIGUSR2], abort_on_repeat=[signal.SIGUSR2]) as stop:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
        with stop.disarmed():
            assert signal.getsignal(signal.SIGUSR2) == stop.handle
            os.kill(os.getpid(), signal.SIGUSR2)       # would end the process if armed
            assert signal.getsignal(signal.SIGUSR2) == stop.handle
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL     # armed again after the block
