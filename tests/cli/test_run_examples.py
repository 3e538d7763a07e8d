"""Every example job config validates (and is small enough to run in a test)."""

from pathlib import Path

import pytest

from mpievo.config import apply_overrides, load_config, validate
from mpievo.parallel import run_job

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_validates_and_runs_a_few_generations(path, monkeypatch):
    from mpi4py import MPI

    from mpievo.comm import Communicator

    monkeypatch.syspath_prepend(str(path.parent))      # user problems live beside the configs
    config, _ = load_config(path)
    job = validate(apply_overrides(config, {"run.generations": 3}), 1, str(path))
    result = run_job(job, Communicator(MPI.COMM_SELF))
    assert result.generations == 3 and result.evaluations > 0


def test_there_are_examples():
    assert len(EXAMPLES) >= 3
