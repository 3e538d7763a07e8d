"""One rank's checkpoint file: schema, plain-HDF5 readability and clear errors for bad files."""

from __future__ import annotations

import shutil
import subprocess

import h5py
import numpy as np
import pytest
from io_helpers import assert_trees_equal, flip_data_byte, make_island, truncate

from mpievo.io import (FORMAT_VERSION, CorruptCheckpointError, ForeignFileError, NewerFormatError,
                       read_checkpoint_file, read_header, verify_file, write_checkpoint_file)

CONFIG = 'seed = 1\n[run]\ngenerations = 50\nname = "sphere ✓"\n'


def write(path, islands=(0, 3), generation=4, run_state=None):
    return write_checkpoint_file(
        path, checkpoint="ckpt-000001-g000000004", sequence=1, generation=generation, rank=0, nranks=1,
        islands={i: make_island(i, generation) for i in islands},
        run_state=run_state if run_state is not None else {"generation": generation, "log": ["start"]},
        config_text=CONFIG, config_format="toml").header


def test_written_file_reads_back_exactly(tmp_path):
    header = write(tmp_path / "f.h5")
    contents = read_checkpoint_file(tmp_path / "f.h5")
    # format_version 1: no incremental rows, the version older mpievo reads
    assert header.islands == (0, 3) and header.generation == 4 and header.format_version == 1
    for index in (0, 3):
        assert_trees_equal(contents.islands[index], make_island(index, 4))
    assert contents.run_state == {"generation": 4, "log": ["start"]}
    assert contents.config_text == CONFIG and contents.config_format == "toml"


def test_reading_a_subset_returns_only_those_islands(tmp_path):
    write(tmp_path / "f.h5")
    contents = read_checkpoint_file(tmp_path / "f.h5", [3], with_run_state=False, with_config=False)
    assert list(contents.islands) == [3] and contents.run_state is None and contents.config_text is None
    with pytest.raises(KeyError, match=r"got \[5\]"):
        read_checkpoint_file(tmp_path / "f.h5", [5])


def test_summary_attributes_give_best_fitness_without_reading_data(tmp_path):
    header = write(tmp_path / "f.h5")
    expected = np.nanmin(make_island(3, 4)["fitness"])
    summary = header.island_summaries[3]
    assert summary["best_fitness"] == expected and summary["population_size"] == 6
    assert summary["generation"] == 4 and summary["evaluations"] == 24


def test_file_is_plain_hdf5_with_documented_attributes(tmp_path):
    write(tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5", "r") as handle:  # plain h5py, no mpievo decoding
        assert handle.attrs["format"] == "mpievo-checkpoint"
        assert "FORMAT.md" in handle.attrs["schema"]
        assert handle["config"].asstr()[()] == CONFIG
        assert handle["config"].attrs["config_format"] == "toml"
        genomes = handle["islands/3/genomes"][...]
        assert np.array_equal(genomes, make_island(3, 4)["genomes"])
        assert list(handle["islands/3/origin"].asstr()[...]) == list(make_island(3, 4)["origin"])
        assert handle["islands/0"].attrs["island_index"] == 0
        assert len(handle["islands/0"].attrs["checksum_sha256"]) == 64


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="h5dump (Debian hdf5-tools) not installed")
def test_h5dump_and_h5ls_read_the_file(tmp_path):
    write(tmp_path / "f.h5")
    listing = subprocess.run(["h5ls", "-r", str(tmp_path / "f.h5")], capture_output=True, text=True, check=True)
    assert "/islands/3/genomes" in listing.stdout
    dump = subprocess.run(["h5dump", "-d", "/config", str(tmp_path / "f.h5")], capture_output=True,
                          text=True, check=True)
    assert "generations = 50" in dump.stdout


def test_flipped_data_byte_is_caught_naming_file_and_section(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    read_header(path)  # metadata is intact: the damage is only visible in the data
    flip_data_byte(path, "islands/3/genomes", offset=5)
    with pytest.raises(CorruptCheckpointError, match=r"checksum mismatch in section /islands/3") as info:
        read_checkpoint_file(path)  # the in-file checksums alone, without the sidecar
    assert str(path) in str(info.value) and info.value.path == path
    read_checkpoint_file(path, [0])  # the other island still verifies on its own


def test_truncated_file_is_reported_as_damaged(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    truncate(path, 0.5)
    with pytest.raises(CorruptCheckpointError, match="truncated or damaged") as info:
        read_header(path)
    assert str(path) in str(info.value)
    truncate(path, 0.0)
    with pytest.raises(CorruptCheckpointError, match=r"truncated \(0 bytes\)"):
        read_header(path)


def test_text_file_is_foreign(tmp_path):
    path = tmp_path / "f.h5"
    path.write_text("hello, not HDF5\n")
    with pytest.raises(ForeignFileError, match="not an HDF5 file") as info:
        read_header(path)
    assert str(path) in str(info.value)


def test_other_hdf5_file_is_foreign(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as handle:
        handle["data"] = np.arange(4)
    with pytest.raises(ForeignFileError, match="not an mpievo checkpoint") as info:
        read_header(path)
    assert str(path) in str(info.value)


def test_newer_format_version_is_refused_with_upgrade_hint(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    with h5py.File(path, "r+") as handle:
        handle.attrs["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(NewerFormatError, match=f"format version {FORMAT_VERSION + 1}.*upgrade mpievo") as info:
        read_header(path)
    assert str(path) in str(info.value)


def test_edited_attribute_breaks_the_root_checksum(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    with h5py.File(path, "r+") as handle:
        handle["islands/3"].attrs["best_fitness"] = -1.0
    with pytest.raises(CorruptCheckpointError, match="root checksum mismatch"):
        read_header(path)


def test_failed_write_leaves_no_file_behind(tmp_path):
    path = tmp_path / "f.h5"
    with pytest.raises(TypeError, match="expected dict, list, tuple"):
        write_checkpoint_file(path, checkpoint="c", sequence=1, generation=1, rank=0, nranks=1,
                              islands={0: {"bad": object()}}, run_state=None, config_text="", config_format="toml")
    assert list(tmp_path.iterdir()) == []


def test_island_indices_must_be_non_negative_ints(tmp_path):
    with pytest.raises(ValueError, match="non-negative int island indices, got -1"):
        write_checkpoint_file(tmp_path / "f.h5", checkpoint="c", sequence=1, generation=1, rank=0, nranks=1,
                              islands={-1: {}}, run_state=None, config_text="", config_format="toml")


def test_sidecar_holds_the_file_digest_in_sha256sum_format(tmp_path):
    path = tmp_path / "f.h5"
    written = write_checkpoint_file(
        path, checkpoint="c", sequence=1, generation=1, rank=0, nranks=1, islands={0: make_island(0, 1)},
        run_state=None, config_text=CONFIG, config_format="toml")
    assert (tmp_path / "f.h5.sha256").read_text() == f"{written.file_sha256}  f.h5\n"
    assert written.size_bytes == path.stat().st_size
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "-c", "f.h5.sha256"], cwd=tmp_path, check=True, capture_output=True)
    flip_data_byte(path, "islands/0/genomes")
    with pytest.raises(CorruptCheckpointError, match="damaged or replaced"):
        verify_file(path)  # the sidecar is checked before HDF5 opens the file
