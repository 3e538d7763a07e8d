"""``mpievo.minimize``: every problem form, budget and target, no MPI in one process, the same result
on every rank under MPI."""

import os
import subprocess
import sys

from pathlib import Path

import numpy as np
import pytest

import mpievo
from mpievo.config import ConfigError
from mpievo.evo import Problem, make_problem
from mpievo.parallel.world import LAUNCHER_VARIABLES, launched

SMALL = {"engine": {"capacity": 12, "batch_size": 16}}


def batch_sphere(X):
    X = np.asarray(X, np.float64)
    return np.einsum("ij,ij->i", X, X)


def row_sphere(x):
    return float(batch_sphere(x[np.newaxis, :])[0])


def _check(result, dim, value):
    """The result's genome has ``dim`` genes and ``value`` gives its fitness."""
    assert result.x.shape == (dim,) and result.fun == pytest.approx(value(result.x), rel=1e-6, abs=1e-12)
    assert result.evaluations == sum(i["evaluations"] for i in result.islands)
    assert result.fun == min(i["best_fitness"] for i in result.islands)


@pytest.mark.parametrize("form", ["problem", "per-row", "module", "config"])
def test_every_problem_form_gives_the_same_run(form, tmp_path, monkeypatch):
    (tmp_path / "api_fitness.py").write_text("from test_api import batch_sphere as f\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "job.toml"
    path.write_text('[problem]\nname = "api_fitness:f"\ndim = 5\nlower = -4\nupper = 4\n'
                    '[engine]\ncapacity = 12\nbatch_size = 16\n')
    common = {"budget": 2000, "seed": 3, "config": SMALL}
    calls = {
        "problem": lambda: mpievo.minimize(make_problem(batch_sphere, 5, lower=-4, upper=4), **common),
        "per-row": lambda: mpievo.minimize(row_sphere, lower=-4, upper=4, dim=5, batched=False, **common),
        "module": lambda: mpievo.minimize("api_fitness:f", dim=5, lower=-4, upper=4, **common),
        "config": lambda: mpievo.minimize(config=path, budget=2000, seed=3),
    }
    result = calls[form]()
    _check(result, 5, row_sphere)
    assert result.evaluations == 2000 and result.stop_reason == "budget" and len(result.islands) == 4
    reference = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 5, **common)     # SciPy-style bounds
    assert result.x.tobytes() == reference.x.tobytes() and result.fun == reference.fun
    assert result.islands == reference.islands


def test_a_builtin_by_name_takes_its_box_and_the_config_problem_keys():
    result = mpievo.minimize("rastrigin", dim=4, budget=1000, config={**SMALL, "problem": {"shift": True}})
    assert result.config["problem"]["name"] == "rastrigin" and result.config["problem"]["shift"]
    problem = make_problem("rastrigin", 4, shift=True)
    _check(result, 4, lambda x: problem(x[np.newaxis, :])[0])
    assert np.all(np.abs(result.x) <= 5.12) and result.evaluations == 1000


def test_target_stops_early_and_generations_bound_the_run():
    result = mpievo.minimize(batch_sphere, bounds=[(-2, 2)] * 4, target=1e-3, generations=5000, config=SMALL)
    assert result.stop_reason == "target" and result.fun <= 1e-3 and result.generations < 5000
    capped = mpievo.minimize("rastrigin", dim=4, generations=7, islands=2, config=SMALL)
    assert capped.stop_reason == "generations" and capped.generations == 7
    assert [i["steps"] for i in capped.islands] == [7, 7] and capped.config["run"]["islands"] == 2


def test_settings_problems_are_reported_before_any_work():
    with pytest.raises(ConfigError, match=r"run.budget: expected at least 252 evaluations"):
        mpievo.minimize("sphere", dim=3, budget=100, config=SMALL, islands=21)
    with pytest.raises(ValueError, match="expected bounds or lower/upper, got both"):
        mpievo.minimize(batch_sphere, bounds=[(-1, 1)] * 2, lower=-1)
    with pytest.raises(ValueError, match="expected no bounds, dim, batched or maximize beside a Problem"):
        mpievo.minimize(make_problem("sphere", 2), dim=2)
    with pytest.raises(ValueError, match=r"beside a Problem \(it has its own\), got {'maximize': True}"):
        mpievo.minimize(make_problem("sphere", 2), maximize=True)
    with pytest.raises(TypeError, match="expected config to be a dict, a TOML file path or None, got int"):
        mpievo.minimize("sphere", dim=2, config=3)


