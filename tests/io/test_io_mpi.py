"""Checkpoints written by several ranks and loaded on any number of ranks.

Run with `mpievo launch -n P -- python -m pytest --with-mpi --only-mpi tests/io` (P = 2, 4).
Every check is combined over ranks with ``all_ranks_agree`` so that a failure on one
rank fails all of them instead of leaving the others in a collective.
"""

from __future__ import annotations

import traceback
import warnings

import pytest
from mpi_support import all_ranks_agree
from io_helpers import assert_trees_equal, flip_data_byte, make_island

import mpievo.io.checkpointer as checkpointer_module
from mpievo.io import (CheckpointWarning, Checkpointer, CheckpointWriteError, load_latest, read_manifest)

CONFIG = "[run]\nislands = 7\n"


@pytest.fixture
def comm():
    from mpievo.comm import Communicator

    return Communicator()


def island_count(comm):
    return 2 * comm.size + 1  # uneven: some ranks host one more island


def hosted(comm, generation):
    """Round-robin placement: rank r hosts islands r, r + P, ..."""
    return {i: make_island(i, generation) for i in range(island_count(comm)) if i % comm.size == comm.rank}


def save_run(comm, directory, generations=(3, 6), keep=3):
    checkpointer = Checkpointer(directory, keep=keep, comm=comm)
    return [checkpointer.save(g, hosted(comm, g), config=CONFIG, run_state={"generation": g}) for g in generations]


def check(world, body):
    """Run ``body`` on every rank; fail all ranks when it fails on any."""
    try:
        body()
        ok, detail = True, ""
    except Exception:
        ok, detail = False, traceback.format_exc()
    all_ranks_agree(world, ok, detail)


@pytest.mark.mpi(min_size=2)
def test_every_rank_writes_its_islands_and_gets_the_same_info(comm, world, mpi_tmp_path):
    infos = save_run(comm, mpi_tmp_path)
    same = comm.allgather_object(infos[-1])

    def body():
        assert all(info == infos[-1] for info in same)
        entry = read_manifest(mpi_tmp_path)[-1]
        assert entry.name == infos[-1].name and entry.nranks == comm.size
        assert entry.islands == tuple(range(island_count(comm)))
        assert sorted(f.rank for f in entry.files) == list(range(comm.size))
        assert entry.file_of_island()[comm.rank].rank == comm.rank

    check(world, body)


@pytest.mark.mpi(min_size=2)
def test_collective_load_with_a_different_layout(comm, world, mpi_tmp_path):
    save_run(comm, mpi_tmp_path)
    total = island_count(comm)
    # block placement, reversed rank order: nothing like the round-robin that wrote it
    mine = [i for i in range(total) if (total - 1 - i) * comm.size // total == comm.rank]
    loaded = load_latest(mpi_tmp_path, islands=mine, comm=comm)

    def body():
        assert loaded.generation == 6 and sorted(loaded.islands) == mine
        for index in mine:
            assert_trees_equal(loaded.islands[index], make_island(index, 6))
        assert loaded.run_state == {"generation": 6} and loaded.written_by_ranks == comm.size

    check(world, body)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("virtual_ranks", [1, 3, 5])
def test_load_on_another_number_of_ranks(comm, world, mpi_tmp_path, virtual_ranks):
    save_run(comm, mpi_tmp_path)

    def body():
        seen = {}
        for virtual in range(virtual_ranks):  # each "rank" of a smaller or larger job
            loaded = load_latest(mpi_tmp_path, islands=lambda every: every[virtual::virtual_ranks])
            seen.update(loaded.islands)
        assert sorted(seen) == list(range(island_count(comm)))
        for index, state in seen.items():
            assert_trees_equal(state, make_island(index, 6))

    check(world, body)


@pytest.mark.mpi(min_size=2)
def test_manifest_names_the_checkpoint_only_after_every_rank_wrote(comm, world, mpi_tmp_path, monkeypatch):
    first = save_run(comm, mpi_tmp_path, generations=(1,))[0]
    observed = []
    real_write = checkpointer_module.write_checkpoint_file

    def slow_last_rank(path, **kwargs):
        header = real_write(path, **kwargs)
        # this rank's file is complete, but rank 0 cannot have seen it yet
        observed.append([e.name for e in read_manifest(mpi_tmp_path)])
        return header

    if comm.rank == comm.size - 1:
        monkeypatch.setattr(checkpointer_module, "write_checkpoint_file", slow_last_rank)
    second = Checkpointer(mpi_tmp_path, comm=comm).save(2, hosted(comm, 2), config=CONFIG)

    def body():
        if comm.rank == comm.size - 1:
            assert observed == [[first.name]]
        assert [e.name for e in read_manifest(mpi_tmp_path)] == [first.name, second.name]

    check(world, body)


@pytest.mark.mpi(min_size=2)
def test_failure_on_one_rank_fails_every_rank_and_keeps_the_previous(comm, world, mpi_tmp_path):
    good = save_run(comm, mpi_tmp_path, generations=(1,))[0]
    islands = hosted(comm, 2)
    if comm.rank == 1:
        islands[1]["bad"] = {1, 2}  # a set is not storable
    raised = None
    try:
        Checkpointer(mpi_tmp_path, comm=comm).save(2, islands, config=CONFIG)
    except CheckpointWriteError as err:
        raised = str(err)
    comm.barrier()
    loaded = load_latest(mpi_tmp_path, islands=[comm.rank], comm=comm)

    def body():
        assert raised is not None and "rank 1: TreeError" in raised
        assert [e.name for e in read_manifest(mpi_tmp_path)] == [good.name]
        assert sorted(p.name for p in mpi_tmp_path.iterdir() if p.is_dir()) == [good.name]
        assert loaded.name == good.name

    check(world, body)


@pytest.mark.mpi(min_size=2)
def test_damage_seen_by_one_rank_moves_every_rank_to_the_previous(comm, world, mpi_tmp_path):
    good, bad = save_run(comm, mpi_tmp_path, generations=(3, 6))
    last = comm.size - 1
    if comm.rank == 0:
        flip_data_byte(mpi_tmp_path / bad.name / f"rank-{last:05d}-of-{comm.size:05d}.h5", f"islands/{last}/genomes")
    comm.barrier()
    # only the last rank reads the damaged island; the others would find their files fine
    wanted = [last] if comm.rank == last else [i for i in range(island_count(comm)) if i % comm.size != last]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = load_latest(mpi_tmp_path, islands=wanted, comm=comm)
    names = comm.allgather_object(loaded.name)

    def body():
        assert names == [good.name] * comm.size
        assert len(loaded.skipped) == 1 and "damaged" in loaded.skipped[0]
        ours = [w for w in caught if issubclass(w.category, CheckpointWarning)]
        assert len(ours) == (1 if comm.rank == 0 else 0)
        for index in wanted:
            assert_trees_equal(loaded.islands[index], make_island(index, 3))

    check(world, body)


@pytest.mark.mpi(min_size=2)
def test_keep_last_k_with_many_ranks(comm, world, mpi_tmp_path):
    infos = save_run(comm, mpi_tmp_path, generations=(1, 2, 3, 4), keep=2)

    def body():
        assert [e.name for e in read_manifest(mpi_tmp_path)] == [i.name for i in infos[-2:]]
        assert sorted(p.name for p in mpi_tmp_path.iterdir() if p.is_dir()) == [i.name for i in infos[-2:]]

    check(world, body)
