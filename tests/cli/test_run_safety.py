"""Issue 31 in one process: a run never writes into another run's directory, and every
bad setting (bounds, sizes, expressions, memory) stops it before anything is created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi4py import MPI

from mpievo.cli.main import main

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1,
                                reason="runs `mpievo run` on COMM_WORLD in this process: one rank only")
MPIEVO = str(Path(sys.executable).parent / "mpievo")
TINY = ["--progress", "none", "--set", "engine.capacity=4", "--set", "engine.batch_size=4"]


def _run(*argv):
    return main(["run", *map(str, argv)])


def _checkpoint_generations(out: Path) -> list[int]:
    manifest = json.loads((out / "checkpoints" / "manifest.json").read_text())
    return [c["generation"] for c in manifest["checkpoints"]]


# ---------------------------------------------------------------- finding 3: occupied directories
def test_a_new_run_refuses_a_directory_holding_another_run(tmp_path, capsys):
    out = tmp_path / "x"
    assert _run("--problem", "sphere", "--dim", 3, "--generations", 20, "--checkpoint-every", 5,
                "--out", out, *TINY) == 0
    before = (out / "summary.json").read_text()
    capsys.readouterr()
    assert _run("--problem", "rastrigin", "--dim", 5, "--generations", 5, "--out", out, *TINY) == 2
    err = capsys.readouterr().err
    assert f"got {out}, which holds another run" in err
    for way_out in (f"--resume {out}", "new --out", "--overwrite"):
        assert way_out in err
    assert (out / "summary.json").read_text() == before and _checkpoint_generations(out) == [10, 15, 20]


def test_overwrite_removes_the_old_run_first(tmp_path):
    out = tmp_path / "x"
    assert _run("--problem", "sphere", "--dim", 3, "--generations", 20, "--checkpoint-every", 5,
                "--out", out, *TINY) == 0
    (out / "notes.txt").write_text("mine")        # not the run's: stays
    assert _run("--problem", "rastrigin", "--dim", 5, "--generations", 5, "--out", out, "--overwrite", *TINY) == 0
    assert _checkpoint_generations(out) == [5]
    assert json.loads((out / "summary.json").read_text())["config"]["problem"]["name"] == "rastrigin"
    assert (out / "notes.txt").read_text() == "mine"


def test_resume_into_another_runs_directory_is_refused(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        assert _run("--problem", "sphere", "--dim", 3, "--generations", 4, "--out", out, *TINY) == 0
    capsys.readouterr()
    assert _run("--resume", first, "--generations", 6, "--out", second, "--progress", "none") == 2
    assert f"got {second}, which holds another run" in capsys.readouterr().err


def test_default_directories_are_unique_within_one_second(tmp_path):
    from mpievo.parallel.job import make_default_out_dir

    made = [make_default_out_dir(now=0.0, root=tmp_path) for _ in range(3)]
    assert len({p.name for p in made}) == 3 and all(p.is_dir() for p in made)
    assert made[1].name == made[0].name + "-2"


def test_a_directory_without_a_checkpoint_is_reused(tmp_path):
    out = tmp_path / "x"
    (out / "islands").mkdir(parents=True)        # left by a run stopped before its first checkpoint
    (out / "checkpoints").mkdir()
    assert _run("--problem", "sphere", "--dim", 3, "--generations", 2, "--out", out, *TINY) == 0


# ---------------------------------------------------------------- finding 6: bounds with the rest
@pytest.mark.parametrize("bounds, fragment", [
    (["--lower", 5, "--upper", -5], "problem.lower, problem.upper: expected lower < upper, got lower 5 and upper -5"),
    (["--lower", "nan"], "problem.lower: expected finite numbers, got nan"),
    (["--upper", -6], "expected lower < upper, got lower -5.12 and upper -6"),      # the built-in's lower
    (["--lower", "[0, 1, 2]", "--upper", "[1, 1, 3]"], "expected lower < upper at gene 1, got lower 1 and upper 1"),
])
def test_bad_bounds_are_reported_with_every_other_problem_and_nothing_is_created(tmp_path, capsys, bounds,
                                                                                 fragment):
    out = tmp_path / "x"
    assert _run("--problem", "sphere", "--dim", 3, *bounds, "--set", "engine.capacity=1", "--out", out,
                "--progress", "none") == 2
    captured = capsys.readouterr()
    assert fragment in captured.err and "engine.capacity: expected an int >= 2" in captured.err
    assert "(2 problems)" in captured.err and "Traceback" not in captured.err
    assert "starting" not in captured.out and not out.exists()


# ---------------------------------------------------------------- finding 8: bounded validation
@pytest.mark.timeout(20)    # the old code spent minutes here
def test_a_huge_island_expression_is_refused_at_once(tmp_path, capsys):
    assert _run("--set", 'engine.mutation_sigma="(((9**64)**64)**64)**64+i"', "--out", tmp_path / "x",
                "--progress", "none") == 2
    assert "expected integers of at most 1024 bits" in capsys.readouterr().err


def test_sizes_have_upper_bounds(tmp_path, capsys):
    assert _run("--set", "engine.batch_size=1000000000", "--set", "engine.capacity=20000000000",
                "--islands", 10**7, "--out", tmp_path / "x", "--progress", "none") == 2
    err = capsys.readouterr().err
    assert "engine.batch_size: expected an int >= 1 and <= 10000000, got 1000000000" in err
    assert "engine.capacity: expected an int >= 2 and <= 10000000" in err
    assert "run.islands: expected an int >= 0 and <= 1000000, got 10000000" in err


# ---------------------------------------------------------------- finding 4: memory before allocation
def test_a_job_that_cannot_fit_in_memory_is_refused_before_allocating(tmp_path, capsys):
    out = tmp_path / "x"
    assert _run("--problem", "sphere", "--dim", 10**9, "--islands", 1, "--set", "engine.capacity=4",
                "--set", "engine.batch_size=4", "--set", "engine.population=4", "--out", out,
                "--progress", "none") == 2
    err = capsys.readouterr().err
    assert "memory: expected the job to fit in the" in err and "got an estimate of 29.8 GiB" in err
    for setting in ("problem.dim", "engine.capacity", "engine.batch_size", "run.memory_check = false"):
        assert setting in err
    assert not out.exists()


def test_the_memory_estimate_and_its_switch():
    from mpievo.config import validate
    from mpievo.parallel.memory import rank_estimate

    job = validate({"problem": {"name": "sphere", "dim": 1000}, "run": {"islands": 4},
                    "engine": {"capacity": 10, "batch_size": 20, "dtype": "float64"}}, 2)
    # two islands per rank, (10 + 20) float64 rows + 20 float64 draw rows of 1000 genes each
    assert rank_estimate(job, 2) == (2 * (30 * 1000 * 8 + 20 * 1000 * 8), 0)
    gpu = validate({"problem": {"name": "sphere", "dim": 1000}, "engine": {"device": "cuda", "capacity": 10,
                                                                          "batch_size": 20}}, 1)
    assert rank_estimate(gpu, 1) == (0, 30 * 1000 * 4 + 20 * 1000 * 8)


def test_memory_check_off_lets_the_job_through_validation(tmp_path, capsys):
    # the same impossible job, checked no further: --show-config stops before any allocation
    assert _run("--problem", "sphere", "--dim", 10**9, "--set", "run.memory_check=false",
                "--show-config") == 0
    assert json.loads(capsys.readouterr().out)["run"]["memory_check"] is False


# ---------------------------------------------------------------- finding 5: modules of the current directory
def test_the_installed_script_finds_a_module_in_the_current_directory(tmp_path):
    (tmp_path / "mymod.py").write_text("def f(X):\n    return (X * X).sum(axis=1)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([MPIEVO, "run", "--problem", "mymod:f", "--dim", "5", "--lower", "-1", "--upper", "1",
                           "--generations", "2", "--out", "run", *TINY], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    missing = subprocess.run([MPIEVO, "run", "--problem", "nomod:f", "--dim", "5", "--lower", "-1", "--upper", "1",
                              "--show-config"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2
    assert f"no 'nomod' in the current directory {tmp_path} nor elsewhere on sys.path" in missing.stderr


def test_gpu_islands_are_checked_against_the_devices_free_memory(monkeypatch):
    from mpievo.comm.protocol import SelfComm
    from mpievo.config import validate
    from mpievo.parallel import memory

    job = validate({"problem": {"name": "sphere", "dim": 10**6}, "engine": {"device": "cuda", "capacity": 8,
                                                                           "batch_size": 8}}, 1)
    need = 16 * 10**6 * 4      # large genomes: counter-based draws, no draw rows
    monkeypatch.setattr(memory, "_free_device_bytes", lambda: need - 1)
    assert "got an estimate of 0.0596 GiB of device memory" in memory.device_memory_problem(SelfComm(), job)
    monkeypatch.setattr(memory, "_free_device_bytes", lambda: need)
    assert memory.device_memory_problem(SelfComm(), job) is None
    off = validate({**job.config, "run": {**job.config["run"], "memory_check": False}}, 1)
    monkeypatch.setattr(memory, "_free_device_bytes", lambda: 0)
    assert memory.device_memory_problem(SelfComm(), off) is None
