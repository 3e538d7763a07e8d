"""``mpievo.run`` and ``mpievo.resume``: the ``mpievo run`` job from Python, in one process
and on 2 ranks; a resume gives bit for bit the run that was not interrupted."""

import json

import numpy as np
import pytest
from mpi_support import all_ranks_agree

import mpievo
from mpievo.comm import SelfComm
from mpievo.evo import make_problem

SMALL = {"run": {"islands": 2, "generations": 6, "seed": 3},
         "problem": {"name": "rastrigin", "dim": 4},
         "engine": {"batch_size": 8, "capacity": 6}}


def _same(a, b) -> bool:
    """Bit for bit the same best genome, fitness and evaluations."""
    return (a.x.tobytes() == b.x.tobytes() and a.fun == b.fun and a.evaluations == b.evaluations
            and a.generations == b.generations)


def test_run_writes_the_job_and_returns_its_summary(tmp_path):
    result = mpievo.run(SMALL, out=tmp_path / "run", comm=SelfComm())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result.summary == summary and result.out == tmp_path / "run"
    assert result.stop_reason == "generations" and not result.stopped and result.generations == 6
    assert result.evaluations == summary["evaluations"] == 2 * (6 + 6 * 8)
    assert result.fun == summary["best_fitness"] and result.x.tolist() == pytest.approx(summary["best_genome"])
    assert result.checkpoint is not None and (tmp_path / "run" / "checkpoints" / "manifest.json").exists()
    assert summary["config"]["run"]["islands"] == 2 and summary["ranks"] == 1


def test_resume_continues_bit_for_bit_as_the_run_that_was_not_interrupted(tmp_path):
    straight = mpievo.run(SMALL, out=tmp_path / "straight", overrides={"run.generations": 10}, comm=SelfComm())
    mpievo.run(SMALL, out=tmp_path / "run", comm=SelfComm())
    resumed = mpievo.resume(tmp_path / "run", overrides={"run.generations": 10}, comm=SelfComm())
    assert _same(resumed, straight) and resumed.summary["resumed_from"].endswith("g000000006")
    assert resumed.summary["evaluations_this_run"] == 2 * 4 * 8       # generations 7-10 only
    # into another directory, with the config given again
    again = mpievo.resume(tmp_path / "run", SMALL, out=tmp_path / "more", overrides={"run.generations": 10},
                          comm=SelfComm())
    assert _same(again, straight) and (tmp_path / "more" / "summary.json").exists()


def test_a_problem_object_runs_and_resumes_in_place_of_the_problem_table(tmp_path):
    problem = make_problem("sphere", 3)
    config = {key: value for key, value in SMALL.items() if key != "problem"}
    straight = mpievo.run(config, problem, tmp_path / "straight", overrides={"run.generations": 9},
                          comm=SelfComm())
    first = mpievo.run(config, problem, tmp_path / "run", comm=SelfComm())
    assert first.x.shape == (3,) and "problem" not in first.summary["config"]
    assert _same(mpievo.resume(tmp_path / "run", problem=problem, overrides={"run.generations": 9},
                               comm=SelfComm()), straight)


@pytest.mark.parametrize("call, fragment", [
    (lambda d: mpievo.run({"run": {"islands": -1}}, out=d), "run.islands: expected an int >= 0"),
    (lambda d: mpievo.run(SMALL, out=d, overrides={"engine.algorithm": "bogus"}), "engine.algorithm: expected"),
    (lambda d: mpievo.run(SMALL, make_problem("sphere", 3), d), "expected no [problem] table beside a Problem"),
    (lambda d: mpievo.run(["run"], out=d), "config: expected a TOML file path, a dict or None, got list"),
    (lambda d: mpievo.run(SMALL, out=d, overrides=["run.seed=1"]), "overrides: expected a dict of dotted keys"),
    (lambda d: mpievo.run(SMALL, out=d, progress="loud"), "progress: expected one of ['auto'"),
    (lambda d: mpievo.run(d / "absent.toml", out=d), "absent.toml"),
    (lambda d: mpievo.resume(d / "nowhere"), "no checkpoint directory"),
])
def test_bad_input_is_refused_before_any_work(call, fragment, tmp_path):
    with pytest.raises(mpievo.JobError, match=None) as caught:
        call(tmp_path)
    assert fragment in str(caught.value)
    assert not list(tmp_path.rglob("summary.json"))


