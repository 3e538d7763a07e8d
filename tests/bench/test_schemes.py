"""``mpievo bench schemes``: the checks, and a tiny sweep launched at P = 1, 2 (the workloads:
tests/plan/test_workloads.py)."""

import csv
import json

import numpy as np
import pytest

from mpievo.cli.main import main as cli_main
from mpievo.bench.schemes import ModelCheckError, SchemesCheckError, bench_schemes, check_rows, median_rows
from mpievo.bench.schemes_report import CSV_COLUMNS
from mpievo.plan.timing import Constants
from mpievo.plan.workloads import SCHEMES, SchemesOptions

BUDGET = 64
#: a model without engine and loop costs: 0 s at cost 0, outside any time bound
ZERO_MODEL = {"cores": 64, "engine": {"100": {"row_s": 0.0, "breed_s": 0.0}},
              "intra": {"latency_s": 0.0, "bandwidth_Bps": 1e12}}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep with a model that is always wrong: it still writes its files, marks the
    runs and then fails naming them."""
    out = tmp_path_factory.mktemp("schemes")
    options = SchemesOptions(ps=(1, 2), costs_ms=(0.0, 1.0), modes=("vary",), dims=(100,), budget=BUDGET,
                             fast_factor=1, sweeps=2, short_repeats=1)
    with pytest.raises(ModelCheckError) as caught:
        bench_schemes(options, out, Constants.from_dict(ZERO_MODEL))
    return caught.value.result, out, str(caught.value)


def _row(result, scheme, ranks, mode="none"):
    return next(r for r in result["rows"] if (r["scheme"], r["ranks"], r["mode"]) == (scheme, ranks, mode))


def test_tiny_sweep_writes_every_column_and_row(sweep):
    result, out, _ = sweep
    with open(out / "schemes.csv") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == CSV_COLUMNS
    assert sorted((r["mode"], r["scheme"], r["ranks"]) for r in table) == sorted(
        (m, s, str(p)) for m in ("none", "vary") for s in SCHEMES for p in (1, 2))
    assert json.loads((out / "schemes.json").read_text())["rows"] == result["rows"]
    assert "| cost 0, 100 genes | master_worker_steady |" in (out / "table.md").read_text()
    assert result["conditions"]["oversubscribed_p"] == [p for p in (1, 2) if p > result["conditions"]["cores"]]


def test_tiny_sweep_keeps_each_runs_median_over_the_sweeps(sweep):
    for row in sweep[0]["rows"]:
        walls = row["sweep_walls"]
        assert len(walls) == 2 and row["wall_s"] == max(walls)      # the upper median of two
        assert row["evals_per_s"] == row["evaluations"] / row["wall_s"]


def test_median_rows_keep_the_whole_median_run_per_scheme_and_p():
    runs = [{"workload": "w", "scheme": "island", "ranks": p, "wall_s": w, "tag": t}
            for t, (p, w) in enumerate([(2, 3.0), (4, 1.0), (2, 1.0), (4, 5.0), (2, 2.0), (4, 9.0)])]
    rows = median_rows(runs)
    assert [(r["ranks"], r["wall_s"], r["tag"], r["sweep_walls"]) for r in rows] == [
        (2, 2.0, 4, [3.0, 1.0, 2.0]), (4, 5.0, 3, [1.0, 5.0, 9.0])]


def test_tiny_sweep_fails_naming_every_run_the_model_misses(sweep):
    result, out, message = sweep
    assert "-100 % !" in (out / "table.md").read_text()
    # the model predicts 0 s at cost 0: each of those runs named once, a one-rank run for every scheme
    assert message.count("cost 0, 100 genes, every scheme, P=1: expected the model's 0 s within 25 %") == 1
    lines = [line.strip() for line in message.splitlines()]
    assert all(sum(line.startswith(f"cost 0, 100 genes, {s}, P=2: expected") and "(-100 %" in line
                   for line in lines) == 1 for s in SCHEMES)


def test_tiny_sweep_counts_evaluations_and_agrees_on_the_best(sweep):
    rows = sweep[0]["rows"]
    assert all(r["evaluations"] == BUDGET and r["stop_reason"] == "budget" for r in rows)
    assert len({r["best_fitness"] for r in rows}) == 1 and np.isfinite(rows[0]["best_fitness"])
    assert all(r["speedup"] == 1.0 for r in rows if r["ranks"] == 1)
    assert all(len(r["utilisation"]) == r["ranks"] and 0 < r["utilisation_mean"] <= 1 for r in rows)
    # 1 ms per child on average: at least 64 ms inside the fitness, summed over ranks
    vary = [r for r in rows if r["mode"] == "vary"]
    assert all(sum(r["utilisation"]) * r["wall_s"] >= BUDGET * 1e-3 * 0.9 for r in vary)


def test_tiny_sweep_counts_every_communicators_bytes(sweep):
    result = sweep[0]
    assert _row(result, "island", 1)["bytes_per_generation"] == 0
    island = _row(result, "island", 2)["bytes_per_generation_by_purpose"]
    assert island["migration"] > 0 and "evaluation" not in island
    replicated = _row(result, "replicated", 2)
    # every rank sends its row block's fitness once per batch: 8 bytes per evaluation
    sent = replicated["bytes_per_generation_by_purpose"]["evaluation"] * replicated["generations"]
    assert sent == pytest.approx(8 * BUDGET)
    for scheme in ("hybrid", "centralized"):   # on the group communicator: half the genomes go out
        row = _row(result, scheme, 2)
        sent = row["bytes_per_generation_by_purpose"]["evaluation"] * row["generations"]
        assert sent >= (BUDGET // 2) * (100 * 4 + 8)
    for scheme in ("master_worker", "master_worker_steady"):   # rank 0 evaluates nothing
        row = _row(result, scheme, 2)
        sent = row["bytes_per_generation_by_purpose"]["evaluation"] * row["generations"]
        assert sent >= BUDGET * (100 * 4 + 8) and row["utilisation"][0] == 0


def _fake_rows(**changes):
    rows = [{"workload": "w", "dim": 100, "cost_ms": 5.0, "scheme": s, "ranks": p, "evaluations": BUDGET,
             "best_fitness": 1.5} for s in SCHEMES for p in (1, 2)]
    rows[-1].update(changes)
    return rows


def test_check_rows_names_wrong_counts_and_disagreeing_schemes():
    options = SchemesOptions(budget=BUDGET)
    check_rows(_fake_rows(), options)
    with pytest.raises(SchemesCheckError, match=f"{SCHEMES[-1]}, P=2: expected 64 evaluations"):
        check_rows(_fake_rows(evaluations=BUDGET - 1), options)
    with pytest.raises(SchemesCheckError, match="finite best"):
        check_rows(_fake_rows(best_fitness=float("nan")), options)
    with pytest.raises(SchemesCheckError, match="w: expected the same best fitness"):
        check_rows(_fake_rows(best_fitness=1.25), options)
    again = _fake_rows()[-1:]          # a second sweep's run that found another best
    with pytest.raises(SchemesCheckError, match=f"{SCHEMES[-1]} P=2: 1.25"):
        check_rows(_fake_rows() + [dict(again[0], best_fitness=1.25)], options)
    large = [dict(r, dim=10**7, evaluations=options.large_budget) for r in _fake_rows()]
    check_rows(large, options)      # from large_dim the smaller budget is the expected count
    fast = [dict(r, cost_ms=0.0, evaluations=32 * BUDGET) for r in _fake_rows()]
    check_rows(fast, options)       # cost 0 below fast_dim genes: 32 times the budget
    with pytest.raises(SchemesCheckError, match="expected 2048 evaluations"):
        check_rows([dict(r, cost_ms=0.0) for r in _fake_rows()], options)


def test_cli_refuses_under_mpiexec_and_rejects_a_sweep_without_p1(monkeypatch, capsys):
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert cli_main(["bench", "schemes"]) == 2
    assert "expected to start without mpiexec" in capsys.readouterr().err
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    assert cli_main(["bench", "schemes", "--p", "2,4"]) == 2
    assert "including 1" in capsys.readouterr().err
    assert cli_main(["bench", "schemes", "--sweeps", "0"]) == 2
    assert "bench.schemes.sweeps: expected an int >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["bench", "schemes", "--costs", "5xs"])