def test_a_maximised_function_gives_the_negated_minimisation():
    kept = dict(bounds=[(-3, 3)] * 4, budget=1500, seed=2, config=SMALL)
    low = mpievo.minimize(batch_sphere, **kept)
    high = mpievo.minimize(lambda X: -batch_sphere(X), maximize=True, **kept)
    assert high.x.tobytes() == low.x.tobytes() and high.fun == -low.fun and high.evaluations == low.evaluations
    assert [i["best_fitness"] for i in high.islands] == [-i["best_fitness"] for i in low.islands]
    by_name = mpievo.minimize("sphere", dim=4, maximize=True, budget=1500, config=SMALL)
    assert by_name.config["problem"]["maximize"] and by_name.fun > 4 * 5.12 ** 2 * 0.5    # towards a corner


def test_a_job_file_runs_as_it_is_with_the_function_in_its_problem_tables_place():
    portfolio = Path(__file__).resolve().parents[1] / "examples" / "portfolio.toml"
    result = mpievo.minimize(batch_sphere, bounds=[(-2, 2)] * 3, budget=2000, config=portfolio)
    assert result.replaced_problem == {"name": "rastrigin", "dim": 10, "shift": True, "rotate": True}
    assert "problem" not in result.config and result.config["engine"]["algorithm"] == ["cmaes", "shade"] * 2
    assert result.config["run"]["leader_rate"] == 7 and result.x.dtype == np.float64 and result.x.shape == (3,)
    _check(result, 3, lambda x: batch_sphere(x[np.newaxis, :])[0])
    named = mpievo.minimize("sphere", dim=3, budget=2000, config=portfolio)       # a name fills the table
    assert named.replaced_problem is None and named.config["problem"]["name"] == "sphere"


def _without_launcher() -> dict:
    return {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}


def test_one_process_runs_without_mpi(tmp_path):
    code = ("import sys, mpievo\n"
            "r = mpievo.minimize('sphere', dim=3, budget=600, config={'engine': {'capacity': 8}})\n"
            "from mpievo.cli.main import main\n"
            f"rc = main(['run', '--generations', '2', '--dim', '3', '--out', {str(tmp_path)!r}, '--progress', "
            "'none', '--set', 'engine.capacity=8', '--set', 'engine.batch_size=8'])\n"
            "print(r.evaluations, rc, 'mpi4py' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=_without_launcher())
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["600", "0", "False"]
    assert not launched({}) and launched({"PMIX_RANK": "0"}) and launched({"OMPI_COMM_WORLD_SIZE": "1"})


@pytest.mark.mpi(min_size=1)
def test_every_rank_gets_the_one_process_result(world):
    from mpi_support import all_ranks_agree

    tables = {**SMALL, "engine": {**SMALL["engine"], "algorithm": ["ga", "cmaes", "de", "ga"]}}
    mine = mpievo.minimize(batch_sphere, bounds=[(-3, 3)] * 6, budget=1500, config=tables)
    from mpievo.comm.protocol import SelfComm

    alone = mpievo.minimize(batch_sphere, bounds=[(-3, 3)] * 6, budget=1500, config=tables, comm=SelfComm())
    same = mine.x.tobytes() == alone.x.tobytes() and (mine.fun, mine.evaluations, mine.islands) == \
        (alone.fun, alone.evaluations, alone.islands) and mine.evaluations == 1500
    all_ranks_agree(world, same, f"{world.Get_size()} ranks: {mine.fun} after {mine.evaluations}; "
                                 f"one process: {alone.fun} after {alone.evaluations}")


# --- SciPy's conventions: x0, callback, nfev/nit, disp -------------------------------------------

NO_MIGRATION = {**SMALL, "migration": {"interval": 1000}}


def test_x0_starts_every_island():
    start = np.array([0.5, -0.25, 0.125, 0.0625], np.float32)    # exact in float32: its own fitness
    value = row_sphere(start)
    result = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 4, x0=start, generations=1, config=NO_MIGRATION)
    assert all(i["best_fitness"] <= value for i in result.islands)
    plain = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 4, generations=1, config=NO_MIGRATION)
    assert any(i["best_fitness"] > value for i in plain.islands)   # without x0 some island does worse
    optimum = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 4, x0=[0, 0, 0, 0], generations=1, config=SMALL)
    assert optimum.fun == 0.0 and not optimum.x.any()


