"""Every example runs briefly and shows the feature it demonstrates.

``custom_problem.py`` is run by tests/evo/test_evo_example_and_bench.py (the GPU
benchmark is ``mpievo bench gpu``, run by tests/gpu/test_bench_and_imports.py).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpievo.config import apply_overrides, load_config, validate
from mpievo.parallel import run_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MPIEVO = str(Path(sys.executable).parent / "mpievo")


def run_example(name: str, generations: int, monkeypatch):
    """Run examples/``name`` on one rank for ``generations``; (job, result)."""
    from mpi4py import MPI

    from mpievo.comm import Communicator

    monkeypatch.syspath_prepend(str(EXAMPLES))      # user problems live beside the configs
    config, _ = load_config(EXAMPLES / name)
    job = validate(apply_overrides(config, {"run.generations": generations}), 1, name)
    result = run_job(job, Communicator(MPI.COMM_SELF))
    assert result.generations == generations
    return job, result


def check_graph_topology(monkeypatch):
    # edges 0->3, 1->3, 2->3, 3->0: islands 1 and 2 have no incoming edge
    _, result = run_example("graph_topology.toml", 10, monkeypatch)
    immigrants = {i["island"]: i["immigrants"] for i in result.islands}
    assert immigrants[1] == immigrants[2] == 0 and immigrants[0] > 0 and immigrants[3] > 0, immigrants


def check_heterogeneous(monkeypatch):
    # batch_size = "max(64, 256 - 32*i)" on the GA islands 0-5, DE (32 children) on 6-7: a
    # generation is 256 evaluations per island (the largest batch), so smaller batches step
    # more often, until they pass 3 * 256 evaluations after the 48 of the initial population
    _, result = run_example("heterogeneous.toml", 3, monkeypatch)
    batches = [max(64, 256 - 32 * i) for i in range(6)] + [32, 32]
    steps = [-(-3 * 256 // batch) for batch in batches]
    assert [i["steps"] for i in result.islands] == steps
    assert [i["evaluations"] for i in result.islands] == [48 + s * b for s, b in zip(steps, batches)]


def check_user_problem(monkeypatch):
    # the "module:function" problem is the one evaluated: its value at the best genome is the best
    _, result = run_example("user_problem.toml", 3, monkeypatch)
    from custom_problem import sine_fit_error

    value = sine_fit_error(result.best_genome[np.newaxis, :])[0]
    assert value == pytest.approx(result.best_fitness, rel=1e-6, abs=1e-9)


def check_portfolio(monkeypatch):
    # CMA-ES (10 children) and SHADE (50) islands alternate; each evaluates 3 rounds of 50
    # after its 64 initial members (tests/examples/test_portfolio.py runs it to a budget)
    job, result = run_example("portfolio.toml", 3, monkeypatch)
    assert [e.algorithm for e in job.engines] == ["cmaes", "shade", "cmaes", "shade"]
    assert [i["evaluations"] for i in result.islands] == [64 + 3 * 50] * 4
    assert [i["steps"] for i in result.islands] == [15, 3, 15, 3]


CHECKS = {"graph_topology.toml": check_graph_topology, "heterogeneous.toml": check_heterogeneous,
          "portfolio.toml": check_portfolio, "user_problem.toml": check_user_problem}


def test_every_example_config_has_a_check():
    assert sorted(p.name for p in EXAMPLES.glob("*.toml")) == sorted(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_example_config_runs_and_shows_its_feature(name, monkeypatch):
    CHECKS[name](monkeypatch)


def test_collectives_demo_averages_across_two_ranks():
    done = subprocess.run([MPIEVO, "launch", "-n", "2", "--", "python", str(EXAMPLES / "collectives_demo.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("2 ranks: max |mean - reference| = "))
    error = float(line.split("= ")[1].split(",")[0])
    assert error < 1e-6 and "'gradients'" in line, line
