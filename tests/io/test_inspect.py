"""`mpievo inspect PATH`: summary, checksum verification and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from io_helpers import flip_data_byte, make_island

from mpievo.cli.inspect import EXIT_BROKEN_PIPE
from mpievo.cli.main import main as mpievo_main
from mpievo.jobs import CHECKPOINT_SUBDIR
from mpievo.io import Checkpointer, load_latest

MPIEVO = str(Path(sys.executable).parent / "mpievo")


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


def test_a_run_directory_is_read_through_its_checkpoints_directory(tmp_path, capsys):
    infos = make_run(tmp_path / CHECKPOINT_SUBDIR)
    assert mpievo_main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"checkpoint directory {tmp_path / CHECKPOINT_SUBDIR}\n")
    assert all(info.name in out for info in infos) and "verifies" in out


def test_one_file_is_inspected_on_its_own(tmp_path, capsys):
    _, latest = make_run(tmp_path)
    path = tmp_path / latest.name / "rank-00000-of-00001.h5"
    assert mpievo_main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"part of {latest.name} (generation 8" in out and "result: the file verifies" in out
    best = np.nanmin(make_island(1, 8)["fitness"])
    assert f"{1:>6}  {path.name:<24}{8:>11}{48:>13}{6:>12}  {best:.6g}" in out.splitlines()
    flip_data_byte(path, "islands/2/genomes")
    assert mpievo_main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    assert "contents differ from the digest recorded when it was written" in out and "is BAD" in out


@pytest.mark.parametrize("maximize", [False, True], ids=["minimise", "maximise"])
def test_island_table_of_a_real_run_is_filled_in_the_users_sense(tmp_path, capsys, maximize):
    from mpi4py import MPI

    from mpievo.comm import Communicator
    from mpievo.config import validate
    from mpievo.parallel import run_job

    job = validate({"run": {"islands": 3, "generations": 6, "seed": 1},
                    "problem": {"name": "sphere", "dim": 4, "maximize": maximize},
                    "engine": {"capacity": 8, "batch_size": 8}}, 1)
    result = run_job(job, Communicator(MPI.COMM_SELF), checkpointer=Checkpointer(tmp_path / CHECKPOINT_SUBDIR))
    saved = load_latest(tmp_path / CHECKPOINT_SUBDIR)
    assert mpievo_main(["inspect", "--json", str(tmp_path)]) == 0
    table = json.loads(capsys.readouterr().out)["checkpoints"][-1]["island_table"]
    expected = [{"island": i["island"], "generation": 6, "evaluations": i["evaluations"],
                 "population_size": len(saved.islands[i["island"]]["archive"]["fitness"]),
                 "best_fitness": i["best_fitness"]} for i in result.islands]
    assert [{k: row[k] for k in expected[0]} for row in table] == expected
    assert mpievo_main(["inspect", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.split("best fitness\n")[1].splitlines()[:3]
    assert all(" - " not in f"{row} " for row in rows), rows


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    make_run(tmp_path)
    child = subprocess.Popen([MPIEVO, "inspect", str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    child.stdout.close()   # like `| head` exiting: the command's first write finds no reader
    _, err = child.communicate(timeout=120)
    assert child.returncode == EXIT_BROKEN_PIPE and err == ""
