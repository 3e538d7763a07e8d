"""Issue 31: Ctrl-C and SIGTERM to ``mpievo launch`` or to a rank checkpoint every rank and
exit 85; a second Ctrl-C aborts at once and leaves the previous checkpoint whole; a
resume skips a damaged newest checkpoint, whichever rank's file is damaged (serial tests
driving mpiexec, and one in this process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from interrupt_jobs import (MPIEVO, finish, logged_generation, looks_like_a_checkpoint, outcome_problem,
                            rank_pids, resume, send, start, wait_until)
from mpi4py import MPI

pytestmark = [pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="drives mpiexec: one rank only"),
              pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to find the ranks"),
              pytest.mark.timeout(600)]


def test_sigterm_to_the_launcher_checkpoints_every_rank_and_the_run_resumes(tmp_path):
    signum = signal.SIGTERM     # what scancel and kill send; Ctrl-C: the trials and the test below
    out = tmp_path / "run"
    job = start(out, 2)
    wait_until(lambda: logged_generation(out) >= 3, job)
    interrupted_at = logged_generation(out)
    send(job.pid, signum)
    status, text = finish(job)
    assert outcome_problem(out, status, text, interrupted_at) is None, outcome_problem(out, status, text,
                                                                                     interrupted_at)
    assert "mpievo launch: " + signal.Signals(signum).name + ": stopping" in text
    generation = json.loads((out / "checkpoints" / "manifest.json").read_text())["checkpoints"][-1]["generation"]
    resumed = resume(out, generation + 2, nranks=2)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads((out / "summary.json").read_text())["generations"] == generation + 2


def test_ctrl_c_to_one_rank_checkpoints_every_rank(tmp_path):
    signum = signal.SIGINT      # SIGTERM to a rank: tests/cli and the trials
    out = tmp_path / "run"
    job = start(out, 2)
    wait_until(lambda: logged_generation(out) >= 3 and len(rank_pids(job)) == 2, job)
    interrupted_at = logged_generation(out)
    send(rank_pids(job)[-1], signum)
    status, text = finish(job)
    assert outcome_problem(out, status, text, interrupted_at) is None, outcome_problem(out, status, text,
                                                                                     interrupted_at)


def test_a_second_ctrl_c_aborts_at_once_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    # a generation of about a second (a sleeping fitness): the second Ctrl-C comes while the ranks
    # still finish the generation the first one stopped, whatever the speed of the checkpoint writes
    (tmp_path / "slow_fitness.py").write_text(
        "import time\ndef f(X):\n    time.sleep(0.5)\n    return (X * X).sum(axis=1)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    job = start(out, 2, "--checkpoint-every", "1", "--problem", "slow_fitness:f", "--lower", "-1", "--upper", "1")
    wait_until(lambda: (out / "checkpoints" / "manifest.json").exists(), job)
    send(job.pid, signal.SIGINT)
    time.sleep(0.5)     # two signals at once are one: the second must come after the first was handled
    send(job.pid, signal.SIGINT)
    status, text = finish(job, timeout=60)
    assert "aborting at once" in text and status not in (0, 85), text[-2000:]
    assert rank_pids(job) == []
    from mpievo.io import load_latest
    from mpievo.io.loader import verify_checkpoint

    latest = load_latest(out / "checkpoints")
    assert verify_checkpoint(out / "checkpoints", latest.entry) == [] and not latest.skipped


def test_a_stop_before_the_run_starts_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    # the fitness module sends the stop while the config is validated (it is imported then)
    (tmp_path / "stop_at_import.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"
        "def f(X):\n    return (X * X).sum(axis=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from mpievo.cli.main import main

    out = tmp_path / "run"
    status = main(["run", "--problem", "stop_at_import:f", "--dim", "3", "--lower", "-1", "--upper", "1",
                   "--out", str(out), "--progress", "none"])
    assert status == 85
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "mpievo run: interrupted before the first checkpoint: nothing was written; run the same command "
        "again to start over")
    assert not out.exists() and looks_like_a_checkpoint(out) == []


def test_resume_skips_a_newest_checkpoint_with_a_damaged_file_of_any_rank(tmp_path):
    out = tmp_path / "ck"
    made = subprocess.run([MPIEVO, "launch", "-n", "2", "--", "mpievo", "run", "--problem", "sphere", "--dim", "8",
                           "--generations", "40", "--checkpoint-every", "10", "--out", str(out),
                           "--progress", "none"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    newest = out / "checkpoints" / "ckpt-000004-g000000040"
    damaged = newest / "rank-00001-of-00002.h5"
    os.truncate(damaged, 20000)
    resumed = resume(out, 60, nranks=2)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming ckpt-000003-g000000030" in resumed.stdout
    assert "skipped: checkpoint ckpt-000004-g000000040 is unusable" in resumed.stdout
    assert str(damaged) in resumed.stdout
    assert json.loads((out / "summary.json").read_text())["generations"] == 60
