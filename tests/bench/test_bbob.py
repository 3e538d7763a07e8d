"""``mpievo bench bbob``: a tiny BBOB grid, COCO's counters as the check, the files agree."""

import math
import re

import numpy as np
import pytest

pytest.importorskip("cocoex", reason="cocoex (coco-experiment, the bench extra) is not installed")

from mpievo.cli.main import main as cli_main  # noqa: E402
from mpievo.comm.protocol import SelfComm  # noqa: E402
from mpievo.bench import bbob as bb  # noqa: E402
from mpievo.bench.bbob_report import CSV_COLUMNS, read_csv, summary  # noqa: E402

TINY = dict(functions=(1, 3), dims=(5,), instances=(1,), seeds=(0,), budget_per_dim=50, islands=2)
PEERS_HERE = list(bb.peer_modules(bb.PEERS))      # the peers whose module imports here


def _check_rows(rows):
    """What every row must satisfy, mpievo's or a peer's."""
    for row in rows:
        where = f"{row['solver']} f{row['function']}"
        if row["solver"].startswith("mpievo"):
            assert row["evaluations"] == row["budget"] or row["stop"] == "target", where
        assert 0 < row["evaluations"] <= row["budget"], where
        assert row["df_best"] >= 0, where
        assert row["log10_df"] == pytest.approx(math.log10(row["df_best"]) if row["df_best"] > 0 else -math.inf,
                                                rel=1e-12), where
        hits = row["evals_to_target"]
        # a target is reached exactly when the best is within it, never after the last evaluation
        assert [e is not None for e in hits] == [row["df_best"] <= t for t in bb.TARGETS], where
        reached = [e for e in hits if e is not None]
        assert reached == sorted(reached) and all(1 <= e <= row["evaluations"] for e in reached), where


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("bbob")
    # three seeds: a median of three is not the mean
    options = bb.BbobOptions(**{**TINY, "seeds": (0, 1, 2)}, peers=bool(PEERS_HERE))
    result = bb.bench_bbob(SelfComm(), options, out, log=lambda *a, **k: None)
    return result, out


