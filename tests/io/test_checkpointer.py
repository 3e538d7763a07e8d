"""Writing, pruning, atomicity and fallback of whole checkpoints (one rank)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
from io_helpers import assert_trees_equal, flip_data_byte, make_island, truncate

import mpievo.io.atomic as atomic_module
import mpievo.io.files as files_module
from mpievo.io import (MANIFEST_NAME, CheckpointWarning, Checkpointer, CheckpointWriteError,
                       NoCheckpointError, file_sha256, load_latest, read_manifest)

CONFIG = "[run]\ngenerations = 100\nislands = 3\n"


def save(checkpointer, generation, islands=(0, 1, 2)):
    return checkpointer.save(generation, {i: make_island(i, generation) for i in islands}, config=CONFIG,
                             run_state={"generation": generation, "best": float(generation)})


def file_digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def latest_file(tmp_path, checkpoint_name):
    return tmp_path / checkpoint_name / "rank-00000-of-00001.h5"


def test_save_then_load_latest_gives_back_every_island(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=3)
    save(checkpointer, 5)
    info = save(checkpointer, 10)
    loaded = load_latest(tmp_path)
    assert loaded.name == info.name and loaded.generation == 10 and loaded.island_indices == (0, 1, 2)
    for index in range(3):
        assert_trees_equal(loaded.islands[index], make_island(index, 10))
    assert loaded.run_state == {"generation": 10, "best": 10.0}
    assert loaded.config == {"run": {"generations": 100, "islands": 3}}
    assert loaded.config_text == CONFIG and loaded.skipped == () and loaded.written_by_ranks == 1


def test_islands_can_be_requested_for_a_different_layout(tmp_path):
    save(Checkpointer(tmp_path), 3)
    by_list = load_latest(tmp_path, islands=[2, 0])
    assert sorted(by_list.islands) == [0, 2]
    by_rule = load_latest(tmp_path, islands=lambda every: every[1::2])
    assert list(by_rule.islands) == [1]
    assert_trees_equal(by_rule.islands[1], make_island(1, 3))
    with pytest.raises(ValueError, match=r"got requests for \[7\]"):
        load_latest(tmp_path, islands=[7])


def test_only_the_last_k_are_kept_and_older_ones_pruned_after_the_new_one(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=2)
    names = [save(checkpointer, g).name for g in (1, 2, 3, 4)]
    assert [e.name for e in read_manifest(tmp_path)] == names[-2:]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == names[-2:]
    info = save(checkpointer, 5)
    assert info.pruned == (names[2],)
    assert json.loads((tmp_path / MANIFEST_NAME).read_text())["latest"] == info.name


def test_same_generation_twice_gets_a_new_name(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    first, second = save(checkpointer, 7), save(checkpointer, 7)
    assert first.name != second.name and load_latest(tmp_path).name == second.name


def test_write_failing_after_the_temporary_file_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer, 1)
    manifest_before = (tmp_path / MANIFEST_NAME).read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(atomic_module, "fsync_file", crash)  # the temp file is complete by then
    with pytest.raises(CheckpointWriteError, match="rank 0: OSError: disk on fire"):
        save(checkpointer, 2)
    monkeypatch.undo()
    assert (tmp_path / MANIFEST_NAME).read_bytes() == manifest_before
    assert sorted(p.name for p in tmp_path.iterdir()) == [good.name, MANIFEST_NAME]
    assert load_latest(tmp_path).name == good.name


def test_manifest_rename_failing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer, 1)
    real_replace = os.replace

    def refuse_manifest(src, dst):
        if str(dst).endswith(MANIFEST_NAME):
            raise OSError("quota exceeded")
        real_replace(src, dst)

    monkeypatch.setattr(atomic_module.os, "replace", refuse_manifest)
    with pytest.raises(CheckpointWriteError, match="quota exceeded"):
        save(checkpointer, 2)
    monkeypatch.undo()
    assert load_latest(tmp_path).name == good.name
    assert not list(tmp_path.glob(f"{MANIFEST_NAME}.tmp-*"))
    third = save(checkpointer, 3)  # the next save succeeds and removes the orphan directory
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [good.name, third.name]


WRITER = textwrap.dedent("""
    import sys, numpy as np
    from mpievo.io import Checkpointer
    big = {i: {"genomes": np.random.default_rng(i).random((2048, 4096)), "generation": 9} for i in range(3)}
    print("writing", flush=True)
    Checkpointer(sys.argv[1]).save(9, big, config="x = 1\\n")
