"""Evaluator breeding (run.breed = "evaluator"): every rank of a group breeds its own
children from the island's archive held once per node; the island model's result bit
for bit, no child bodies between ranks, resumable under another scheme."""

import os

import numpy as np
import pytest
from breed_helpers import DIM, breed_job
from parallel_helpers import states_digest, stop_and_checkpoint

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError, validate
from mpievo.evo import EngineConfig, make_problem
from mpievo.io import load_latest
from mpievo.parallel import best_genome_bytes, build_scheme, run_job
from mpievo.parallel.breed_local import BreedPlan, breed_rows, choose_breeding
from mpievo.parallel.groups import GroupLayout, scheme_layout
from mpievo.parallel.hybrid import HybridScheme
from mpievo.parallel.job import build_problem, job_problem

# (genome, dtype, run.breed, run.budget: 25 ends each island on a partial batch)
CASES = [("dense", "float32", "evaluator", None), ("delta", "bfloat16", "evaluator", None),
         ("dense", "bfloat16", "evaluator", 25), ("delta", "float32", "evaluator", None),
         ("delta", "bfloat16", "leader", None)]


def test_evaluator_breeding_refuses_what_it_cannot_run():
    big = make_problem("sphere", dim=DIM)
    ga = EngineConfig(algorithm="ga")
    assert choose_breeding("evaluator", [ga], big, SelfComm()) == "evaluator"
    assert choose_breeding("auto", [ga], big, SelfComm()) == "leader"    # 400 KB rows: shipping is cheap
    with pytest.raises(ValueError, match=r"run.breed = 'evaluator': expected rows of at least 100000 genes "
                                         r"\(the counter-based kernels\), got 10"):
        choose_breeding("evaluator", [ga], make_problem("sphere", dim=10), SelfComm())
    with pytest.raises(ValueError, match="expected engine.bounds 'clip' or 'reflect', got 'resample' on island 1; "
                                         "engine.unique false, got True on island 1"):
        choose_breeding("evaluator", [ga, EngineConfig(algorithm="ga", bounds="resample", unique=True)], big,
                        SelfComm())
    with pytest.raises(ConfigError, match="run.breed: expected one of"):
        validate({"run": {"breed": "workers"}}, 1)
    with pytest.raises(ConfigError, match="run.breed: expected 'leader' or 'auto' with run.scheme = 'replicated'"):
        validate({"run": {"breed": "evaluator", "scheme": "replicated"}}, 2)


# restarts every 2 generations: the archive truncated and refilled with uniform children
RESTARTS = {"stagnation_patience": 2, "stagnation_tol": 1.0, "restart_growth": 1.0}


@pytest.mark.parametrize("genome, dtype, engine", [("dense", "float32", {}), ("delta", "bfloat16", {}),
                                                   ("dense", "bfloat16", RESTARTS)])