def test_an_occupied_directory_and_a_changed_seed_are_refused(tmp_path):
    mpievo.run(SMALL, out=tmp_path / "run", comm=SelfComm())
    with pytest.raises(mpievo.JobError, match="holds another run"):
        mpievo.run(SMALL, out=tmp_path / "run", comm=SelfComm())
    with pytest.raises(mpievo.JobError, match="run.seed"):
        mpievo.resume(tmp_path / "run", overrides={"run.seed": 5, "run.generations": 8}, comm=SelfComm())
    rerun = mpievo.run(SMALL, out=tmp_path / "run", overwrite=True, comm=SelfComm())
    assert rerun.generations == 6


@pytest.mark.mpi(min_size=2)
def test_on_two_ranks_run_and_resume_give_the_one_process_run(world, tmp_path, mpi_tmp_path):
    job = {**SMALL, "run": {**SMALL["run"], "islands": 4}}        # an island per rank at -n 2 and -n 4
    one = mpievo.run(job, out=tmp_path / "one", overrides={"run.generations": 10}, comm=SelfComm())
    first = mpievo.run(job, out=mpi_tmp_path / "run")             # COMM_WORLD under the launcher
    resumed = mpievo.resume(mpi_tmp_path / "run", overrides={"run.generations": 10})
    ok = first.summary["ranks"] == world.size and _same(resumed, one)
    all_ranks_agree(world, ok, f"{resumed} against {one}")


@pytest.mark.mpi(min_size=2)
def test_on_two_ranks_a_bad_config_is_refused_on_every_rank(world, mpi_tmp_path):
    with pytest.raises(mpievo.JobError) as caught:
        mpievo.run({**SMALL, "run": {"islands": 1}}, out=mpi_tmp_path / "bad")
    all_ranks_agree(world, "expected at least one island per rank" in str(caught.value), str(caught.value))


def test_a_torch_model_problem_runs_and_resumes_through_the_job_api(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mpievo.torch import ModelProblem

    def problem():                       # the same sources and model every time
        models = [torch.nn.Linear(3, 2) for _ in range(3)]
        for seed, model in enumerate(models):
            torch.manual_seed(seed)
            torch.nn.init.normal_(model.weight), torch.nn.init.normal_(model.bias)
        return ModelProblem(models[0], lambda m: float(-(m.weight.sum() - 1.0) ** 2), sources=models[1:])

    config = {"run": {"islands": 2, "generations": 4, "seed": 1}, "engine": {"capacity": 6, "batch_size": 4}}
    straight = mpievo.run(config, problem(), tmp_path / "straight", overrides={"run.generations": 7},
                          comm=SelfComm())
    mpievo.run(config, problem(), tmp_path / "run", comm=SelfComm())
    resumed = mpievo.resume(tmp_path / "run", problem=problem(), overrides={"run.generations": 7},
                            comm=SelfComm())
    assert _same(resumed, straight) and resumed.fun <= 0 and resumed.x.shape == (8,)
    assert resumed.summary["evaluations_this_run"] == 2 * 3 * 4        # generations 5-7 only


def test_a_stop_signal_checkpoints_and_resume_gives_the_straight_run(tmp_path):
    import os
    import signal

    calls = []

    def sphere(X):                      # once armed, asks for a stop (as Slurm would) in generation 3
        calls.append(len(X))
        if len(calls) == 7 and armed:
            os.kill(os.getpid(), signal.SIGUSR1)
        return (np.asarray(X, np.float64) ** 2).sum(axis=1)

    problem = make_problem(sphere, 4, lower=-3, upper=3)
    config = {key: value for key, value in SMALL.items() if key != "problem"}
    armed = False
    straight = mpievo.run(config, problem, tmp_path / "straight", comm=SelfComm())
    armed, calls[:], before = True, [], signal.getsignal(signal.SIGUSR1)
    stopped = mpievo.run(config, problem, tmp_path / "run", comm=SelfComm())
    assert stopped.stopped and stopped.summary is None and 0 < stopped.generations < 6
    assert stopped.checkpoint is not None and not (tmp_path / "run" / "summary.json").exists()
    assert signal.getsignal(signal.SIGUSR1) is before         # the handlers are restored
    armed = False
    assert _same(mpievo.resume(tmp_path / "run", problem=problem, comm=SelfComm()), straight)
