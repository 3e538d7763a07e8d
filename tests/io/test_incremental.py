"""Issue 40, item 5: incremental checkpoints (rows referenced, not written again) written in
the background from a snapshot; files readable with h5py alone; damage to a referenced
file named; an interrupt during a background write leaves the previous checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import h5py
import ml_dtypes
import numpy as np
import pytest
from io_helpers import flip_data_byte

from mpievo.evo.archive import Archive
from mpievo.io import Checkpointer, CheckpointWarning, load_latest, verify_checkpoint
from mpievo.io.loader import existing_entries

DIM = 8192          # bfloat16: 16 KiB rows (min_row_bytes=0 makes them incremental)
ROW_BYTES = DIM * 2


def archive_of(rows: int = 8, seed: int = 0) -> Archive:
    archive = Archive(rows, DIM, "bfloat16", island=0)
    rng = np.random.default_rng(seed)
    archive.replace(np.arange(rows), rng.standard_normal((rows, DIM)), np.arange(rows, dtype=float) + 10,
                    np.arange(rows), 0, 0)
    return archive


def states(archive: Archive) -> dict:
    return {0: {"archive": archive.state_dict(copy=False), "note": "x"}}


def change(archive: Archive, count: int, seed: int = 1) -> None:
    """``count`` better children replace the worst members."""
    rng = np.random.default_rng(seed)
    archive.insert(rng.standard_normal((count, DIM)), np.arange(count) - 100.0, 1000 + np.arange(count), 0, 1)


def two_checkpoints(directory, changed: int):
    """(archive, checkpointer, first info, second info): a checkpoint, ``changed`` rows
    changed, and an incremental one."""
    archive = archive_of()
    checkpointer = Checkpointer(directory, keep=3, min_row_bytes=0)
    first = checkpointer.save(1, states(archive), config="a = 1")
    change(archive, changed)
    return archive, checkpointer, first, checkpointer.save(2, states(archive), config="a = 1")


def bits(array) -> np.ndarray:
    return np.asarray(array).view(np.uint16)


def test_row_versions_change_only_where_rows_are_written():
    archive = archive_of()
    before = archive.row_versions()
    assert len(set(before.tolist())) == 8
    change(archive, 2)                                   # insert: the two worst slots
    after = archive.row_versions()
    assert (after != before).sum() == 2 and set(np.flatnonzero(after != before)) == {6, 7}
    kids = np.random.default_rng(3).standard_normal((3, DIM)).astype(ml_dtypes.bfloat16)
    entered, _, _ = archive.insert_children(kids, np.array([-500.0, 1e9, 1e9]), 5000, 2)
    third = archive.row_versions()
    assert entered == 1 and (third != after).sum() == 1
    order = archive.ranking()[:5]
    moved = third[order]
    archive.retain(order)                                # rows move with their versions
    assert np.array_equal(archive.row_versions(), moved)
    rows = archive.state_dict(copy=False)["genomes"]
    assert np.array_equal(rows.row_versions, moved) and not rows.flags.writeable


def test_the_second_checkpoint_writes_only_the_changed_rows(tmp_path):
    archive, checkpointer, first, second = two_checkpoints(tmp_path, 2)
    assert first.new_row_bytes == 8 * ROW_BYTES and first.referenced_row_bytes == 0
    assert second.new_row_bytes == 2 * ROW_BYTES and second.referenced_row_bytes == 6 * ROW_BYTES
    size = lambda info: info.files[0].size_bytes  # noqa: E731
    assert size(first) - size(second) > 5 * ROW_BYTES
    assert [r.path for r in second.files[0].references] == [first.files[0].path]
    # a third one with nothing changed writes no row, and still reads back exactly
    third = checkpointer.save(3, states(archive), config="a = 1")
    assert third.new_row_bytes == 0
    loaded = load_latest(tmp_path)
    assert np.array_equal(bits(loaded.islands[0]["archive"]["genomes"]), bits(archive.genomes))
    assert loaded.islands[0]["archive"]["genomes"].dtype == archive.dtype


def test_without_incremental_or_with_small_rows_every_row_is_written(tmp_path):
    archive = archive_of()
    for kwargs in ({"incremental": False, "min_row_bytes": 0}, {}):    # default: rows below 64 KiB whole
        checkpointer = Checkpointer(tmp_path / str(len(kwargs)), **kwargs)
        checkpointer.save(1, states(archive), config="a = 1")
        info = checkpointer.save(2, states(archive), config="a = 1")
        assert info.new_row_bytes == 0 and info.files[0].references == ()
        with h5py.File(tmp_path / str(len(kwargs)) / info.files[0].path) as handle:
            assert not handle["islands/0/archive/genomes"].is_virtual


def test_files_resolve_with_plain_h5py_from_any_directory(tmp_path, monkeypatch):
    archive, _, first, second = two_checkpoints(tmp_path / "run", 3)
    monkeypatch.chdir(tmp_path.parent)     # HDF5 finds the earlier file from the file's own directory
    with h5py.File(tmp_path / "run" / second.files[0].path, "r") as handle:
        dataset = handle["islands/0/archive/genomes"]
        files = {source.file_name for source in dataset.virtual_sources()}
        assert dataset.is_virtual and files == {".", "../" + first.files[0].path}
        assert np.array_equal(dataset[...], bits(archive.genomes))
        assert dataset.attrs["mpievo_dtype"] == "bfloat16" and handle.attrs["format_version"] == 2


def test_a_background_write_takes_a_snapshot_and_changes_nothing(tmp_path, monkeypatch):
    import mpievo.io.rows as rows

    archive, twin = archive_of(), archive_of()
    background = Checkpointer(tmp_path / "bg", min_row_bytes=0)
    plain = Checkpointer(tmp_path / "fg", min_row_bytes=0, incremental=False)
    background.save(1, states(archive), config="a = 1")
    change(archive, 2, seed=4)
    expected = bits(archive.genomes).copy()
    gate, real = threading.Event(), rows._write_row
    monkeypatch.setattr(rows, "_write_row", lambda *args: gate.wait(10) and real(*args))
    name = background.save_background(2, states(archive), config="a = 1")
    overwrite = lambda a: a.replace([6, 7], np.zeros((2, DIM)), [0.0, 0.0], [1, 2], 0, 3)  # noqa: E731
    overwrite(archive)          # the run goes on while the thread writes: the very rows it writes
    assert background.busy and not background.written()
    gate.set()
    info = background.wait()
    assert info.name == name and not background.busy and background.wait() is None
    assert np.array_equal(bits(load_latest(tmp_path / "bg").islands[0]["archive"]["genomes"]), expected)
    change(twin, 2, seed=4)
    overwrite(twin)
    plain.save(1, states(twin), config="a = 1")
    assert np.array_equal(bits(twin.genomes), bits(archive.genomes))   # writing changed no member


def test_a_deleted_or_damaged_referenced_file_is_named(tmp_path):
    archive, checkpointer, first, _ = two_checkpoints(tmp_path, 1)
    change(archive, 1, seed=5)
    latest = checkpointer.save(3, states(archive), config="a = 1")
    earlier = tmp_path / first.files[0].path
    entry = existing_entries(tmp_path)[0][-1]
    assert entry.name == latest.name and verify_checkpoint(tmp_path, entry) == []
    flip_data_byte(earlier, "rows/islands/0/archive/genomes", offset=3 * ROW_BYTES + 5)
    problems = verify_checkpoint(tmp_path, entry)
    assert problems and str(earlier) in problems[0] and "reads rows from a damaged file" in problems[0]
    earlier.unlink()
    problems = verify_checkpoint(tmp_path, entry)
    assert problems and f"reads rows from {earlier}, which is missing" in problems[0]
    with pytest.warns(CheckpointWarning, match="which is missing"):
        with pytest.raises(Exception, match="no usable checkpoint"):
            load_latest(tmp_path)      # every kept checkpoint needs the deleted file


def test_a_row_that_differs_from_its_digest_is_named_by_h5py_reading(tmp_path):
    """Without the byte check (h5py reading the section): the row and its file are named."""
    from mpievo.io.files import read_checkpoint_file

    archive, checkpointer, first, second = two_checkpoints(tmp_path, 1)
    earlier = tmp_path / first.files[0].path
    flip_data_byte(earlier, "rows/islands/0/archive/genomes", offset=ROW_BYTES + 1)
    import mpievo.io.files as files

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "check_references", lambda *a: None)
        with pytest.raises(Exception, match=f"row 1 \\(stored in {first.files[0].path}\\) differs"):
            read_checkpoint_file(tmp_path / second.files[0].path)


def test_old_rows_are_written_again_so_pruning_keeps_what_is_read(tmp_path):
    archive = archive_of()
    checkpointer = Checkpointer(tmp_path, keep=2, min_row_bytes=0)
    infos = [checkpointer.save(g, states(archive), config="a = 1") for g in range(1, 5)]
    # keep = 2: a checkpoint reads rows only from the one before it, which reads none
    assert [i.new_row_bytes // ROW_BYTES for i in infos] == [8, 0, 8, 0]
    on_disk = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert on_disk == [infos[2].name, infos[3].name]
    assert np.array_equal(bits(load_latest(tmp_path).islands[0]["archive"]["genomes"]), bits(archive.genomes))


INTERRUPTED = textwrap.dedent("""
    import threading
    import numpy as np
    from mpievo.evo.archive_records import VersionedRows
    from mpievo.io import Checkpointer
    import mpievo.io.rows as rows

    genomes = np.arange(8 * {dim}, dtype=np.float32).reshape(8, {dim})
    state = lambda versions: {{0: {{"archive": {{"genomes": VersionedRows.of(genomes, versions)}}}}}}
    checkpointer = Checkpointer({directory!r}, min_row_bytes=0)
    checkpointer.save(1, state(np.arange(8)), config="a = 1")
    real = rows._write_row
    calls = []
    def stalled(*args):
        digest = real(*args)
        calls.append(1)
        if len(calls) == 2:         # two rows written: tell the test, then never finish
            print("writing", flush=True)
            threading.Event().wait()
        return digest
    rows._write_row = stalled
    checkpointer.save_background(2, state(np.arange(8) + 5), config="a = 1")
    checkpointer.wait()
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_during_a_background_write_leaves_the_previous_checkpoint(tmp_path, signum):
    script = INTERRUPTED.format(dim=DIM, directory=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=tmp_path)
    try:
        assert child.stdout.readline().strip() == "writing", child.stderr.read()
        os.kill(child.pid, signum)
        child.wait(timeout=30)
    finally:
        child.kill()
    assert child.returncode != 0
    assert any(p.name.startswith("rank-") and ".tmp-" in p.name for p in tmp_path.glob("ckpt-000002-*/*"))
    latest = load_latest(tmp_path)
    assert latest.name.startswith("ckpt-000001-") and not latest.skipped
    assert verify_checkpoint(tmp_path, latest.entry) == []
    # the next run's checkpointer writes past the leftover and removes it
    archive = archive_of()
    again = Checkpointer(tmp_path, keep=1, min_row_bytes=0).save(5, states(archive), config="a = 1")
    assert again.name.startswith("ckpt-000003-") and not list(tmp_path.glob("ckpt-000002-*"))


