"""``mpievo run`` in this process (one rank): output files, options, config errors."""

import json

import numpy as np
import pytest
from mpi4py import MPI

from mpievo.cli.main import main

# pytest-mpi also runs unmarked tests on every rank of an MPI stage
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1,
                                reason="runs `mpievo run` on COMM_WORLD in this process: one rank only")


def _run(*argv):
    return main(["run", *map(str, argv)])


def test_run_writes_summary_logs_plot_and_checkpoint(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run("--generations", 12, "--dim", 5, "--islands", 3, "--out", out, "--log-every", 4,
                "--set", "engine.batch_size=16", "--set", "engine.capacity=8", "--progress", "lines") == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("config", "best_fitness", "best_genome", "evaluations", "generations", "wall_s",
                "evals_per_s", "bytes_sent", "islands"):
        assert key in summary, key
    assert summary["generations"] == 12 and len(summary["best_genome"]) == 5
    assert summary["config"]["run"]["islands"] == 3 and summary["config"]["problem"]["dim"] == 5
    assert [i["island"] for i in summary["islands"]] == [0, 1, 2]
    assert summary["best_fitness"] == min(i["best_fitness"] for i in summary["islands"])
    assert summary["evaluations"] == sum(i["evaluations"] for i in summary["islands"]) == 3 * (8 + 12 * 16)
    lines = [json.loads(line) for line in (out / "islands" / "island-0002.jsonl").read_text().splitlines()]
    assert [line["generation"] for line in lines] == [0, 4, 8, 12]
    assert set(lines[0]) == {"generation", "best", "mean", "diversity", "evaluations", "nonfinite", "migrations",
                             "immigrants", "steps"}
    assert summary["stop_reason"] == "generations" and lines[-1]["steps"] == 12
    assert summary["nonfinite_evaluations"] == 0 and lines[-1]["nonfinite"] == 0
    assert (out / "convergence.png").stat().st_size > 1000
    assert (out / "checkpoints" / "manifest.json").exists()
    text = capsys.readouterr().out
    assert "gen 12/12" in text and "done: generation 12" in text


def test_budget_and_target_flags_end_the_run(tmp_path, capsys):
    small = ["--dim", 4, "--islands", 2, "--progress", "lines", "--set", "engine.capacity=8",
             "--set", "engine.batch_size=16"]
    assert _run("--budget", 1001, "--out", tmp_path / "b", *small) == 0
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["evaluations"] == 1001 and [i["evaluations"] for i in summary["islands"]] == [501, 500]
    assert summary["stop_reason"] == "budget" and summary["generations"] == -(-(501 - 8) // 16)
    assert summary["config"]["run"]["budget"] == 1001        # before the embedded job's 32000 generations
    assert f"gen {summary['generations']}/{summary['generations']}" in capsys.readouterr().out
    assert _run("--target", 8.5, "--generations", 10**6, "--out", tmp_path / "t", *small) == 0
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["stop_reason"] == "target" and summary["best_fitness"] <= 8.5
    assert f"target 8.5 reached by generation {summary['generations']}" in capsys.readouterr().out


def test_large_genome_goes_to_npy(tmp_path):
    import numpy as np

    out = tmp_path / "big"
    assert _run("--generations", 1, "--problem", "sphere", "--dim", 1500, "--out", out, "--progress", "none",
                "--set", "engine.batch_size=4", "--set", "engine.capacity=4") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_genome"] == "best_genome.npy"
    assert np.load(out / "best_genome.npy").shape == (1500,)


def test_config_file_and_resume_extends_a_finished_run(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('[run]\nislands = 2\ngenerations = 6\n[problem]\nname = "sphere"\ndim = 4\n'
                      '[engine]\nbatch_size = 8\ncapacity = 6\n')
    out = tmp_path / "run"
    assert _run(config, "--out", out, "--progress", "none") == 0
    assert _run("--resume", out, "--generations", 10, "--progress", "none") == 0
    resumed = json.loads((out / "summary.json").read_text())
    straight = tmp_path / "straight"
    assert _run("--config", config, "--generations", 10, "--out", straight, "--progress", "none") == 0
    expected = json.loads((straight / "summary.json").read_text())
    assert resumed["best_genome"] == expected["best_genome"] and resumed["generations"] == 10
    assert resumed["resumed_from"].endswith("g000000006")


def test_resume_refuses_a_changed_seed(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run("--generations", 2, "--dim", 3, "--out", out, "--progress", "none") == 0
    capsys.readouterr()
    assert _run("--resume", out, "--seed", 5, "--generations", 4) == 2
    err = capsys.readouterr().err
    assert "refusing to resume" in err and "run.seed" in err


@pytest.mark.parametrize("argv, fragment", [
    (["--islands", 0, "--set", "run.bogus=1"], "run.bogus: expected a key among ["),
    (["--dim", "ten"], "problem.dim: expected an int >= 1, got str 'ten'"),
    (["--problem", "mymod_absent:f", "--dim", 3], "problem.lower: expected a bound for user function"),
    (["--set", "migration.topology=star"], "migration.topology: expected one of"),
    (["--resume", "/nonexistent/run"], "no checkpoint directory /nonexistent/run/checkpoints"),
])
def test_config_errors_exit_2_with_one_message(argv, fragment, capsys, tmp_path):
    assert _run(*argv, "--out", tmp_path / "x") == 2
    captured = capsys.readouterr()
    assert fragment in captured.err and captured.err.count("mpievo run:") == 1
    assert not (tmp_path / "x" / "summary.json").exists()


def test_show_config_and_help_config(capsys):
    assert _run("--show-config", "--islands", 2) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["run"]["islands"] == 2 and shown["problem"]["name"] == "rastrigin"
    assert shown["run"]["checkpoint_seconds"] == 600
    assert _run("--help-config") == 0
    text = capsys.readouterr().out
    assert "[migration.adaptive]" in text and "\n  budget = <unset>  # an int >= 1 or none; " in text
    departures = text.split("departs from these defaults")[1]     # the embedded job's own settings
    assert "#   engine.capacity = 8192\n" in departures and "engine.algorithm" not in departures


def _shown(capsys, *argv) -> dict:
    capsys.readouterr()
    assert _run("--show-config", *argv) == 0
    return json.loads(capsys.readouterr().out)


def test_problem_flag_starts_a_fresh_problem_table(capsys):
    default = _shown(capsys, "--dim", 5)["problem"]           # --dim alone keeps the default problem
    assert default["shift"] and default["rotate"] and default["dim"] == 5
    fresh = _shown(capsys, "--problem", "sphere")["problem"]
    assert (fresh["name"], fresh["shift"], fresh["rotate"], fresh["dim"]) == ("sphere", False, False, 100)
    assert "lower" not in fresh
    again = _shown(capsys, "--problem", "sphere", "--set", "problem.shift=true", "--lower", "[-1, -2]",
                   "--upper", 3, "--dim", 2)["problem"]
    assert again["shift"] and again["lower"] == [-1.0, -2.0] and again["upper"] == 3.0


def test_user_function_from_the_command_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "mymod.py").write_text("def f(X):\n    return (X * X).sum(axis=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert _run("--problem", "mymod:f", "--dim", 5, "--lower", -1, "--upper", 1, "--generations", 3,
                "--out", out, "--progress", "none", "--set", "engine.capacity=8",
                "--set", "engine.batch_size=8") == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["problem"] == {"name": "mymod:f", "dim": 5, "shift": False, "rotate": False,
                                            "seed": 0, "lower": -1.0, "upper": 1.0, "maximize": False,
                                            "batched": True, "time_limit": 0.0, "time_limit_method": "process", "n_obj": 1,
                                            "fidelity_sample": 1.0, "fidelity_margin": 0.0}
    genome = summary["best_genome"]
    assert len(genome) == 5 and all(-1 <= g <= 1 for g in genome)
    assert summary["best_fitness"] == pytest.approx(sum(g * g for g in genome), rel=1e-5)


def test_nan_fitness_is_counted_logged_and_warned(tmp_path, capsys, monkeypatch):
    # a user fitness that returns NaN for every child: counted per island, warned on stderr
    module = tmp_path / "nanfit_mod.py"
    module.write_text("import numpy as np\ndef f(x):\n    return np.full(len(x), np.nan)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    from mpievo.cli.run import EXIT_NO_FINITE_FITNESS

    # no island ever saw a finite fitness: the run fails (issue 31, finding 7), its files written
    assert _run("--problem", "nanfit_mod:f", "--dim", 3, "--lower", -1, "--upper", 1, "--generations", 3,
                "--islands", 2, "--out", out, "--progress", "none",
                "--set", "engine.batch_size=8", "--set", "engine.capacity=4") == EXIT_NO_FINITE_FITNESS
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nonfinite_evaluations"] == summary["evaluations"] == 2 * (4 + 3 * 8)
    assert [i["nonfinite"] for i in summary["islands"]] == [4 + 3 * 8] * 2
    last = json.loads((out / "islands" / "island-0001.jsonl").read_text().splitlines()[-1])
    assert last["nonfinite"] == last["evaluations"] == 4 + 3 * 8
    err = capsys.readouterr().err
    assert err.count("has seen only non-finite fitness values") == 2
    assert err.strip().splitlines()[-1].startswith("mpievo run: no island ever saw a finite fitness in 3 generations")


def _run_problem_object(tmp_path, monkeypatch, capsys, module: str, source: str, engine: str = "") -> dict:
    """Run a 2-generation job whose ``[problem]`` names ``module:problem`` (written from
    ``source``) in ``tmp_path/job.toml``; returns its summary."""
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "job.toml").write_text(f'[problem]\nname = "{module}:problem"\n{engine}')
    out = tmp_path / "run"
    assert _run(tmp_path / "job.toml", "--generations", 2, "--out", out, "--progress", "none",
                "--set", "engine.capacity=8", "--set", "engine.batch_size=8") == 0, capsys.readouterr().err
    return json.loads((out / "summary.json").read_text())


def test_a_problem_object_brings_its_dim_bounds_and_sense(tmp_path, monkeypatch, capsys):
    summary = _run_problem_object(tmp_path, monkeypatch, capsys, "objmod", (
        "from mpievo.evo import Problem\n"
        "problem = Problem(lambda X: -(X * X).sum(axis=1), 3, [-1.0, -2.0, -3.0], 2.0, maximize=True)\n"))
    table = summary["config"]["problem"]
    assert (table["dim"], table["lower"], table["upper"], table["maximize"]) == (3, [-1.0, -2.0, -3.0], 2.0, True)
    assert _run(tmp_path / "job.toml", "--dim", 3, "--upper", 2, "--show-config") == 0     # the same: taken
    capsys.readouterr()
    assert _run(tmp_path / "job.toml", "--dim", 4, "--lower", -1, "--out", tmp_path / "x") == 2
    err = capsys.readouterr().err
    assert "problem.dim: expected 3 (what 'objmod:problem' brings) or no dim, got int 4" in err
    assert "problem.lower: expected [-1.0, -2.0, -3.0] (what 'objmod:problem' brings) or no lower, got " in err


def test_a_multi_objective_problem_object_brings_its_objectives(tmp_path, monkeypatch, capsys):
    summary = _run_problem_object(tmp_path, monkeypatch, capsys, "moomod", (
        "import numpy as np\n"
        "from mpievo.evo.moo.problems import MultiObjectiveProblem\n"
        "problem = MultiObjectiveProblem(lambda X: np.stack([X[:, 0], 1 - X[:, 0] + X[:, 1:].sum(1)], 1),\n"
        "                                3, 0.0, 1.0, n_obj=2, reference_point=[1.5, 2.5])\n"),
        engine='[engine]\nalgorithm = "nsga2"\n')
    assert (summary["config"]["problem"]["n_obj"], summary["config"]["problem"]["reference_point"]) == (2, [1.5, 2.5])
    assert np.asarray(summary["front"]["objectives"]).shape[1] == 2
    capsys.readouterr()
    assert _run(tmp_path / "job.toml", "--set", "problem.n_obj=3", "--out", tmp_path / "x") == 2
    assert "problem.n_obj: expected 2 (what 'moomod:problem' brings) or no n_obj, got int 3" in capsys.readouterr().err
