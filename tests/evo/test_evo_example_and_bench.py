"""The custom-problem example runs and improves; the engine benchmark compares like for like."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island
from mpievo.bench import engine_vs_pygmo as bench

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


def test_benchmark_engine_run_converges_far_below_random_search():
    # Random search with this budget gets no lower than about half the random value
    # (~220); the GA reaches ~1e-4, and one whose step size adapts the wrong way
    # stalls near 10.
    result = bench.mpievo_run("batched", 50, 25_600, seed=0)
    assert result["evaluations"] == 25_600
    assert result["best"] < 1e-5 * bench.random_value(50)


def test_budget_is_whole_generations_of_both_sides():
    assert bench.budget(1) == bench.budget(640) == 640      # lcm(128 children, population 20)
    assert bench.budget(641) == bench.budget(1280) == 1280


def _fake_reference(seconds: float, best: float, calls: list):
    def reference(dim, evaluations, seed):
        calls.append((dim, evaluations, seed))
        return {"seconds": seconds, "cpu_seconds": seconds, "evaluations": evaluations, "best": best}
    return reference


@pytest.mark.parametrize("ref_seconds, met", [(1e3, True), (1e-6, False)])
def test_compare_is_like_for_like_against_a_fake_reference(ref_seconds, met):
    calls = []
    dim = 20
    result = bench.compare(dim, 1000, repeats=2, seed=3,
                           reference=_fake_reference(ref_seconds, bench.random_value(dim), calls))
    assert calls == [(dim, 1280, 3), (dim, 1280, 4)]           # same budget, same seeds
    pygmo, variants = result["pygmo"], result["variants"]
    assert pygmo["evals_per_s"] == pytest.approx(1280 / ref_seconds) and not pygmo["sane"]
    assert [v for v in variants if variants[v]["like_for_like"]] == ["per_row"]
    for side in variants.values():
        assert side["evaluations"] == 1280 and side["same_count"] and side["sane"]
        assert side["vs_pygmo"] == pytest.approx(side["evals_per_s"] / pygmo["evals_per_s"])
        assert side["overhead_us"] == pytest.approx(side["us_per_eval"] - side["fitness_us"])
        # both timed separately: on a busy machine the fitness alone can time above the
        # whole evaluation (a negative overhead), so no order between them is asserted
        assert side["fitness_us"] > 0 and side["us_per_eval"] > 0
    target = result["targets"]["per_row_vs_pygmo"]
    assert target["value"] == variants["per_row"]["vs_pygmo"] and target["met"] is met
    batched = result["targets"]["batched_vs_pygmo"]
    assert batched["value"] == variants["batched"]["vs_pygmo"] and batched["met"] is met
    overhead = result["targets"]["batched_overhead_us"]
    assert overhead["met"] is (overhead["value"] <= bench.TARGET_OVERHEAD_US)
    overhead = result["targets"]["float32_overhead_us"]
    assert overhead["value"] == variants["numba_float32"]["overhead_us"]
    assert overhead["met"] is (overhead["value"] <= bench.TARGET_OVERHEAD_F32_US)
    split = result["split_us"]
    assert all(split[key] > 0 for key in ("ask", "breed_kernel", "tell", "fitness"))
    lines = "\n".join(bench.format_lines(result))
    assert ("per-individual >= 1.1x pygmo: " + ("met" if met else "MISSED")) in lines
    assert ("batched >= 2x pygmo: " + ("met" if met else "MISSED")) in lines
    assert "NOT like for like" in lines and "pygmo has no batch call" in lines


def test_compare_without_a_reference_reports_no_ratio():
    result = bench.compare(20, 640, repeats=1, reference=lambda dim, evaluations, seed: None)
    assert result["pygmo"] is None and result["targets"]["per_row_vs_pygmo"]["met"] is None
    assert all(side["vs_pygmo"] is None for side in result["variants"].values())
    assert "pygmo sade: not installed" in "\n".join(bench.format_lines(result))


def test_pygmo_reference_runs_the_same_budget():
    pytest.importorskip("pygmo")
    result = bench.pygmo_run(20, 1280, seed=0)
    assert result["evaluations"] == 1280 and result["seconds"] > 0
    assert result["best"] < bench.random_value(20) / 2
    compared = bench.compare(20, 640, repeats=1)
    assert compared["pygmo"]["evaluations"] == compared["variants"]["per_row"]["evaluations"] == 640
