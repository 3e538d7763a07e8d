"""``mpievo run`` with islands over groups of ranks (run.ranks_per_island), resumed
with another layout (subprocesses; serial stage only)."""

import json
import os
import subprocess
import sys

import pytest
from mpi4py import MPI

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1,
                                reason="starts its own mpiexec: run it from the serial stage only")

SMALL = ["--dim", "6", "--set", "engine.batch_size=16", "--set", "engine.capacity=8", "--islands", "2",
         "--progress", "none"]


def run(nranks, *argv):
    cmd = [sys.executable, "-m", "mpievo", "launch", "-n", str(nranks), "--", "mpievo", "run", *map(str, argv)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "MPIEVO_COMM_TIMEOUT": "60"})
    assert proc.returncode == 0, proc.stderr
    return proc


def best(out):
    summary = json.loads((out / "summary.json").read_text())
    return summary["best_genome"], summary["best_fitness"], summary["evaluations"]


def test_groups_resume_as_one_rank_per_island_with_the_same_result(tmp_path):
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    run(2, "--generations", 12, "--out", straight, *SMALL)
    run(4, "--generations", 6, "--out", cut, "--set", "run.scheme=hybrid", "--set", "run.ranks_per_island=2", *SMALL)
    assert json.loads((cut / "summary.json").read_text())["ranks"] == 4
    run(2, "--resume", cut, "--generations", 12, "--set", "run.scheme=island", "--set", "run.ranks_per_island=1")
    assert best(cut) == best(straight)
