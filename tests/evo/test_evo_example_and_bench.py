"""The custom-problem example runs and improves; the benchmark functions report."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island
from mpievo.evo.bench import engine_throughput, pygmo_sade_throughput

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_problem.py"


def test_custom_problem_example_improves():
    example = runpy.run_path(str(EXAMPLE), run_name="custom_problem_example")
    result = example["main"](generations=100, verbose=False)
    assert max(result["final"]) < result["start"] / 10


def test_example_swarm_checkpoint_round_trip():
    example = runpy.run_path(str(EXAMPLE), run_name="custom_problem_example")
    problem = example["make_sine_problem"]()
    a = Island(1, problem, EngineConfig(capacity=8), seed=0, algorithm=example["ParticleSwarm"]()).run(5)
    b = Island(1, problem, EngineConfig(capacity=8), seed=0, algorithm=example["ParticleSwarm"]())
    b.load_state_dict(a.state_dict())
    for g in range(6, 9):
        a.step(g)
        b.step(g)
    assert np.array_equal(a.archive.genomes, b.archive.genomes)


def test_engine_throughput_reports():
    result = engine_throughput(dim=50, evaluations=2000, seed=1)
    assert result["evaluations"] >= 2000 and result["evals_per_s"] > 0
    assert result["algorithm"] == "ga" and result["dtype"] == "float32"
    assert result["best"] < 50 * 5.12 ** 2


def test_pygmo_reference_is_optional():
    result = pygmo_sade_throughput(dim=20, seconds=0.05)
    if result is None:
        with pytest.raises(ImportError):
            import pygmo  # noqa: F401
    else:
        assert result["evals_per_s"] > 0 and result["population"] == 20
