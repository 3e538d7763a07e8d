"""``mpievo run`` end to end under ``mpievo launch -n 2`` (subprocesses; serial stage only)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from mpi4py import MPI

# pytest-mpi also runs unmarked tests on every rank of an MPI stage
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1,
                                reason="starts its own mpiexec: run it from the serial stage only")

MPIEVO = [sys.executable, "-m", "mpievo"]
SMALL = ["--dim", "6", "--set", "engine.batch_size=16", "--set", "engine.capacity=8"]


def launch(nranks, *argv):
    return [*MPIEVO, "launch", "-n", str(nranks), "--", "mpievo", "run", *map(str, argv)]


def run(nranks, *argv, timeout=120):
    return subprocess.run(launch(nranks, *argv), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MPIEVO_COMM_TIMEOUT": "60"})


def test_run_on_two_ranks_writes_the_summary(tmp_path):
    out = tmp_path / "out"
    proc = run(2, "--generations", 20, "--dim", 10, "--out", out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generations"] == 20 and summary["ranks"] == 2 and summary["devices"] == ["cpu", "cpu"]
    assert len(summary["best_genome"]) == 10 and len(summary["islands"]) == 2
    assert summary["bytes_sent"]["migration"] > 0 and summary["bytes_sent"]["global_best"] > 0
    assert summary["evals_per_s"] > 0 and summary["wall_s"] > 0
    assert sorted(p.name for p in (out / "islands").iterdir()) == ["island-0000.jsonl", "island-0001.jsonl"]
    assert proc.stdout.count("done: generation 20") == 1       # rank 0 only


def test_config_error_is_reported_once_and_fails_every_rank(tmp_path):
    proc = run(2, "--islands", 1, "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert proc.stderr.count("expected at least one island per rank (>= 2 ranks), got 1") == 1
    assert not (tmp_path / "x").exists()


def test_signal_checkpoints_and_resume_on_one_rank_gives_the_same_result(tmp_path):
    out = tmp_path / "cut"
    cmd = launch(2, "--generations", 10**7, "--islands", 4, "--out", out, "--log-every", 1,
                 "--progress", "lines", *SMALL)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:          # every rank passed its handler set-up before this line
            if line.startswith("gen 0/"):
                break
        time.sleep(0.5)
        proc.send_signal(signal.SIGUSR1)  # mpiexec forwards it to every rank
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 85, stderr
    assert not (out / "summary.json").exists()
    generation = int(stdout.split("checkpointed at generation ")[1].split()[0])
    target = generation + 7
    resumed = run(1, "--resume", out, "--generations", target)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    # the same job straight through, on one rank (same BLAS set-up as the resumed run)
    straight_out = tmp_path / "straight"
    straight = run(1, "--generations", target, "--islands", 4, "--out", straight_out, "--progress", "none",
                   *SMALL)
    assert straight.returncode == 0, straight.stderr
    expected = json.loads((straight_out / "summary.json").read_text())
    assert summary["generations"] == expected["generations"] == target
    assert summary["best_genome"] == expected["best_genome"]
    assert summary["evaluations"] == expected["evaluations"]
    logged = [json.loads(line)["generation"] for line in
              (out / "islands" / "island-0003.jsonl").read_text().splitlines()]
    assert logged == list(range(target + 1))   # no line lost or repeated across the cut
