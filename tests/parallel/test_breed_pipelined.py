"""Evaluator breeding with a problem that pipelines (ModelProblem(pipeline=True)): a rank
breeds child i + 1 on the pipeline's helper thread while child i is evaluated, and the
result is the island model's (without pipelining), bit for bit."""

import threading

import pytest
from breed_helpers import breed_job
from parallel_helpers import states_digest

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.parallel import breed_local, build_scheme
from mpievo.parallel.groups import GroupLayout
from mpievo.parallel.hybrid import HybridScheme
from mpievo.parallel.job import job_problem

# the real torch: without it, ``import torch`` finds the directory tests/torch on sys.path
pytest.importorskip("torch.nn")
import torch  # noqa: E402

IN, OUT = 1000, 100            # 100,100 parameters: rows of the counter-based kernels' size


def model_problem(pipeline: bool, score=None):
    from mpievo.torch import ModelProblem

    torch.manual_seed(3)
    model, sources = torch.nn.Linear(IN, OUT), [torch.nn.Linear(IN, OUT) for _ in range(2)]
    target = 0.3 * sources[0].weight.detach() + 0.7 * sources[1].weight.detach()

    def distance(m):
        return -float(((m.weight - target) ** 2).sum())

    return ModelProblem(model, score or distance, sources=sources, lower=-1.0, upper=1.0, pipeline=pipeline)


def _digest(comm, job, problem, generations=3):
    scheme = build_scheme(comm, job, problem)
    scheme.initialize()
    for _ in range(generations):
        scheme.step()
    parts = comm.gather_object(scheme.island_states())
    mode = getattr(scheme, "breed", "island")
    getattr(scheme, "close", lambda: None)()
    return (states_digest({i: s for p in (parts or []) for i, s in p.items()}) if comm.rank == 0 else None), mode


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("genome", ["dense", "delta"])
def test_pipelined_evaluators_breed_the_island_models_children(world, genome):
    comm = Communicator(world)
    digest, mode = _digest(comm, breed_job(comm.size, genome, engine={"batch_size": 5}, run={
        "scheme": "centralized", "islands": 2, "breed": "evaluator"}), model_problem(True))
    serial, _ = _digest(SelfComm(), breed_job(1, genome, engine={"batch_size": 5}), model_problem(False))
    ok = mode == ("island" if comm.size == 1 else "evaluator") and (comm.rank != 0 or digest == serial)
    all_ranks_agree(world, ok, f"{mode}: digest {digest} vs {serial}")


def test_the_next_child_is_bred_while_this_one_is_evaluated(monkeypatch):
    """Child i's evaluation waits (up to 5 s) until child i + 1 is bred: only a helper
    thread breeding meanwhile lets it go on; and every child is bred there, one at a time."""
    from mpi4py import MPI

    bred, threads, waited = [], set(), []
    lock = threading.Condition()
    plain = breed_local.breed_rows

    def recording(plan, rows, a, b, box, out):
        counts = plain(plan, rows, a, b, box, out)
        with lock:
            bred.append((a, b))
            threads.add(threading.current_thread().name.split("_")[0])
            lock.notify_all()
        return counts

    def score(model):
        with lock:
            child = len(waited)         # one island, one batch of 5 a step: the i-th call is child i
            waited.append(child + 1 >= 5 or lock.wait_for(lambda: (child + 1, child + 2) in bred, timeout=5))
        return -float(model.weight.square().sum())

    job = breed_job(1, "dense", engine={"batch_size": 5}, run={"islands": 1})
    problem = job_problem(job, model_problem(True, score))
    scheme = HybridScheme(Communicator(MPI.COMM_SELF), GroupLayout(((0,),), 0), problem, job.engines,
                          seed=job.run.seed, policy=job.policy, schedule=job.schedule, breed="evaluator")
    try:
        scheme.initialize()
        monkeypatch.setattr(breed_local, "breed_rows", recording)
        waited.clear()
        scheme.step()
    finally:
        scheme.close()
    assert threads == {"mpievo-pipeline"} and sorted(bred) == [(i, i + 1) for i in range(5)], (threads, bred)
    assert waited == [True] * 5
