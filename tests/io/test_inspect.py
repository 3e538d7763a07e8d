"""`mpievo inspect DIR`: summary, checksum verification and exit status."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from io_helpers import flip_data_byte, make_island

from mpievo.cli.main import main as mpievo_main
from mpievo.io import Checkpointer


def make_run(tmp_path, generations=(4, 8)):
    checkpointer = Checkpointer(tmp_path, keep=3)
    return [checkpointer.save(g, {i: make_island(i, g) for i in range(3)}, config="x = 1\n") for g in generations]


def test_good_directory_is_summarised_and_exits_zero(tmp_path, capsys):
    infos = make_run(tmp_path)
    assert mpievo_main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for info in infos:
        assert info.name in out
    best = np.nanmin(make_island(2, 8)["fitness"])
    assert f"{best:.6g}" in out and "verifies" in out


def test_bad_latest_exits_one_and_names_file_and_fallback(tmp_path, capsys):
    good, bad = make_run(tmp_path)
    path = tmp_path / bad.name / "rank-00000-of-00001.h5"
    flip_data_byte(path, "islands/2/genomes")
    assert mpievo_main(["inspect", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert str(path) in out and "BAD" in out and f"a resume would use: {good.name}" in out


def test_header_only_mode_misses_data_damage_but_not_a_foreign_file(tmp_path, capsys):
    _, bad = make_run(tmp_path)
    path = tmp_path / bad.name / "rank-00000-of-00001.h5"
    flip_data_byte(path, "islands/2/genomes")
    assert mpievo_main(["inspect", "--no-verify", str(tmp_path)]) == 0
    path.write_text("junk")
    assert mpievo_main(["inspect", "--no-verify", str(tmp_path)]) == 1
    capsys.readouterr()


def test_json_report(tmp_path, capsys):
    make_run(tmp_path)
    assert mpievo_main(["inspect", "--json", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    latest = report["checkpoints"][-1]
    assert report["latest"] == latest["name"] and latest["generation"] == 8 and latest["problems"] == []
    assert [row["island"] for row in latest["island_table"]] == [0, 1, 2]
    assert latest["island_table"][0]["population_size"] == 6


def test_empty_directory_exits_two(tmp_path, capsys):
    assert mpievo_main(["inspect", str(tmp_path)]) == 2
    assert "no checkpoint" in capsys.readouterr().out
    assert mpievo_main(["inspect", str(tmp_path / "absent")]) == 2


def test_inspect_module_does_not_initialise_mpi_or_import_h5py():
    code = ("import sys, mpievo.cli.inspect; "
            "print('mpi4py' in sys.modules, 'h5py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
