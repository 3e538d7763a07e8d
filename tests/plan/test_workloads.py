"""The workload vocabulary (mpievo.plan.workloads): budgets, repeats, the cost axis, the fitness."""

import time

import numpy as np
import pytest

from mpievo.evo.problems import builtin_problem
from mpievo.plan.calibrate import loop_lengths
from mpievo.plan.workloads import (SchemesOptions, Workload, WorkloadFitness, measure_workload, repeats_wanted,
                                   vary_factor, workloads)


def test_budgets_by_genome_size_and_cost():
    options = SchemesOptions()
    assert [options.budget_for(d, c) for d, c in ((100, 0.0), (100, 5.0), (10**5, 0.0), (10**7, 0.0))] == \
        [192 * 32, 192, 192, 32]


def test_cost0_runs_are_repeated_up_to_a_longer_first_run():
    cost0, sleep = Workload(0.0, "none", 100), Workload(5.0, "sleep", 100)
    assert [repeats_wanted(cost0, w) for w in (0.3, 1.5, 2.5)] == [5, 5, 1]
    assert [repeats_wanted(sleep, w) for w in (0.3, 1.5)] == [5, 1]


def test_short_runs_are_repeated_in_rounds_over_the_schemes_and_the_fastest_kept(monkeypatch):
    """A scheme whose first run is short runs again in rounds with the other short ones
    (spread over the workload, not back to back), and its row is its fastest run."""
    import mpievo.plan.workloads as plan_workloads

    walls = {"island": iter([0.3, 0.25, 0.2, 0.35, 0.3]), "hybrid": iter([2.5]),
             "replicated": iter([1.0, 0.8, 1.2, 0.9, 1.1])}
    order = []

    def fake_measure(workload, scheme, options):
        order.append(scheme)
        return {"scheme": scheme, "wall_s": next(walls[scheme])}

    monkeypatch.setattr(plan_workloads, "measure", fake_measure)
    rows = measure_workload(Workload(0.0, "none", 100), ("island", "hybrid", "replicated"), SchemesOptions())
    assert order == ["island", "hybrid", "replicated"] + ["island", "replicated"] * 4
    assert [(r["scheme"], r["wall_s"], r["repeats"]) for r in rows] == \
        [("island", 0.2, 5), ("hybrid", 2.5, 1), ("replicated", 0.8, 5)]


def test_loop_cost_runs_end_at_the_benchs_own_length():
    options = SchemesOptions()
    short, long = loop_lengths(100)
    assert short < long and options.budget_for(100, 0.0) == options.n_islands * options.capacity * (long + 1)


def test_workloads_are_the_cost_axis_then_the_genome_axis():
    loads = workloads(SchemesOptions(costs_ms=(0.0, 5.0), modes=("sleep", "vary"), dims=(100, 10**5)))
    assert loads == [Workload(0.0, "none", 100), Workload(5.0, "sleep", 100), Workload(5.0, "vary", 100),
                     Workload(0.0, "none", 10**5)]


def test_vary_factor_is_deterministic_within_a_factor_four_and_mean_one():
    rows = np.random.default_rng(0).standard_normal((2000, 10)).astype(np.float32)
    factors = np.array([vary_factor(r) for r in rows])
    assert np.array_equal(factors, [vary_factor(r.copy()) for r in rows])
    assert factors.min() >= 0.4 and factors.max() <= 1.6 and factors.max() / factors.min() > 3.5
    assert abs(factors.mean() - 1.0) < 0.05


@pytest.mark.parametrize("mode", ["burn", "sleep"])
def test_workload_fitness_is_the_rotated_problem_plus_its_cost(mode):
    base = builtin_problem("rastrigin", 20, shift=True, rotate=True, seed=1)
    genomes = np.random.default_rng(1).uniform(-5, 5, (3, 20)).astype(np.float32)
    fitness = WorkloadFitness(base.func, Workload(4.0, mode, 20))
    start = time.perf_counter()
    values = fitness(genomes)
    assert np.array_equal(values, [base.func(g[None, :])[0] for g in genomes])
    assert fitness.seconds >= 3 * 4e-3 and fitness.seconds <= time.perf_counter() - start


def test_options_are_checked_by_the_schema():
    with pytest.raises(ValueError, match=r"bench.schemes.ps: expected rank counts including 1"):
        SchemesOptions(ps=(2, 4))
    with pytest.raises(ValueError, match=r"bench.schemes.modes\[1\]: expected one of \['sleep', 'burn', 'vary'\]"):
        SchemesOptions(modes=("sleep", "spin"))
    with pytest.raises(ValueError, match=r"bench.schemes.budget: expected at least 32 evaluations"):
        SchemesOptions(budget=16)
    assert SchemesOptions.from_dict(SchemesOptions(ps=[1, 2]).to_dict()) == SchemesOptions(ps=(1, 2))