""")


def test_writer_killed_mid_write_leaves_previous_checkpoint_loadable(tmp_path):
    good = save(Checkpointer(tmp_path), 1)
    manifest_before = (tmp_path / MANIFEST_NAME).read_bytes()
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("ckpt-*/*.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.001)
    child.kill()
    assert child.wait() == -9  # killed, not finished
    partial = list(tmp_path.glob("ckpt-*/*.tmp-*"))
    assert partial, "expected the kill to land while the temporary file existed"
    assert (tmp_path / MANIFEST_NAME).read_bytes() == manifest_before
    loaded = load_latest(tmp_path)
    assert loaded.name == good.name and loaded.skipped == ()
    next_info = save(Checkpointer(tmp_path), 2)
    assert not partial[0].parent.exists() and load_latest(tmp_path).name == next_info.name


def rerecord_digest(tmp_path, checkpoint_name):
    """Record the current bytes of the latest file as if they had been written so."""
    manifest_path = tmp_path / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["checkpoints"]:
        if entry["name"] == checkpoint_name:
            for item in entry["files"]:
                item["file_sha256"] = file_sha256(tmp_path / item["path"])
                item["size_bytes"] = (tmp_path / item["path"]).stat().st_size
    manifest_path.write_text(json.dumps(manifest))


def damage_latest(tmp_path, kind):
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer, 1)
    bad = save(checkpointer, 2)
    path = latest_file(tmp_path, bad.name)
    if kind == "flipped":
        flip_data_byte(path, "islands/1/fitness", offset=3)
    elif kind == "truncated":
        truncate(path, 0.6)
    elif kind == "text":
        path.write_text("not a checkpoint\n")
    elif kind in ("foreign hdf5", "foreign hdf5 recorded"):
        path.unlink()
        with h5py.File(path, "w") as handle:
            handle["x"] = np.arange(3)
    elif kind == "newer format recorded":  # as if a newer mpievo had written it
        with h5py.File(path, "r+") as handle:
            handle.attrs["format_version"] = 99
    elif kind == "missing":
        path.unlink()
    if kind.endswith("recorded"):
        rerecord_digest(tmp_path, bad.name)
    return good, bad, path


@pytest.mark.parametrize("kind, words", [
    ("flipped", "differ from the digest recorded.*damaged"), ("truncated", "truncated"),
    ("text", "not an HDF5 file"), ("foreign hdf5", "truncated or replaced"),
    ("foreign hdf5 recorded", "not an mpievo checkpoint"), ("newer format recorded", "format version 99"),
    ("missing", "missing"),
])
def test_bad_latest_falls_back_to_previous_with_a_warning_naming_the_file(tmp_path, kind, words):
    good, bad, path = damage_latest(tmp_path, kind)
    before = path.read_bytes() if path.exists() else None
    manifest_before = (tmp_path / MANIFEST_NAME).read_bytes()
    with pytest.warns(CheckpointWarning, match=words) as caught:
        loaded = load_latest(tmp_path)
    assert loaded.name == good.name and loaded.generation == 1
    assert str(path) in str(caught[0].message) and bad.name in str(caught[0].message)
    assert len(loaded.skipped) == 1 and str(path) in loaded.skipped[0]
    # nothing was overwritten or removed
    assert (path.read_bytes() if path.exists() else None) == before
    assert (tmp_path / MANIFEST_NAME).read_bytes() == manifest_before


def test_without_a_good_checkpoint_the_error_names_the_bad_file(tmp_path):
    info = save(Checkpointer(tmp_path), 1)
    path = latest_file(tmp_path, info.name)
    flip_data_byte(path, "islands/0/genomes")
    with pytest.warns(CheckpointWarning), pytest.raises(NoCheckpointError, match="damaged") as caught:
        load_latest(tmp_path)
    assert str(path) in str(caught.value)


def test_empty_or_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(NoCheckpointError, match="no checkpoint in"):
        load_latest(tmp_path)
    with pytest.raises(NoCheckpointError, match="no checkpoint directory"):
        load_latest(tmp_path / "absent")


def test_damaged_manifest_falls_back_to_the_files_and_is_kept_aside_on_next_save(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    save(checkpointer, 1)
    latest = save(checkpointer, 2)
    (tmp_path / MANIFEST_NAME).write_text("{ not json")
    with pytest.warns(CheckpointWarning, match="manifest unusable.*not valid JSON"):
        loaded = load_latest(tmp_path)
    assert loaded.name == latest.name
    assert (tmp_path / MANIFEST_NAME).read_text() == "{ not json"
    with pytest.warns(CheckpointWarning, match="kept it as"):
        third = save(checkpointer, 3)
    assert [e.name for e in read_manifest(tmp_path)][-1] == third.name
    assert len(list(tmp_path.glob(f"{MANIFEST_NAME}.bad-*"))) == 1


def test_file_from_another_checkpoint_does_not_pass_for_the_latest(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer, 1)
    bad = save(checkpointer, 2)
    latest_file(tmp_path, bad.name).write_bytes(latest_file(tmp_path, good.name).read_bytes())
    with pytest.warns(CheckpointWarning, match="damaged or replaced"):
        assert load_latest(tmp_path).name == good.name
    rerecord_digest(tmp_path, bad.name)  # even with matching bytes it is the wrong checkpoint
    with pytest.warns(CheckpointWarning, match="from another checkpoint or run"):
        assert load_latest(tmp_path).name == good.name


def test_keep_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="keep to be an int >= 1, got 0"):
        Checkpointer(tmp_path, keep=0)


def test_invalid_island_state_fails_the_save_and_changes_nothing(tmp_path):
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer, 1)
    with pytest.raises(CheckpointWriteError, match="expected dict, list, tuple"):
        checkpointer.save(2, {0: {"bad": {1, 2}}}, config=CONFIG)
    assert load_latest(tmp_path).name == good.name
    assert sorted(p.name for p in tmp_path.iterdir()) == [good.name, MANIFEST_NAME]


def test_dict_config_is_stored_as_json(tmp_path):
    Checkpointer(tmp_path).save(1, {0: {"x": 1}}, config={"run": {"generations": 3}})
    loaded = load_latest(tmp_path)
    assert loaded.config_format == "json" and loaded.config == {"run": {"generations": 3}}


def test_files_module_does_not_write_in_place(tmp_path, monkeypatch):
    seen = []
    real_file = files_module.h5py.File

    def recording_file(name, mode="r", **kwargs):
        seen.append((str(name), mode))
        return real_file(name, mode, **kwargs)

    monkeypatch.setattr(files_module.h5py, "File", recording_file)
    save(Checkpointer(tmp_path), 1)
    written = [name for name, mode in seen if mode == "w"]
    assert written and all(".tmp-" in name for name in written)


def test_damage_anywhere_in_the_file_never_reaches_hdf5(tmp_path):
    """Flipping any byte (metadata included, which can crash the HDF5 library) falls back cleanly."""
    checkpointer = Checkpointer(tmp_path)
    good = save(checkpointer, 1)
    bad = save(checkpointer, 2)
    path = latest_file(tmp_path, bad.name)
    original = path.read_bytes()
    for position in range(0, len(original), len(original) // 40):
        damaged = bytearray(original)
        damaged[position] ^= 0xFF
        path.write_bytes(bytes(damaged))
        with pytest.warns(CheckpointWarning, match="damaged"):
            assert load_latest(tmp_path).name == good.name
    path.write_bytes(original)
    assert load_latest(tmp_path).name == bad.name
