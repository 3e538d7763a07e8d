"""The run loop's vote over ranks: a stop flag or rank 0's checkpoint clock on one rank acts
on every rank at the same generation (run under `mpievo launch -n P -- python -m pytest --only-mpi`)."""

from __future__ import annotations

import pytest
from fault_jobs import FakeClock, RecordingCheckpointer, StopAfter, run_loop

from mpi_support import all_ranks_agree
from mpievo.parallel import RunSettings

# a broken vote leaves the ranks in different collectives: fail in bounded time, not hang
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def comm():
    from mpievo.comm import Communicator

    return Communicator()


@pytest.mark.mpi(min_size=2)
def test_a_stop_on_the_last_rank_stops_every_rank_after_the_same_generation(world, comm, tmp_path_factory):
    from mpievo.io import Checkpointer, load_latest

    directory = comm.bcast_object(str(tmp_path_factory.mktemp("stop")) if comm.rank == 0 else None)
    loop, scheme = run_loop(comm, RunSettings(12, log_every=1), checkpointer=Checkpointer(directory, comm=comm))
    loop.stop = StopAfter(scheme, 7, here=comm.rank == comm.size - 1)
    result = loop.run()
    # cast after generation 7, the vote is read after generation 8 on every rank
    ok = result.stopped and result.generations == scheme.generation == 8 and len(result.checkpoints) == 1
    all_ranks_agree(world, ok, f"stopped={result.stopped} at {result.generations}, saved {result.checkpoints}")
    comm.barrier()
    saved = load_latest(directory)
    all_ranks_agree(world, saved.generation == 8 and saved.written_by_ranks == comm.size,
                    f"latest checkpoint at {saved.generation} by {saved.written_by_ranks} ranks")


@pytest.mark.mpi(min_size=2)
def test_rank_zeros_checkpoint_clock_makes_every_rank_save_at_the_same_generation(world, comm, monkeypatch):
    recorder = RecordingCheckpointer()
    loop, scheme = run_loop(comm, RunSettings(12, log_every=4, checkpoint_seconds=100), checkpointer=recorder)
    if comm.rank == 0:   # the period is up during generation 5, then the clock stands still
        now = lambda: 1000.0 if scheme.generation >= 5 else 0.0  # noqa: E731
    else:                # other ranks' clocks do not count: this one would be due every time
        now = lambda: 1000.0 * scheme.generation  # noqa: E731
    monkeypatch.setattr("mpievo.parallel.runner.time", FakeClock(now))
    result = loop.run()
    ok = not result.stopped and recorder.generations == [6, 12]
    all_ranks_agree(world, ok, f"saved at {recorder.generations}")

