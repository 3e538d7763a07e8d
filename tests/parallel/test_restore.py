"""Checkpoint contract of the run loop: island states out, the same run back in."""

import pytest
from mpi4py import MPI
from parallel_helpers import StopAt, small_job, states_digest

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.io import Checkpointer, load_latest
from mpievo.parallel import RunLoop, RunSettings, best_genome_bytes, build_scheme, run_job
from state_trees import through_hdf5, trees_equal

FEATURES = {"migration": {"topology": "random", "selection": "random", "interval": 2,
                          "adaptive": {"enabled": True, "minimum": 1, "maximum": 5}},
            "engine": {"algorithm": ["ga", "de", "cmaes", "ga"]}}


def test_an_island_state_is_the_tree_a_checkpoint_stores():
    """One shape from the island to the file: the scheme hands the islands' trees on as they are."""
    scheme = build_scheme(Communicator(MPI.COMM_SELF), small_job(1, **FEATURES))
    scheme.initialize()
    scheme.step()
    states = scheme.island_states()
    assert sorted(states) == [0, 1, 2, 3]
    for index, state in states.items():
        assert set(state) == {"format", "island", "algorithm", "archive"} and state["island"]["index"] == index
        assert trees_equal(through_hdf5(state), state)


def test_restored_scheme_continues_exactly():
    comm = Communicator(MPI.COMM_SELF)
    job = small_job(1, **FEATURES)
    straight = build_scheme(comm, job)
    straight.initialize()
    for _ in range(20):
        straight.step()
    first = build_scheme(comm, job)
    first.initialize()
    for _ in range(9):
        first.step()
    saved_islands, saved_run = first.island_states(), first.run_state()
    second = build_scheme(comm, job)
    second.restore(saved_islands, saved_run)
    for _ in range(11):
        second.step()
    assert states_digest(second.island_states()) == states_digest(straight.island_states())
    assert second.run_state() == straight.run_state()


def test_restore_refuses_a_foreign_state():
    comm = Communicator(MPI.COMM_SELF)
    scheme = build_scheme(comm, small_job(1))
    scheme.initialize()
    islands, run = scheme.island_states(), scheme.run_state()
    with pytest.raises(ValueError, match="n_islands = 4"):
        build_scheme(comm, small_job(1)).restore(islands, {**run, "n_islands": 5})
    with pytest.raises(ValueError, match=r"islands \[0, 1, 2, 3\]"):
        build_scheme(comm, small_job(1)).restore({0: islands[0]}, run)


@pytest.mark.mpi(min_size=1)
def test_stop_checkpoint_and_resume_on_another_rank_count(world, tmp_path_factory):
    comm = Communicator(world)
    job = small_job(comm.size, **FEATURES)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    scheme = build_scheme(comm, job)
    loop = RunLoop(comm, scheme, RunSettings(job.run.generations, 5), config=job.config,
                   checkpointer=Checkpointer(directory, comm=comm), stop=StopAt(scheme, 7, comm.rank))
    stopped = loop.run()
    # the flag rises after generation 7 on rank 0 only; the vote cast then is read one
    # generation later (at once on one rank), alike on every rank
    expected = 7 if comm.size == 1 else 8
    all_ranks_agree(world, stopped.stopped and stopped.generations == expected,
                    f"stopped={stopped.stopped} at {stopped.generations}, expected {expected}")
    comm.barrier()
    if comm.rank == 0:   # resume all islands in one process (a different rank count)
        ckpt = load_latest(directory)
        one = Communicator(MPI.COMM_SELF)
        resumed = run_job(small_job(1, **FEATURES), one, restored=ckpt)
        straight = run_job(small_job(1, **FEATURES), one)
        same = ckpt.generation == stopped.generations and \
            best_genome_bytes(resumed) == best_genome_bytes(straight)
    else:
        same = True
    all_ranks_agree(world, same, "resumed run differs from the uninterrupted one")


def test_stop_without_checkpointer_just_stops():
    comm = Communicator(MPI.COMM_SELF)
    job = small_job(1)
    scheme = build_scheme(comm, job)
    result = RunLoop(comm, scheme, RunSettings(20, 5), stop=StopAt(scheme, 4, 0)).run()
    assert result.stopped and result.generations == 4 and result.checkpoints == []


class _RecordingCheckpointer:
    """Stands in for mpievo.io.Checkpointer: records the generations saved."""

    def __init__(self):
        self.generations = []

    def save(self, generation, islands, *, config=None, run_state=None):
        self.generations.append(generation)
        return f"ckpt-{generation}"


@pytest.mark.mpi(min_size=1)
def test_time_based_checkpoints_land_at_the_same_generation_everywhere(world):
    comm = Communicator()
    job = small_job(comm.size)
    recorder = _RecordingCheckpointer()
    # a period far below one generation: due at every vote, one generation after it is cast
    settings = RunSettings(12, 4, checkpoint_every=0, checkpoint_seconds=1e-9)
    result = RunLoop(comm, build_scheme(comm, job), settings, checkpointer=recorder,
                     config=job.config).run()
    plain = RunLoop(comm, build_scheme(comm, job), RunSettings(12, 4)).run()
    everyone = comm.allgather_object(recorder.generations)
    ok = (len(recorder.generations) >= 3 and all(g == everyone[0] for g in everyone)
          and recorder.generations[-1] == 12 and len(set(recorder.generations)) == len(recorder.generations)
          and best_genome_bytes(result) == best_genome_bytes(plain))
    all_ranks_agree(world, ok, f"saved at {recorder.generations}")


def test_checkpoint_seconds_must_be_non_negative():
    with pytest.raises(ValueError, match=r"expected checkpoint_seconds to be a number >= 0, got -1"):
        RunSettings(10, checkpoint_seconds=-1)
