"""A rank killed while breeding its children (run.breed = "evaluator", centralized and
master-worker) ends the job promptly, and the job's output names the rank (serial test
driving mpiexec)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

MPIEVO = str(Path(sys.executable).parent / "mpievo")
TESTS = Path(__file__).resolve().parents[1]

SCRIPT = '''
import inspect, os, signal, sys
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "parallel")]
from mpi4py import MPI
import breed_helpers
from breed_helpers import breed_job
from mpievo.comm import Communicator
from mpievo.comm.abort import abort_on_error
from mpievo.evo import Problem
from mpievo.parallel import run_job

def fitness(genomes):
    breeding = any(frame.function == sys.argv[2] for frame in inspect.stack())
    if MPI.COMM_WORLD.Get_rank() == 1 and breeding:
        os.kill(os.getpid(), signal.SIGKILL)     # in the middle of its block of children
    return breed_helpers.distance(genomes)

breed_helpers.KILLER = Problem(fitness, breed_helpers.DIM, -4, 4, name="killer")
job = breed_job(2, problem={"name": "breed_helpers:KILLER"}, run=eval(sys.argv[3]))
with abort_on_error():
    run_job(job, Communicator(MPI.COMM_WORLD, timeout=20.0))
print("finished")
'''


@pytest.mark.parametrize("breeding,run", [
    ("_breed", {"scheme": "centralized", "islands": 2, "breed": "evaluator"}),
    ("_serve_breed", {"scheme": "master_worker", "breed": "evaluator"}),     # a worker of the pool
])
def test_a_rank_killed_while_breeding_ends_the_job_naming_it(tmp_path, breeding, run):
    """Rank 1 kills itself inside ``breeding`` (the function that breeds its block)."""
    script = tmp_path / "killed.py"
    script.write_text(SCRIPT)
    start = time.monotonic()
    job = subprocess.run([MPIEVO, "launch", "-n", "2", "--", sys.executable, str(script), str(TESTS), breeding,
                          repr(run)], capture_output=True, text=True, timeout=120)
    output = job.stdout + job.stderr
    assert job.returncode != 0 and "finished" not in output, output
    assert "rank 1" in output and "signal 9" in output, output
    assert time.monotonic() - start < 110
