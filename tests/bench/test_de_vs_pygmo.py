"""The jDE benchmark compares algorithm for algorithm: same budget, population, fitness."""

from __future__ import annotations

import pytest

from mpievo.bench import de_vs_pygmo as de
from mpievo.bench import engine_vs_pygmo as ga
from mpievo.evo import Island
from mpievo.evo.algorithms.de import JDE
from mpievo.evo.problems import Problem

DIM = 20
EVALUATIONS = 340   # 17 generations of 20: another population would not land on it


def test_budget_is_whole_generations_of_twenty():
    assert de.budget(1) == de.budget(20) == 20
    assert de.budget(21) == de.budget(40) == 40 and de.budget(340) == 340


def test_both_sides_are_configured_as_jde_rand_1_bin_with_twenty():
    island = Island(0, Problem(ga.sphere_row, DIM, ga.LOWER, ga.UPPER, batched=False), de.CONFIG, seed=0)
    island.initialize()
    assert isinstance(island.algorithm, JDE) and island.algorithm.population == de.POPULATION == 20
    assert (island.algorithm.tau_f, island.algorithm.tau_cr, island.algorithm.bounds) == (0.1, 0.1, "resample")
    assert island.evaluations == 20 and island.archive.genomes.dtype == "float64"
    assert island.ask(1).shape == (20, DIM)
    pygmo = pytest.importorskip("pygmo")
    info = pygmo.algorithm(pygmo.sade(gen=1, seed=0, **de.SADE_OPTIONS)).get_extra_info()
    assert "Variant: 7" in info and "Self adaptation variant: 1" in info and "Memory: false" in info


def test_compare_against_pygmo_at_a_tiny_size():
    pytest.importorskip("pygmo")
    result = de.compare(DIM, EVALUATIONS, repeats=1, seed=2)
    assert (result["dim"], result["dtype"], result["population"]) == (DIM, "float64", 20)
    assert result["evaluations"] == EVALUATIONS and result["same_budget"]
    pygmo, variants = result["pygmo"], result["variants"]
    assert list(variants) == list(de.VARIANTS)
    assert [v for v in variants if variants[v]["like_for_like"]] == ["per_row"]
    for side in (pygmo, *variants.values()):
        assert side["evaluations"] == EVALUATIONS and side["same_count"]
        assert side["sane"] and max(side["best"]) < result["random_value"] / 2
        assert side["seconds"] > 0 and side["evals_per_s"] > 0 and side["evals_per_cpu_s"] > 0
    for side in variants.values():
        assert side["vs_pygmo"] == pytest.approx(side["evals_per_s"] / pygmo["evals_per_s"])
        assert side["vs_pygmo_cpu"] == pytest.approx(side["evals_per_cpu_s"] / pygmo["evals_per_cpu_s"])
        assert len(side["vs_pygmo_runs"]) == len(side["vs_pygmo_cpu_runs"]) == 1
        # timed separately: on a busy machine the fitness alone may time above the whole
        # evaluation, so no order between them is asserted
        assert side["overhead_us"] == pytest.approx(side["us_per_eval"] - side["fitness_us"])
        assert side["fitness_us"] > 0
    lines = "\n".join(de.format_lines(result))
    assert "pygmo jDE (pop 20)" in lines and "(a) mpievo jDE" in lines and "x pygmo" in lines
    assert "NOT below" not in lines and "DIFFER" not in lines


def test_compare_without_pygmo_reports_no_ratio():
    calls = []

    def absent(dim, evaluations, seed):
        calls.append((dim, evaluations, seed))

    result = de.compare(DIM, 300, repeats=2, seed=5, reference=absent)
    assert calls == [(DIM, 300, 5), (DIM, 300, 6)]        # same budget and seeds as mpievo's
    assert result["pygmo"] is None and result["same_budget"]
    for side in result["variants"].values():
        assert side["evaluations"] == 300 and side["same_count"] and side["sane"]
        assert side["vs_pygmo"] is None and side["vs_pygmo_cpu"] is None and side["vs_pygmo_runs"] == []
    assert "pygmo jDE: not installed" in "\n".join(de.format_lines(result))
