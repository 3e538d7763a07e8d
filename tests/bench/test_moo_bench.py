"""``mpievo bench moo``: a tiny grid, every point re-evaluated, the table, the refusals."""

import numpy as np
import pytest

pytest.importorskip("moocore", reason="moocore (the moo extra) is not installed")

from mpievo.bench import moo as bm  # noqa: E402
from mpievo.cli.main import main as cli_main  # noqa: E402
from mpievo.comm.protocol import SelfComm  # noqa: E402
from mpievo.evo.moo.problems import moo_problem  # noqa: E402

TINY = dict(problems=("zdt1", "dtlz2:3"), seeds=(0,), algorithms=("nsga2", "smsemoa", "moead"), budget=192,
            islands=2, population=8, interval=2, emigrants=2)


def test_tiny_grid_rows_and_table():
    try:
        import pygmo
    except ImportError:
        pygmo = None
    options = bm.MooBenchOptions(**TINY)
    rows = bm.bench_moo(SelfComm(), options, pygmo, log=lambda text: None)
    solvers = {"mpievo nsga2", "mpievo smsemoa", "mpievo moead"} | ({"pygmo nsga2", "pygmo moead"} if pygmo else set())
    assert {r["solver"] for r in rows} == solvers and len(rows) == 2 * len(solvers)
    for row in rows:
        assert 0 <= row["hypervolume"] < np.prod(row["reference_point"])
        assert row["evaluations"] <= TINY["budget"]
        if row["solver"].startswith("mpievo"):
            assert row["evaluations"] == TINY["budget"]
    table = bm.summary_table(rows, options)
    assert "| zdt1 | 2 | 30 | (1.1, 1.1) |" in table and "| dtlz2:3 | 3 | 12 | (1.1, 1.1, 1.1) |" in table
    assert "192 evaluations per run over 2 islands of 8" in table
    assert ("mpievo smsemoa's median >= every peer's best on" in table) == (pygmo is not None)


def test_check_refuses_wrong_points_and_budgets():
    problem = moo_problem("zdt1", dim=4)
    genomes = np.random.default_rng(0).random((5, 4))
    run = {"points": problem(genomes), "genomes": genomes, "evaluations": 10}
    assert bm.check_run("ok", problem, run, 10) >= 0
    with pytest.raises(bm.MooCheckError, match="expected at most 9 evaluations, got 10"):
        bm.check_run("over", problem, run, 9)
    wrong = {**run, "points": run["points"] + np.array([0.0, 1e-6])}
    with pytest.raises(bm.MooCheckError, match="expected re-evaluated objectives equal"):
        bm.check_run("wrong", problem, wrong, 10)


def test_options_are_refused_with_what_was_expected(capsys):
    assert cli_main(["bench", "moo", "--problems", "zdt1:3", "--population", "10", "--no-peers"]) == 2
    err = capsys.readouterr().err
    assert "expected ':2' or more objectives for a DTLZ or WFG (ZDT: 2 only), got 'zdt1:3'" in err
    assert "population: expected a multiple of 4" in err
    with pytest.raises(ValueError, match="expected a problem among"):
        bm.parse_problem("sphere")


def test_defaults_mode_leaves_both_sides_at_their_defaults(monkeypatch):
    try:
        import pygmo
    except ImportError:
        pygmo = None
    options = bm.MooBenchOptions(problems=("zdt1", "dtlz2:2"), seeds=(0, 1), budget=600, islands=2, defaults=True)
    rows = bm.bench_moo(SelfComm(), options, pygmo, log=lambda text: None)
    pymoo = bm.pymoo_available()
    assert {r["solver"] for r in rows} == ({"mpievo nsga2"} | ({"pygmo nsga2"} if pygmo else set())
                                           | ({"pymoo nsga2"} if pymoo else set()))
    for row in rows:     # 2 islands of 100 (every side's population) and 2 generations of 100 each
        assert row["dim"] == (30 if row["problem"] == "zdt1" else 11)
        # pymoo: 3 generations of at most 100 (it drops duplicate children before evaluating them)
        assert 500 < row["evaluations"] <= 600 if row["solver"] == "pymoo nsga2" else row["evaluations"] == 600
    table = bm.defaults_table(rows, options)
    assert "| zdt1 | 2 | 30 | " in table and "only engine.algorithm, run.islands, run.budget" in table
    if pygmo is not None:
        wins = sum(np.median([r["hypervolume"] for r in rows if r["problem"] == p and r["solver"] == "mpievo nsga2"])
                   >= np.median([r["hypervolume"] for r in rows if r["problem"] == p and r["solver"] == "pygmo nsga2"])
                   for p in options.problems)
        assert f"mpievo nsga2's median >= pygmo nsga2's median on {wins} of 2 problems" in table
    if pymoo:             # pymoo's column beside pygmo's; pygmo's (or, without it, pymoo's) is the one compared
        assert "pymoo nsga2 median [min, max]" in table and "pymoo: NSGA2 at its defaults" in table
        assert ("mpievo nsga2 >= pygmo nsga2" in table) == (pygmo is not None)
        assert ("mpievo nsga2 >= pymoo nsga2" in table) == (pygmo is None)
    monkeypatch.setattr(bm, "pymoo_available", lambda: False)   # without pymoo: pygmo's nsga2 at defaults only
    options = bm.MooBenchOptions(problems=("dtlz2:2",), seeds=(0,), budget=400, islands=2, defaults=True)
    rows = bm.bench_moo(SelfComm(), options, pygmo, log=lambda text: None)
    assert [r["solver"] for r in rows] == ["mpievo nsga2"] + (["pygmo nsga2"] if pygmo else [])
