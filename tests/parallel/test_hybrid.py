"""Islands over groups of ranks (run.ranks_per_island): layout, bit-identical results
against one rank per island, checkpoints resumed with another group layout."""

import os
from types import SimpleNamespace

import pytest
from mpi4py import MPI
from parallel_helpers import small_job, states_digest, stop_and_checkpoint

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError, validate
from mpievo.io import load_latest
from mpievo.parallel import best_genome_bytes, build_scheme, run_job
from mpievo.parallel.groups import GroupLayout, group_layout, row_blocks, scheme_layout
from mpievo.parallel.hybrid import HybridScheme

FEATURES = {"migration": {"topology": "random", "selection": "random", "interval": 2,
                          "adaptive": {"enabled": True, "minimum": 1, "maximum": 5}},
            "engine": {"algorithm": ["ga", "de", "cmaes", "ga"]}}


def test_row_blocks_cover_the_batch_in_order():
    assert row_blocks(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert row_blocks(1, 3) == [(0, 1), (1, 1), (1, 1)]


def test_groups_of_k_ranks_and_their_islands():
    layouts = [group_layout(SimpleNamespace(rank=r, size=6), 3) for r in range(6)]
    assert layouts[4].groups == ((0, 1, 2), (3, 4, 5)) and layouts[4].group_index == 1
    assert [lay.leader for lay in layouts] == [True, False, False, True, False, False]
    assert [lay.islands(5) for lay in layouts] == [[0, 1, 2], [], [], [3, 4], [], []]
    assert group_layout(SimpleNamespace(rank=0, size=2), 1).trivial
    assert GroupLayout(((0,), (1, 2)), 0).islands(2) == [0]
    with pytest.raises(ValueError, match=r"expected at least one island per group of ranks \(>= 2 islands\), got 1"):
        layouts[0].islands(1)
    with pytest.raises(ValueError, match="expected a rank count divisible by ranks_per_island = 4, got 6 ranks"):
        group_layout(SimpleNamespace(rank=0, size=6), 4)
    with pytest.raises(ValueError, match="expected ranks_per_island to be an int >= 1 or 'node', got 'gpu'"):
        group_layout(SimpleNamespace(rank=0, size=6), "gpu")
    assert group_layout(SelfComm(), "node").trivial
    central = scheme_layout(SimpleNamespace(rank=2, size=3), validate({"run": {"scheme": "centralized"}}, 3).run)
    assert central.groups == ((0, 1, 2),) and not central.leader and central.islands(1) == []


@pytest.mark.parametrize("run, nranks, message", [
    ({"ranks_per_island": 2}, 4, "run.ranks_per_island: expected 1 with run.scheme = 'island' "
     r"\(groups of ranks are the hybrid scheme\), got 2"),
    ({"scheme": "centralized", "ranks_per_island": "node"}, 4,
     "run.ranks_per_island: expected 1 with run.scheme = 'centralized'"),
    ({"scheme": "ring"}, 4,
     r"run.scheme: expected one of \['island', 'hybrid', 'centralized', 'replicated', 'master_worker'\], "
     "got str 'ring'"),
    ({"scheme": "hybrid", "ranks_per_island": 3}, 4,
     "run.ranks_per_island: expected a divisor of the 4 ranks, got 3"),
    ({"ranks_per_island": 0}, 4, 'run.ranks_per_island: expected an int >= 1 or "node", got 0'),
    ({"ranks_per_island": "all"}, 4, 'run.ranks_per_island: expected an int >= 1 or "node", got str \'all\''),
    ({"scheme": "hybrid", "ranks_per_island": 2, "islands": 1}, 4,
     r"run.islands: expected at least one island per group of ranks \(>= 2 groups\), got 1"),
])
def test_ranks_per_island_is_checked(run, nranks, message):
    with pytest.raises(ConfigError, match=message):
        validate({"run": run}, nranks)


def test_islands_default_to_one_per_group():
    assert validate({"run": {"scheme": "hybrid", "ranks_per_island": 2}}, 4).run.islands == 2
    assert validate({"run": {"scheme": "hybrid", "ranks_per_island": "node"}}, 4).run.islands == 4
    assert validate({"run": {"scheme": "centralized"}}, 4).run.islands == 1


def _even(world):
    if world.Get_size() % 2:
        pytest.skip("groups of 2 ranks need an even rank count")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("tables", [{}, FEATURES], ids=["default", "all-features"])
def test_groups_give_the_serial_result_bit_for_bit(world, tables):
    _even(world)
    comm = Communicator(world)
    job = small_job(comm.size, run={"scheme": "hybrid", "ranks_per_island": 2}, **tables)
    scheme = build_scheme(comm, job)
    layout = scheme.layout
    held = isinstance(scheme, HybridScheme) and layout.islands(4) == (
        scheme.inner.local_indices if layout.leader else [])
    scheme.close()
    hybrid = run_job(job, comm)
    serial = run_job(small_job(1, **tables), SelfComm())
    ok = held and (hybrid.generations == serial.generations and hybrid.migrations == serial.migrations
          and hybrid.evaluations == serial.evaluations)
    if comm.rank == 0:
        ok = ok and best_genome_bytes(hybrid) == best_genome_bytes(serial) \
            and hybrid.best_fitness == serial.best_fitness and hybrid.islands == serial.islands
    all_ranks_agree(world, ok, "hybrid differs from serial")


@pytest.mark.mpi(min_size=2)
def test_node_groups_from_fake_nodes(world):
    _even(world)
    os.environ["MPIEVO_FAKE_NODES"] = "2"      # two nodes of size/2 consecutive ranks
    try:
        comm = Communicator(world)
    finally:
        del os.environ["MPIEVO_FAKE_NODES"]
    half = comm.size // 2
    job = small_job(comm.size, run={"scheme": "hybrid", "ranks_per_island": "node"})
    layout = group_layout(comm, "node")
    node = run_job(job, comm)
    serial = run_job(small_job(1), SelfComm())
    ok = layout.groups == (tuple(range(half)), tuple(range(half, comm.size)))
    if comm.rank == 0:
        ok = ok and best_genome_bytes(node) == best_genome_bytes(serial)
    all_ranks_agree(world, ok, f"node groups {layout.groups}")



@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("before, after", [(2, 1), (1, 2)], ids=["2x2-to-1", "1-to-2x2"])
def test_resume_with_another_group_layout(world, tmp_path_factory, before, after):
    _even(world)
    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    before_job = small_job(comm.size, run={"scheme": "hybrid", "ranks_per_island": before}, **FEATURES)
    stopped = stop_and_checkpoint(comm, before_job, directory)
    job = small_job(comm.size, run={"scheme": "hybrid", "ranks_per_island": after}, **FEATURES)
    mine = group_layout(comm, after).islands(job.n_islands)
    restored = load_latest(directory, islands=mine, comm=comm)
    resumed = run_job(job, comm, restored=restored)
    straight = run_job(small_job(1, **FEATURES), SelfComm())
    ok = stopped.stopped and restored.generation == stopped.generations and sorted(restored.islands) == mine
    if comm.rank == 0:
        ok = ok and best_genome_bytes(resumed) == best_genome_bytes(straight)
    all_ranks_agree(world, ok, f"resumed {before} -> {after} ranks per island differs")


@pytest.mark.mpi(min_size=2)
def test_islands_live_on_leaders_only_and_match_the_serial_ones(world):
    _even(world)
    comm = Communicator(world)
    scheme = build_scheme(comm, small_job(comm.size, run={"scheme": "hybrid", "ranks_per_island": 2}))
    scheme.initialize()
    for _ in range(6):
        scheme.step()
    parts = comm.gather_object(scheme.island_states())
    run_states = comm.allgather_object(scheme.run_state())
    # every rank of a group evaluates; only leaders have the leaders' communicator
    ok = scheme.group.traffic.get("evaluation", 0) > 0 and (scheme.leaders is None) != scheme.layout.leader
    scheme.close()
    serial = build_scheme(SelfComm(), small_job(1))
    serial.initialize()
    for _ in range(6):
        serial.step()
    ok = ok and all(r == serial.run_state() for r in run_states)
    if comm.rank == 0:
        merged = {i: state for part in parts for i, state in part.items()}
        ok = ok and all(part == {} for part in parts[1::2]) and sorted(merged) == [0, 1, 2, 3] \
            and states_digest(merged) == states_digest(serial.island_states())
    all_ranks_agree(world, ok, "islands off leaders, or states that differ from the serial run")


@pytest.mark.mpi(min_size=1)
def test_centralized_gives_the_serial_result_and_resumes_as_islands(world, tmp_path_factory):
    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    central = {"scheme": "centralized", "islands": 4}
    scheme = build_scheme(comm, small_job(comm.size, run=central, **FEATURES))
    # rank 0 holds every island, the other ranks only evaluate
    held = comm.size == 1 or (scheme.inner.local_indices == [0, 1, 2, 3] if comm.rank == 0
                              else scheme.inner is None)
    getattr(scheme, "close", lambda: None)()
    whole = run_job(small_job(comm.size, run=central, **FEATURES), comm)
    stopped = stop_and_checkpoint(comm, small_job(comm.size, run=central, **FEATURES), directory)
    serial = run_job(small_job(1, **FEATURES), SelfComm())
    ok = held and stopped.stopped and whole.evaluations == serial.evaluations
    if comm.rank == 0:    # resume the centralized checkpoint as 4 islands in one process
        resumed = run_job(small_job(1, **FEATURES), SelfComm(), restored=load_latest(directory))
        ok = ok and best_genome_bytes(whole) == best_genome_bytes(serial) == best_genome_bytes(resumed)
    all_ranks_agree(world, ok, "centralized differs from serial")