def test_inspect_names_the_files_a_checkpoint_reads_rows_from(tmp_path):
    from mpievo.cli.inspect import collect, render

    archive, checkpointer, first, second = two_checkpoints(tmp_path, 2)
    report = collect(tmp_path)
    assert report["exit_code"] == 0 and [c["references"] for c in report["checkpoints"]] == [[], [first.files[0].path]]
    assert f"reads unchanged archive rows from {first.files[0].path}" in render(report)
    alone = collect(tmp_path / second.files[0].path)
    assert alone["exit_code"] == 0 and alone["references"] == [first.files[0].path]


def test_a_row_changed_without_a_new_version_is_written_again(tmp_path):
    """A writer that bypassed the archive (no new version) is caught by the row's fingerprint."""
    archive = archive_of()
    checkpointer = Checkpointer(tmp_path, keep=3, min_row_bytes=0)
    checkpointer.save(1, states(archive), config="a = 1")
    archive._genomes[3, -5:] = 7            # the bytes change, the version does not
    second = checkpointer.save(2, states(archive), config="a = 1")
    assert second.new_row_bytes == ROW_BYTES
    assert np.array_equal(bits(load_latest(tmp_path).islands[0]["archive"]["genomes"]), bits(archive.genomes))


def test_the_checkpoint_bench_runs_and_reads_back(tmp_path, capsys):
    import argparse

    from mpievo.bench.checkpoint import main

    args = argparse.Namespace(params=2e4, rows=4, dtype="bfloat16", changed=1, dir=str(tmp_path))
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "second checkpoint (incremental, background): " in text and "reads back bit for bit with h5py: yes" in text
    assert main(argparse.Namespace(params=2e4, rows=2, dtype="bfloat16", changed=3, dir=None)) == 2