def test_tiny_run_writes_consistent_files(tiny):
    result, out = tiny
    rows = read_csv(out / "runs.csv")
    solvers = ["mpievo:default"] + PEERS_HERE
    assert [(r["function"], r["seed"], r["solver"]) for r in rows] == [
        (f, seed, s) for f in (1, 3) for seed in (0, 1, 2) for s in solvers]
    assert open(out / "runs.csv").readline().strip().split(",") == list(CSV_COLUMNS)
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in rows] == [
        {k: v for k, v in r.items() if k != "wall_s"} for r in result["rows"]]
    _check_rows(rows)
    table = (out / "table.md").read_text()
    for (function, dim, solver), s in summary(rows).items():
        line = next(li for li in table.splitlines() if li.startswith(f"| f{function} | {dim} | {solver} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        median = np.median([r["log10_df"] for r in rows if (r["function"], r["solver"]) == (function, solver)])
        assert float(cells[4]) == pytest.approx(median, abs=0.006)
        hit = sum(e is not None for r in rows if (r["function"], r["solver"]) == (function, solver)
                  for e in r["evals_to_target"])
        assert cells[5] == f"{hit}/{3 * len(bb.TARGETS)}"
    assert (out / "ecdf.png").stat().st_size > 0 or "matplotlib" in table


def test_target_stops_the_run_with_coco_agreeing():
    # f1 in 5-D: CMA-ES reaches 1e-8 long before 5000 evaluations and the target ends the run
    options = bb.BbobOptions(**{**TINY, "functions": (1,), "budget_per_dim": 1000},
                             assignments=("engine.algorithm=cmaes",))
    (row,) = bb.bench_bbob(SelfComm(), options, log=lambda *a, **k: None)["rows"]
    assert row["stop"] == "target" and row["evaluations"] < row["budget"]
    assert row["df_best"] <= bb.FINAL_TARGET
    _check_rows([row])


def test_evaluations_are_counted_by_coco(monkeypatch):
    # one evaluation that bypasses COCO's counter must be caught
    counted = bb.CocoFitness.__call__

    def leaky(self, genomes):
        values = counted(self, genomes[1:])
        return np.concatenate([[values.max()], values])

    monkeypatch.setattr(bb.CocoFitness, "__call__", leaky)
    with pytest.raises(bb.BbobCheckError, match="expected COCO's evaluations summed over ranks"):
        bb.bench_bbob(SelfComm(), bb.BbobOptions(**{**TINY, "functions": (1,)}), log=lambda *a, **k: None)


def test_a_run_short_of_the_budget_is_refused():
    # a job whose generations end it early (set after the bench dropped the job's own)
    options = bb.BbobOptions(**{**TINY, "functions": (1,), "budget_per_dim": 1000}, assignments=("run.generations=1",))
    with pytest.raises(bb.BbobCheckError, match="expected 5000 COCO evaluations .the budget; stop reason "
                                                "'generations'., got 384"):   # 2 x (64 + 128)
        bb.bench_bbob(SelfComm(), options, log=lambda *a, **k: None)


def test_a_peer_s_single_evaluation_records_as_a_batch_of_one():
    # the peers' scalar path must count, return and record the targets exactly as the batch path
    rng = np.random.default_rng(0)
    x = rng.uniform(-5, 5, (60, 3)) * np.geomspace(1, 1e-6, 60)[:, None]
    values = np.array([bb.coco_problem(1, 3, 1)(row) for row in x])
    fopt = values.min() - 1e-9 * np.ptp(values) / 50             # 1e-8 reached at the best row only
    batch, scalar = (bb.CocoFitness(bb.coco_problem(1, 3, 1), fopt) for _ in range(2))
    by_batch = np.concatenate([batch(x[:7]), batch(x[7:])])
    by_scalar = np.array([scalar.scalar(row) for row in x])
    assert np.array_equal(by_batch, by_scalar) and scalar.state() == batch.state()
    assert scalar.first_hit[0] is not None and scalar.first_hit[-1] == 1 + int(np.argmin(values))


def test_f_opt_is_the_optimum_value():
    problem = bb.coco_problem(3, 2, 1)
    fopt = bb.f_opt(3, 2, 1)
    x = np.random.default_rng(0).uniform(-5, 5, (200, 2))
    assert min(problem(row) for row in x) > fopt
    assert fopt == round(fopt, 2)     # BBOB's f_opt has two decimals


def test_jobs_default_word_and_overrides(tmp_path):
    job = tmp_path / "cma.toml"
    job.write_text('[run]\ngenerations = 7\nislands = 8\n[problem]\nname = "sphere"\n[engine]\nalgorithm = "cmaes"\n')
    options = bb.BbobOptions(jobs=("default", str(job)), islands=3, assignments=("engine.batch_size=16",))
    (label0, raw0), (label1, raw1) = bb.load_jobs(options)
    assert (label0, label1) == ("mpievo:default", "mpievo:cma")
    assert raw0 == {"engine": {"dtype": "float64", "batch_size": 16}, "run": {"islands": 3}}
    assert raw1 == {"run": {"islands": 3}, "engine": {"algorithm": "cmaes", "batch_size": 16}}


@pytest.mark.parametrize("given, message", [
    (dict(functions=(25,)), "bench.bbob.functions[0]: expected an int >= 1 and <= 24, got 25"),
    (dict(dims=()), "bench.bbob.dims: expected a non-empty list, each an int >= 1, got tuple ()"),
    (dict(budget_per_dim=0), "bench.bbob.budget_per_dim: expected an int >= 1, got 0"),
    (dict(seeds=(0, -1)), "bench.bbob.seeds[1]: expected an int >= 0, got -1"),
])
def test_bad_options_are_refused(given, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        bb.BbobOptions(**given)


def test_cli_runs_and_refuses(tmp_path, capsys):
    args = ["bench", "bbob", "--functions", "1", "--dims", "5", "--instances", "1", "--seeds", "0",
            "--budget-per-dim", "20", "--islands", "1", "--out", str(tmp_path)]
    assert cli_main(args) == 0
    assert (tmp_path / "runs.csv").exists() and "| f1 | 5 | mpievo:default | 1 |" in capsys.readouterr().out
    assert cli_main(args[:2] + ["--functions", "30"]) == 2
    assert "bench.bbob.functions[0]: expected an int >= 1 and <= 24, got 30" in capsys.readouterr().err


@pytest.mark.mpi(min_size=2)
def test_ranks_share_the_evaluations_and_agree_with_one_process(world, tmp_path_factory):
    from mpievo.comm import Communicator
    from mpi_support import all_ranks_agree

    options = bb.BbobOptions(**{**TINY, "islands": 4, "budget_per_dim": 60})   # 4 x 64 initial members
    quiet = dict(log=lambda *a, **k: None)
    spread = bb.bench_bbob(Communicator(world), options, **quiet)["rows"]
    alone = bb.bench_bbob(SelfComm(), options, **quiet)["rows"]
    same = [(r["evaluations"], r["df_best"]) for r in spread] == [(r["evaluations"], r["df_best"]) for r in alone]
    all_ranks_agree(world, same, f"{spread} vs {alone}")


def _quiet_bench(options, out=None, **kw):
    return bb.bench_bbob(SelfComm(), options, out, log=lambda *a, **k: None, **kw)


def test_resume_reuses_runs_of_the_same_job_and_runs_the_rest(tmp_path, monkeypatch):
    options = bb.BbobOptions(**{**TINY, "functions": (1,)})
    first = _quiet_bench(options, tmp_path)["rows"]
    with pytest.raises(FileExistsError, match=r"runs.csv: expected no earlier runs \(or --resume to reuse "
                                              r"them\), got 1 runs"):
        _quiet_bench(options, tmp_path)
    ran = []
    real = bb.run_mpievo
    monkeypatch.setattr(bb, "run_mpievo", lambda *a, **k: ran.append(a[2]) or real(*a, **k))
    grown = bb.BbobOptions(**{**TINY, "functions": (1, 3)})
    again = _quiet_bench(grown, tmp_path, resume=True)
    assert ran == [3]                                    # f1 was reused, f3 ran
    assert again["rows"][0] == first[0] and "1 runs reused" in again["notes"][0]
    assert [r["function"] for r in read_csv(tmp_path / "runs.csv")] == [1, 3]
    # another job (its digest differs) is another solver run: nothing reused
    changed = bb.BbobOptions(**{**TINY, "functions": (1,)}, assignments=("engine.batch_size=16",))
    _quiet_bench(changed, tmp_path, resume=True)
    assert ran == [3, 1]
    assert len(read_csv(tmp_path / "runs.csv")) == 3     # earlier runs outside the grid are kept


def test_runs_csv_is_written_after_every_run(tmp_path, monkeypatch):
    real, calls = bb.run_mpievo, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("rank failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(bb, "run_mpievo", second_fails)
    with pytest.raises(RuntimeError, match="rank failed"):
        _quiet_bench(bb.BbobOptions(**{**TINY, "functions": (1, 3)}), tmp_path)
    (kept,) = read_csv(tmp_path / "runs.csv")
    assert (kept["function"], kept["job"]) == (1, bb.digest(bb.load_jobs(bb.BbobOptions(**TINY))[0][1]))


def _row(function, dim, solver, log10_df):
    return {"function": function, "dim": dim, "solver": solver, "log10_df": log10_df,
            "evals_to_target": [None] * len(bb.TARGETS)}


def test_marks_follow_the_issue_rule():
    from mpievo.bench.bbob_report import comparisons, format_comparisons, mark

    assert [mark(-8.5, -13.0), mark(1.0, 1.1), mark(1.0, 1.2), mark(1.2, 1.0), mark(-7.9, -8.5)] == \
        ["=", "=", "+", "-", "-"]
    rows = [_row(1, 10, "mpievo:a", -9), _row(1, 10, "peer", -12),         # tie: both at 1e-8
            _row(2, 10, "mpievo:a", 2.0), _row(2, 10, "peer", 0.5),        # 1.5 behind
            _row(3, 10, "mpievo:a", 1.0), _row(3, 10, "peer", 1.3),        # ahead
            _row(4, 10, "mpievo:a", 0.0), _row(4, 10, "peer", -0.4),       # 0.4 behind
            _row(5, 10, "peer", 0.0)]                                      # not shared: not a cell
    (key, pair), = [(k, v) for k, v in comparisons(rows).items()]
    assert key == ("mpievo:a", "peer")
    assert pair["marks"] == {(1, 10): "=", (2, 10): "-", (3, 10): "+", (4, 10): "-"}
    assert pair["worst"] == (1.5, 2, 10) and pair["far"] == 1     # f2: 1.5 behind; f4: 0.4
    text = format_comparisons(rows)
    assert "- mpievo:a vs peer: better or equal on 2 of 4 cells (50.0 %), more than 1.0 behind on 1; " \
        "worst: f2 10-D, 1.50 orders" in text
    assert "| f3 | 10 | 1.00 | 1.30 | + |" in text


def test_cli_resume_needs_out(capsys):
    assert cli_main(["bench", "bbob", "--functions", "1", "--resume"]) == 2
    assert "--resume: expected --out DIR (the runs.csv to resume), got none" in capsys.readouterr().err


def test_comparisons_are_against_the_peers_and_count_from_the_final_target():
    from mpievo.bench.bbob_report import comparisons

    rows = [_row(3, 10, "mpievo:a", 0.3), _row(3, 10, "mpievo:b", -7.5), _row(3, 10, "peer", -math.inf)]
    pairs = comparisons(rows)
    assert list(pairs) == [("mpievo:a", "peer"), ("mpievo:b", "peer")]
    assert pairs[("mpievo:a", "peer")]["worst"] == (pytest.approx(8.3), 3, 10)
    assert pairs[("mpievo:b", "peer")]["marks"] == {(3, 10): "-"}          # -7.5 is not at 1e-8
    # without peers, each mpievo solver against the ones after it
    assert list(comparisons(rows[:2])) == [("mpievo:a", "mpievo:b")]


def test_against_the_best_peer_of_each_cell():
    from mpievo.bench.bbob_report import against_best_peer, format_comparisons

    rows = [_row(1, 10, "mpievo:a", -9), _row(1, 10, "p", -12), _row(1, 10, "q", 1.0),      # = (both solved)
            _row(2, 10, "mpievo:a", 0.0), _row(2, 10, "p", 0.05), _row(2, 10, "q", -1.5),   # far behind q
            _row(3, 40, "mpievo:a", -2.0), _row(3, 40, "p", -1.0), _row(3, 40, "q", -1.95),  # ahead of both
            _row(4, 40, "mpievo:a", -0.5), _row(4, 40, "p", -0.7), _row(4, 40, "q", 3.0)]    # 0.2 behind p
    figures = against_best_peer(rows)["mpievo:a"]
    assert figures[None] == {"good": 2, "cells": 4, "far": 1, "solved": {"mpievo:a": 1, "p": 1, "q": 0}}
    assert (figures[10]["good"], figures[10]["far"], figures[40]["good"], figures[40]["far"]) == (1, 1, 1, 0)
    assert "- mpievo:a vs the best peer of each cell, all dims: better or equal on 2 of 4 (50.0 %), more " \
        "than 1.0 behind on 1; cells whose median reaches 1e-8: mpievo:a 1, p 1, q 0" in format_comparisons(rows)


@pytest.mark.skipif(not bb.peer_modules(["cma:bipop"]), reason="cma (pycma, the bench extra) is not installed")
def test_bipop_peer_stays_within_the_budget_and_stops_at_the_target():
    import cma

    # f1 in 2-D: BIPOP reaches 1e-8 well inside 2000 evaluations and stops there;
    # f15 (Rastrigin) does not: the budget, exactly, ends it (an evaluation beyond it is refused)
    solved = bb.run_peer(cma, "cma:bipop", 1, 2, 1, 0, 2000, bb.f_opt(1, 2, 1))
    short = bb.run_peer(cma, "cma:bipop", 15, 2, 1, 0, 1003, bb.f_opt(15, 2, 1))
    assert solved["df_best"] <= bb.FINAL_TARGET and solved["evaluations"] < 2000
    assert short["evaluations"] == 1003
    _check_rows([{**solved, "solver": "cma:bipop"}, {**short, "solver": "cma:bipop"}])
    with pytest.raises(ValueError, match=re.escape("bench.bbob.peer_names: expected names among")):
        bb.BbobOptions(peer_names=("cma:ipop",))