def test_callback_sees_the_best_at_each_log_point_and_stops_the_run():
    seen = []

    def watch(intermediate_result):
        seen.append(intermediate_result)
        return np.int64(intermediate_result.nit) >= 30       # numpy's True stops it too

    stopped = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 5, generations=200, seed=1, callback=watch,
                              config=SMALL)
    assert [r.nit for r in seen] == [10, 20, 30]
    assert stopped.stop_reason == "callback" and stopped.nit == stopped.generations == 30
    assert stopped.nfev == stopped.evaluations == seen[-1].nfev
    for r in seen:
        assert r.fun == pytest.approx(row_sphere(r.x), rel=1e-6) and r.x.shape == (5,)
    assert seen[-1].x.tobytes() == stopped.x.tobytes() and seen[-1].fun == stopped.fun
    # the loop's asking changes nothing: the same run as one bounded at generation 30
    bounded = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 5, generations=30, seed=1, config=SMALL)
    assert bounded.x.tobytes() == stopped.x.tobytes() and bounded.islands == stopped.islands

    def until(intermediate_result):
        if intermediate_result.nit == 20:
            raise StopIteration
    assert mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 5, generations=200, seed=1, callback=until,
                           config=SMALL).nit == 20
    counted = []
    ran = mpievo.minimize(batch_sphere, bounds=[(-4, 4)] * 5, generations=25, callback=counted.append,
                          config=SMALL)
    assert ran.stop_reason == "generations" and [r.nit for r in counted] == [10, 20, 25]


def test_disp_prints_progress(capsys):
    mpievo.minimize("sphere", dim=3, generations=20, config=SMALL)
    assert capsys.readouterr().out == ""
    mpievo.minimize("sphere", dim=3, generations=20, config=SMALL, disp=True)
    out = capsys.readouterr().out
    assert "gen 20/20" in out and "best" in out and "done: generation 20" in out


def test_x0_and_callback_problems_are_reported_before_any_work():
    calls = []
    with pytest.raises(ValueError, match=r"expected x0 of shape \(3,\), got shape \(2,\)"):
        mpievo.minimize(batch_sphere, bounds=[(-1, 1)] * 3, x0=[0, 0], callback=calls.append)
    with pytest.raises(ValueError, match=r"expected x0 inside the box, got gene 1 = 2.0 outside \[-1.0, 1.0\]"):
        mpievo.minimize(batch_sphere, bounds=[(-1, 1)] * 3, x0=[0, 2, 0], callback=calls.append)
    with pytest.raises(ValueError, match="expected x0 inside the box, got gene 0 = nan"):
        mpievo.minimize(batch_sphere, bounds=[(-1, 1)] * 3, x0=[np.nan, 0, 0])
    with pytest.raises(TypeError, match="expected a callable callback or None, got int"):
        mpievo.minimize(batch_sphere, bounds=[(-1, 1)] * 3, callback=3)
    with pytest.raises(ValueError, match="expected no starting genome with engine.genome = 'seeded'"):
        mpievo.minimize(Problem(batch_sphere, 3, -1, 1, bases=np.zeros((2, 3))), x0=[0, 0, 0],
                        config={"engine": {"genome": "seeded", "algorithm": "ga"}})
    assert calls == []


STEADY = {"run": {"scheme": "master_worker"}, "engine": {**SMALL["engine"], "evaluation": "steady"}}


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("tables", [SMALL, STEADY], ids=["island", "master_worker steady"])
def test_x0_and_callback_give_the_one_process_result_on_every_rank(world, tables):
    from mpi_support import all_ranks_agree
    from mpievo.comm.protocol import SelfComm

    def run(comm=None):
        seen = []
        result = mpievo.minimize(batch_sphere, bounds=[(-3, 3)] * 6, x0=[0.5] * 6, seed=2, generations=300,
                                 config=tables, comm=comm,
                                 callback=lambda r: seen.append(r.nit) or r.fun < 0.05 or r.nit >= 150)
        return result, seen

    mine, seen = run()
    alone, seen_alone = run(SelfComm())
    same = mine.x.tobytes() == alone.x.tobytes() and (mine.nit, mine.nfev, mine.islands, mine.stop_reason) == \
        (alone.nit, alone.nfev, alone.islands, alone.stop_reason) == (alone.nit, alone.nfev, alone.islands, "callback")
    asked = seen == (seen_alone if world.Get_rank() == 0 else [])    # asked on rank 0 only
    all_ranks_agree(world, same and asked, f"{world.Get_size()} ranks: {mine.fun} at {mine.nit} ({seen}); "
                                           f"one process: {alone.fun} at {alone.nit} ({seen_alone})")
