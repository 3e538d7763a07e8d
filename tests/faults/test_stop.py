"""Stop requests: signal handlers that only set a flag, ORed over ranks at generation boundaries."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from mpievo.faults import (DEFAULT_STOP_SIGNALS, EXIT_CHECKPOINTED_REQUEUE, StopRequest, install_stop_handlers,
                           stop_requested_anywhere)


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
        assert not stop_requested_anywhere(None, StopRequest())
        assert stop_requested_anywhere(None, stop)
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


RUN_LOOP = textwrap.dedent("""
    import sys, time
    from mpievo.faults import EXIT_CHECKPOINTED_REQUEUE, install_stop_handlers
    from mpievo.io import CheckpointPolicy, Checkpointer
    stop = install_stop_handlers()
    policy = CheckpointPolicy(every_generations=100000)
    checkpointer = Checkpointer(sys.argv[1])
    x = 0
    print("ready", flush=True)
    for generation in range(1, 10**6):
        x += 1
        time.sleep(0.002)
        decision = policy.agree(None, generation, stop.requested)
        if decision.checkpoint:
            checkpointer.save(generation, {0: {"generation": generation, "x": x}}, config="a = 1\\n")
            policy.mark_written(generation)
        if decision.stop:
            print("stopped", generation, stop.signal_name, flush=True)
            sys.exit(EXIT_CHECKPOINTED_REQUEUE)
""")


def test_sigterm_makes_a_run_loop_checkpoint_and_exit_85(tmp_path):
    from mpievo.io import load_latest

    child = subprocess.Popen([sys.executable, "-c", RUN_LOOP, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == EXIT_CHECKPOINTED_REQUEUE
    word, generation, name = out.split()
    assert word == "stopped" and name == "SIGTERM"
    loaded = load_latest(tmp_path)
    assert loaded.generation == int(generation) and loaded.islands[0]["x"] == int(generation)
