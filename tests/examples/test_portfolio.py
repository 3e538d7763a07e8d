"""examples/portfolio.toml: the island portfolio for numeric problems (CMA-ES-IPOP and
SHADE islands on a ring) validates as documented and optimises its own problem."""

from pathlib import Path

import pytest

import mpievo
from mpievo.config import load_config, validate

PORTFOLIO = Path(__file__).resolve().parents[2] / "examples" / "portfolio.toml"


@pytest.fixture(scope="module")
def job():
    raw, source = load_config(PORTFOLIO)
    return validate(raw, 1, source)


def test_four_islands_alternate_cmaes_ipop_and_shade_in_float64(job):
    assert job.n_islands == 4
    assert [e.algorithm for e in job.engines] == ["cmaes", "shade", "cmaes", "shade"]
    assert all(e.dtype == "float64" for e in job.engines)
    cmaes = [e for e in job.engines if e.algorithm == "cmaes"]
    assert all(e.cma_restarts == "ipop" and e.cma_popsize_growth == 4 for e in cmaes)
    assert job.run.leader_rate == 7 and job.run.leader_margin == 1e-6 and job.run.budget == 100_000
    assert job.run.finish_diversity == 1e-3 and job.run.progress_rate == 4 and job.run.restart_after == 0


def test_every_island_sends_to_an_island_of_the_other_kind(job):
    kinds = [e.algorithm for e in job.engines]
    for epoch in (1, 2, 7):
        edges = [(i, d) for i, targets in enumerate(job.schedule.destinations(epoch)) for d in targets]
        assert edges and all(kinds[i] != kinds[d] for i, d in edges), edges
    assert job.schedule.adaptive is None    # chosen off on the pilot (see the file)


def test_a_short_run_improves_well_on_its_initial_populations():
    # a budget of only the four initial populations: their best is the baseline
    initial = mpievo.minimize(config=str(PORTFOLIO), budget=4 * 64)
    assert initial.stop_reason == "budget" and initial.migrations == 0
    result = mpievo.minimize(config=str(PORTFOLIO), budget=4000)
    assert result.stop_reason == "budget" and result.evaluations == 4000
    spent = [i["evaluations"] for i in result.islands]
    assert sum(spent) == 4000 and max(spent) > 2 * min(spent), spent     # the budget followed the leader
    assert result.migrations >= 1
    assert result.fun < 0.5 * initial.fun, (result.fun, initial.fun)
