"""Evaluator breeding under master-worker (run.scheme = "master_worker", run.breed =
"evaluator"): blocks carry plans, workers breed their children from the rows held once
per node, the survivors' rows are written by the workers that bred them; the island
model's result bit for bit, no child bodies between ranks, resumable across schemes (a
worker killed while breeding: test_breed_killed.py; over two nodes: test_breed_local.py)."""

import pytest
from breed_helpers import DIM, breed_job
from parallel_helpers import states_digest, stop_and_checkpoint

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.io import load_latest
from mpievo.parallel import best_genome_bytes, breed_local, build_scheme, run_job

# (genome, dtype, engine.evaluation, run.breed, run.budget: 25 ends each island on a partial batch)
CASES = [("dense", "float32", "generational", "evaluator", None),
         ("delta", "bfloat16", "steady", "evaluator", None),
         ("dense", "bfloat16", "steady", "auto", 25),
         ("dense", "float32", "steady", "leader", None)]
RESTARTS = {"stagnation_patience": 2, "stagnation_tol": 1.0, "restart_growth": 1.0}


def mw_job(nranks, genome="delta", dtype="bfloat16", evaluation="steady", breed="evaluator", budget=None):
    return breed_job(nranks, genome, dtype, engine={"evaluation": evaluation, **RESTARTS},
                     run={"scheme": "master_worker", "breed": breed, "budget": budget})


def _mw_run(comm, job, generations):
    """(island states digest on rank 0, bytes each rank sent by purpose, breed mode)."""
    scheme = build_scheme(comm, job)
    before = dict(comm.traffic)
    try:
        if comm.rank == 0:
            scheme.initialize()
            for _ in range(generations):
                scheme.step()
            scheme.summon({"kind": "finish"})
        else:
            scheme.serve()
        parts = comm.gather_object(scheme.island_states())
    finally:
        scheme.close()
    digest = states_digest({i: s for p in parts for i, s in p.items()}) if comm.rank == 0 else None
    return digest, {k: v - before.get(k, 0) for k, v in comm.traffic.items()}, scheme.breed


def _serial(genome, dtype, budget, generations):
    scheme = build_scheme(SelfComm(), breed_job(1, genome, dtype, engine=RESTARTS, run={"budget": budget}))
    scheme.initialize()
    for _ in range(generations):
        scheme.step()
    return states_digest(scheme.island_states()), scheme.islands[0].algorithm.restarts


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("genome, dtype, evaluation, breed, budget", CASES)
def test_workers_breed_the_island_models_children_bit_for_bit(world, monkeypatch, genome, dtype, evaluation,
                                                               breed, budget):
    comm = Communicator(world)
    monkeypatch.setattr(breed_local, "AUTO_ROW_BYTES", DIM)     # "auto" takes these rows as model-sized
    digest, sent, mode = _mw_run(comm, mw_job(comm.size, genome, dtype, evaluation, breed, budget), 5)
    serial, restarts = _serial(genome, dtype, budget, 5)
    row_bytes = DIM * (2 if dtype == "bfloat16" else 4)
    moved = comm.allgather_object(sent)
    total = sum(sum(t.values()) for t in moved)
    if breed == "leader":
        ok = mode == "leader" and total > 10 * row_bytes
    else:       # plans, survivors' slots, fitness: no child bodies (generation 0's rows aside)
        ok = mode == "evaluator" and moved[0].get("breeding", 0) > 0 and sum(
            t.get("breeding", 0) for t in moved) < row_bytes / 4
    ok = ok and (restarts > 0 or budget is not None) and (comm.rank != 0 or digest == serial)
    all_ranks_agree(world, ok, f"{mode}: sent {moved}, rows of {row_bytes}; {restarts} restarts; "
                               f"digest {digest} vs {serial}")


@pytest.mark.mpi(min_size=2)
def test_master_worker_checkpoints_resume_as_the_island_model_and_back(world, tmp_path_factory):
    comm = Communicator(world)
    every = [0, 1] if comm.rank == 0 else []
    ckpt = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    stopped = stop_and_checkpoint(comm, mw_job(comm.size), ckpt, at=3)
    straight = run_job(breed_job(1, "delta", "bfloat16", engine=RESTARTS), SelfComm())
    ok = stopped.stopped and stopped.generations < 5
    if comm.rank == 0:        # the workers' checkpoint, resumed by one rank of the island model
        resumed = run_job(breed_job(1, "delta", "bfloat16", engine=RESTARTS), SelfComm(),
                          restored=load_latest(ckpt))
        ok = ok and best_genome_bytes(resumed) == best_genome_bytes(straight)
        serial_ckpt = str(tmp_path_factory.mktemp("serial"))
        stop_and_checkpoint(SelfComm(), breed_job(1, "delta", "bfloat16", engine=RESTARTS), serial_ckpt, at=3)
    else:
        serial_ckpt = None
    serial_ckpt = comm.bcast_object(serial_ckpt)
    back = run_job(mw_job(comm.size), comm, restored=load_latest(serial_ckpt, islands=every, comm=comm))
    ok = ok and (comm.rank != 0 or best_genome_bytes(back) == best_genome_bytes(straight))
    all_ranks_agree(world, ok, "a resume across master_worker and the island model differs from the straight run")


@pytest.mark.mpi(min_size=2)
def test_the_bytes_benchmark_counts_plans_not_children(world):
    from mpievo.bench.breed_bytes import measure

    comm = Communicator(world)
    rows = [measure(comm, "master_worker", "steady", breed, DIM, "float32", 3, 2) for breed in ("leader", "evaluator")]
    ok = comm.rank != 0 or (rows[0]["bytes"]["evaluation"] >= 6 * DIM * 4 > 50 * sum(rows[1]["bytes"].values())
                            and rows[1]["breed"] == "evaluator" and rows[1]["bytes"]["breeding"] > 0)
    all_ranks_agree(world, ok, f"{rows}")
