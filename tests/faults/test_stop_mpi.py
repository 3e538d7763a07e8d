"""Stop flags agree over ranks (run under `mpievo launch -n P -- python -m pytest --with-mpi`)."""

from __future__ import annotations

import os
import signal

import pytest

from mpievo.faults import StopRequest, install_stop_handlers, stop_requested_anywhere
from mpievo.io import CheckpointPolicy


@pytest.fixture
def comm():
    from mpievo.comm import Communicator

    return Communicator()


@pytest.mark.mpi(min_size=2)
def test_a_signal_on_one_rank_stops_every_rank(comm):
    with install_stop_handlers() as stop:
        assert not stop_requested_anywhere(comm, stop)
        if comm.rank == comm.size - 1:
            os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.requested == (comm.rank == comm.size - 1)
        assert stop_requested_anywhere(comm, stop)


@pytest.mark.mpi(min_size=2)
def test_every_rank_stops_after_the_same_generation(comm):
    policy = CheckpointPolicy(every_generations=1000)
    stop = StopRequest()
    stopped_at = None
    for generation in range(1, 20):
        if comm.rank == 1 and generation == 7:
            stop.request(signal.SIGTERM)
        decision = policy.agree(comm, generation, stop.requested)
        if decision.stop:
            assert decision.checkpoint
            stopped_at = generation
            break
    assert comm.allgather_object(stopped_at) == [7] * comm.size


@pytest.mark.mpi(min_size=2)
def test_time_rule_is_decided_by_rank_zero(comm):
    policy = CheckpointPolicy(every_seconds=10)
    # rank 0 sees 11 s passed, the others 1 s: rank 0's answer wins everywhere
    now = policy.last_time + (11 if comm.rank == 0 else 1)
    assert policy.due_everywhere(comm, 1, now=now) is True
    assert policy.agree(comm, 1, now=now).checkpoint is True
    later = policy.last_time + (1 if comm.rank == 0 else 11)
    assert policy.due_everywhere(comm, 1, now=later) is False
