"""``mpievo plan --measure``: schemes run at several rank counts against the cost model."""

import json

import pytest

from mpievo.cli.main import main as cli_main
from mpievo.plan.measured import MeasureSpec, compare, format_comparison, measure_against_model
from mpievo.plan.timing import Constants

CONSTANTS = {"source": "test", "cores": 2, "engine": {"100": {"row_s": 0.0, "breed_s": 0.0}},
             "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}}


def _row(scheme, ranks, wall):
    return {"scheme": scheme, "ranks": ranks, "ranks_per_island": 2 if scheme == "hybrid" else 1, "islands": 4,
            "dim": 100, "capacity": 2, "budget": 16, "cost_ms": 10.0, "mode": "sleep", "generations": 1,
            "wall_s": wall, "bytes_per_generation_by_purpose": {}, "loadavg_1min": 1.0}


def test_errors_and_spreads_by_hand():
    rows = [_row("island", 2, w) for w in (0.05, 0.04, 0.08)] + [_row("hybrid", 4, 0.05)]
    constants = Constants.from_dict(CONSTANTS)
    table = compare(rows, constants, interval=2, fitted=constants)
    island, hybrid = table
    # island, 2 ranks, 4 islands of 2 + 2 rows: each rank 2 islands x 2 rows x 10 ms x 2 generations
    assert island["model_s"] == pytest.approx(0.08)
    assert (island["measured_s"], island["fastest_s"], island["slowest_s"]) == (0.05, 0.04, 0.08)
    assert island["error"] == pytest.approx(0.08 / 0.05 - 1)
    assert (island["error_low"], island["error_high"]) == pytest.approx((0.0, 1.0))
    # hybrid, 4 ranks in groups of 2: each leader 2 islands, each batch of 2 rows split 1 + 1
    assert hybrid["model_s"] == pytest.approx(2 * 2 * 1 * 0.01)
    text = format_comparison(table, MeasureSpec(), cores=2, source="test")
    assert ("| island | 2 | 1 | 0.05 s [0.04, 0.08] | 50 ms | 0.08 s | +60 % [+0, +100] | 0.08 s | +60 % | 1.0 |"
            in text)
    assert "| hybrid | 4 (on 2 cores) |" in text


def test_bad_specs_are_refused_before_any_run(capsys):
    with pytest.raises(ValueError, match=r"schemes: expected some of .*, got \('islands',\)"):
        MeasureSpec(schemes=("islands",)).check()
    with pytest.raises(ValueError, match="budget: expected at least 8 evaluations"):
        MeasureSpec(budget=4).check()
    with pytest.raises(ValueError, match="dim: expected at least 100000 genes with evaluator breeding"):
        MeasureSpec(schemes=("hybrid_evaluator",), dim=1000).check()
    MeasureSpec(schemes=("hybrid_evaluator",), dim=100_000).check()
    assert cli_main(["plan", "--measure", "--schemes", "island,nope"]) == 2
    assert "mpievo plan --measure: schemes: expected some of" in capsys.readouterr().err


@pytest.mark.heavy
def test_a_real_measurement_at_one_and_two_ranks(tmp_path):
    """Launched jobs at P = 1 and 2 (2 islands of 8: one generation after the first; seconds): every scheme's row is there, with the model's time."""
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(CONSTANTS))
    spec = MeasureSpec(schemes=("island", "hybrid"), ranks=(1, 2), dim=100, cost_ms=1.0, repeats=1, budget=32)
    table, text = measure_against_model(spec, str(path))
    assert [(t["scheme"], t["ranks"]) for t in table] == [("island", 1), ("hybrid", 2), ("island", 2)]
    assert all(t["measured_s"] > 0 and t["model_s"] > 0 and t["generations"] == 1 for t in table)
    assert "| hybrid | 2 |" in text