def test_a_group_of_one_rank_breeds_from_its_plans_as_the_island_model(genome, dtype, engine):
    """The whole evaluator path in one process: planned GA, shared archive, children bred
    from the plans; migration between the two islands every 2 generations."""
    from mpi4py import MPI

    comm = Communicator(MPI.COMM_SELF)
    job = breed_job(1, genome, dtype, engine=engine)
    problem = job_problem(job, build_problem(job.problem))
    scheme = HybridScheme(comm, GroupLayout(((0,),), 0), problem, job.engines, seed=job.run.seed,
                          policy=job.policy, schedule=job.schedule, breed="evaluator")
    serial = build_scheme(SelfComm(), breed_job(1, genome, dtype, engine=engine))
    try:
        for s in (scheme, serial):
            s.initialize()
            for _ in range(4):
                s.step()
        ga = scheme.inner.islands[0].algorithm
        assert (scheme.breed, type(ga).__name__) == ("evaluator", "PlannedGA")
        assert ga.restarts == serial.islands[0].algorithm.restarts and (ga.restarts > 0) == bool(engine)
        assert states_digest(scheme.island_states()) == states_digest(serial.island_states())
    finally:
        scheme.close()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_restarts_refill_is_bred_in_blocks_with_the_whole_batchs_bits(dtype):
    from mpievo.evo import half, operators
    from mpievo.evo.algorithms.ga import breeding_box
    from mpievo.evo.streams import counter_blocks, stream

    problem, rows = make_problem("sphere", dim=DIM), half.genome_dtype(dtype)
    box = breeding_box(problem, rows)
    whole = half.uniform_genomes(operators, stream(1, 0, 5), *box[:2], np.empty((5, DIM), rows))
    key, base = counter_blocks(stream(1, 0, 5), 5 * ((DIM + 3) // 4))
    plan = BreedPlan(0, "uniform", 5, operators.key_words(key), base)
    parts = [np.empty((b - a, DIM), rows) for a, b in ((0, 2), (2, 5))]
    for (a, b), out in zip(((0, 2), (2, 5)), parts):
        assert not breed_rows(plan, np.empty((1, DIM), rows), a, b, box, out).any()
    assert np.concatenate(parts).tobytes() == whole.tobytes()



def _scheme_run(comm, job, generations):
    """(island states digest on rank 0, group traffic of the stepped generations, breed
    mode, evaluations of all ranks)."""
    scheme = build_scheme(comm, job)
    scheme.initialize()
    group = getattr(scheme, "group", None)
    before = dict(group.traffic) if group is not None else {}
    for _ in range(generations):
        scheme.step()
    after = dict(group.traffic) if group is not None else {}
    parts = comm.gather_object(scheme.island_states())
    evaluations = sum(comm.allgather_object(scheme.evaluations()))
    mode = getattr(scheme, "breed", "island")
    getattr(scheme, "close", lambda: None)()
    digest = None
    if comm.rank == 0:
        digest = states_digest({i: s for part in parts for i, s in part.items()})
    traffic = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return digest, traffic, mode, evaluations


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("genome, dtype, breed, budget", CASES)
def test_evaluators_breed_the_island_models_children_bit_for_bit(world, genome, dtype, breed, budget):
    comm = Communicator(world)
    run = {"scheme": "centralized", "islands": 2, "breed": breed, "budget": budget}
    digest, traffic, mode, evaluations = _scheme_run(comm, breed_job(comm.size, genome, dtype, run=run), 4)
    serial, _, _, straight = _scheme_run(SelfComm(), breed_job(1, genome, dtype, run={"budget": budget}), 4)
    row_bytes = DIM * (2 if dtype == "bfloat16" else 4)
    moved = sum(comm.allgather_object(sum(traffic.values())))     # bytes all ranks sent
    if comm.size == 1:
        ok = mode == "island"
    elif breed == "evaluator":      # plans, decisions, fitness: no child bodies
        ok = mode == "evaluator" and moved < row_bytes / 4
    else:                           # the leader ships the children's rows
        ok = mode == "leader" and moved > row_bytes
    ok = ok and evaluations == straight == (budget or straight) and (comm.rank != 0 or digest == serial)
    all_ranks_agree(world, ok, f"{mode}: {moved} bytes between ranks in 4 generations ({traffic}), "
                               f"rows of {row_bytes}; digest {digest} vs {serial}")


@pytest.mark.mpi(min_size=2)
def test_hybrid_groups_breed_on_evaluators_bit_for_bit(world):
    comm = Communicator(world)
    if comm.size % 2:
        pytest.skip("groups of 2 ranks need an even rank count")
    run = {"scheme": "hybrid", "ranks_per_island": 2, "islands": comm.size // 2 * 2, "breed": "evaluator"}
    job = breed_job(comm.size, "delta", "bfloat16", run=run)
    digest, traffic, mode, _ = _scheme_run(comm, job, 5)
    serial, _, _, _ = _scheme_run(SelfComm(), breed_job(1, "delta", "bfloat16", run={"islands": run["islands"]}), 5)
    sent = comm.allgather_object(traffic)          # per rank: what it sent, by purpose
    ok = mode == "evaluator" and sent[0].get("breeding", 0) > 0 and sum(sum(t.values()) for t in sent) < DIM / 2
    ok = ok and (comm.rank != 0 or digest == serial)
    all_ranks_agree(world, ok, f"{sent}; digest {digest} vs {serial}")


@pytest.mark.mpi(min_size=2)
def test_evaluator_checkpoints_resume_as_the_island_model_and_back(world, tmp_path_factory):
    comm = Communicator(world)
    ckpt = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    run = {"scheme": "centralized", "islands": 2, "breed": "evaluator"}
    stopped = stop_and_checkpoint(comm, breed_job(comm.size, "delta", "bfloat16", run=run), ckpt, at=3)
    straight = run_job(breed_job(1, "delta", "bfloat16"), SelfComm())
    ok = stopped.stopped and stopped.generations < 5
    if comm.rank == 0:        # the evaluators' checkpoint, resumed by one rank of the island model
        resumed = run_job(breed_job(1, "delta", "bfloat16"), SelfComm(), restored=load_latest(ckpt))
        ok = ok and best_genome_bytes(resumed) == best_genome_bytes(straight)
        serial_ckpt = str(tmp_path_factory.mktemp("serial"))
        stop_and_checkpoint(SelfComm(), breed_job(1, "delta", "bfloat16"), serial_ckpt, at=3)
    else:
        serial_ckpt = None
    serial_ckpt = comm.bcast_object(serial_ckpt)
    job = breed_job(comm.size, "delta", "bfloat16", run=run)
    mine = scheme_layout(comm, job.run).islands(job.n_islands)
    back = run_job(job, comm, restored=load_latest(serial_ckpt, islands=mine, comm=comm))
    ok = ok and (comm.rank != 0 or best_genome_bytes(back) == best_genome_bytes(straight))
    all_ranks_agree(world, ok, "a resume across schemes differs from the straight run")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("run", [{"scheme": "centralized", "islands": 2, "breed": "evaluator"},
                                 {"scheme": "master_worker", "breed": "evaluator"}])
def test_a_group_over_two_nodes_is_refused(world, run):
    """The archive is one node's shared memory: a group (or a master's workers) over two
    nodes would not see its rows."""
    os.environ["MPIEVO_FAKE_NODES"] = "2"      # two nodes of size/2 consecutive ranks
    try:
        comm = Communicator(world)
        build_scheme(comm, breed_job(comm.size, run=run))
        error = "built"
    except ValueError as err:
        error = str(err)
    finally:
        del os.environ["MPIEVO_FAKE_NODES"]
    all_ranks_agree(world, "every group of ranks on one node, got a group over 2 nodes" in error, error)
