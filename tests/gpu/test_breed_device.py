"""Device islands bred where they are evaluated (run.breed = "evaluator", a replica of the
rows per GPU, survivors rebuilt from the plans): the device island model's result bit for
bit on 1, 2 and 4 ranks, no child's bytes between ranks, resumable from and into the
island model, the host's bits block by block; tiny sizes for the simulator."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.evo import EngineConfig, Problem, make_problem
from mpievo.kernels.host import BFLOAT16
from mpievo.parallel import best_genome_bytes, build_scheme, run_job
from mpievo.parallel.breed_device import breeding_rows, rebuild_order

DIM = 48
RESTARTS = {"stagnation_patience": 2, "stagnation_tol": 1.0, "restart_growth": 1.0}
# (genome, dtype, engine settings): dense mutation at DIM's default rate, sparse at 0.03
CASES = [("dense", "float32", {}), ("delta", "bfloat16", {"mutation_rate": 0.03, "bounds": "reflect"}),
         ("dense", "bfloat16", RESTARTS)]


def _fitness(batch):
    """Row by row on the host (the simulator's reductions are slow); bfloat16 device rows come
    as bits; host islands (a checkpoint's) pass numpy rows."""
    rows = batch.copy_to_host() if hasattr(batch, "copy_to_host") else np.asarray(batch)
    rows = rows.view(BFLOAT16) if rows.dtype == np.uint16 else rows
    return np.sum((rows.astype(np.float64) - 0.5) ** 2, axis=1)


#: named from jobs as "test_breed_device:ROWS" (dense rows ignore the bases)
ROWS = Problem(_fitness, DIM, -4, 4, device=True, name="device-rows",
               bases=np.random.default_rng(3).uniform(-1, 1, (2, DIM)).astype(np.float32))


def _job(nranks, genome="dense", dtype="float32", engine=None, **run):
    return validate({"run": {"islands": 2, "generations": 5, "log_every": 5, "seed": 5, **run},
                     "problem": {"name": "test_breed_device:ROWS", "dim": DIM, "lower": -4.0, "upper": 4.0,
                                 "shift": False, "rotate": False},
                     "engine": {"algorithm": "ga", "genome": genome, "dtype": dtype, "device": "cuda",
                                "capacity": 4, "batch_size": 3, "mutation_sigma": 0.05,
                                "stagnation_patience": 0, **(engine or {})},
                     "migration": {"interval": 2, "emigrants": 1}}, nranks)


def _digest(states: dict) -> str:
    digest = hashlib.sha1()
    for index in sorted(states):
        for key in ("genomes", "fitness", "ids", "births"):
            digest.update(np.ascontiguousarray(states[index]["archive"][key]).tobytes())
    return digest.hexdigest()


def _run(comm, job, generations=4):
    """(digest of every island on rank 0, breed mode, rows this rank sent after generation 0,
    rows the sync sent, survivors this rank rebuilt, whether every replica holds the rows
    the leader counts it as holding). After generation 2, island 0's members are put in reverse order on rank 0 (the
    replicas follow by device copies)."""
    from mpievo.evo.device import to_host

    scheme = build_scheme(comm, job)
    rows = []          # rows of every array this rank's group exchange sent
    try:
        scheme.initialize()
        group = getattr(scheme, "group", None)
        if group is not None:
            real = group.exchange

            def spy(sends=(), recvs=(), **kw):
                rows.extend(a.shape[0] for _, a in sends if len(a.shape) == 2 and a.shape[1] == DIM)
                return real(sends, recvs, **kw)

            group.exchange = spy
        islands = scheme.inner.islands if getattr(scheme, "inner", None) is not None else getattr(scheme, "islands", {})
        for generation in range(generations):
            if generation == 2 and 0 in islands:
                islands[0].archive.retain(np.arange(islands[0].archive.size)[::-1])
            scheme.step()
        parts = comm.gather_object(scheme.island_states())
        breeding = getattr(scheme, "breeding", None)
        counts = (getattr(breeding, "sent_rows", 0), getattr(breeding, "made", 0))
        replicas = comm.gather_object({i: to_host(r) for i, r in getattr(breeding, "replicas", {}).items()})
        same = comm.rank != 0 or all(     # every slot the leader counts as held (not immigrants since)
            replica[held].tobytes() == islands[i].archive.host_genomes()[held].tobytes()
            for part in replicas for i, replica in part.items() if i in islands    # rank 0's group's
            for held in [np.flatnonzero(breeding._synced[i][:islands[i].archive.size]
                                        == islands[i].archive.row_versions())])
        mode = getattr(scheme, "breed", "island")
    finally:
        getattr(scheme, "close", lambda: None)()
    digest = _digest({i: s for part in parts for i, s in part.items()}) if comm.rank == 0 else None
    return digest, mode, sum(rows), *counts, same


def test_rebuild_order_makes_each_survivor_before_its_slot_is_read():
    assert rebuild_order({}, {}) == []
    assert rebuild_order({0: 2}, {0: (2, 1)}) == [(0, 2, True)]           # replaces its own parent
    steps = rebuild_order({0: 1, 1: 2, 2: 3}, {0: (0, 0), 1: (1, 0), 2: (2, 0)})   # a chain
    assert steps == [(2, 3, False), (1, 2, False), (0, 1, False)]


def test_device_breeding_is_refused_where_it_cannot_run():
    problem = make_problem("sphere", dim=DIM)
    cuda = dict(algorithm="ga", device="cuda")
    assert breeding_rows("evaluator", [EngineConfig(**cuda)], problem, SelfComm())[0] == "evaluator"
    with pytest.raises(ValueError, match=r"run.breed = 'evaluator' on device islands: expected engine.genome "
                                         r"'dense' or 'delta' \(rows on the device\), got 'seeded' on island 0"):
        breeding_rows("evaluator", [EngineConfig(genome="seeded", **cuda)], problem, SelfComm())
    with pytest.raises(ValueError, match="expected engine.unique false, got True on island 1; engine.device 'cuda' "
                                         "on every island of the group, got 'cpu' on island 1"):
        breeding_rows("evaluator", [EngineConfig(**cuda), EngineConfig(algorithm="ga", device="cpu", unique=True)],
                      problem, SelfComm())
    assert breeding_rows("auto", [EngineConfig(**cuda)], problem, SelfComm()) == ("leader", None)  # small rows


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_blocks_and_single_children_bred_on_the_device_are_the_hosts_bits(dtype):
    from mpievo.evo import device_operators, half, operators
    from mpievo.evo.algorithms.ga import breeding_box
    from mpievo.evo.device import to_device, to_host
    from mpievo.evo.streams import stream
    from mpievo.parallel.breed_device import breed_device_rows
    from mpievo.parallel.breed_local import BreedPlan, breed_rows

    rows = half.genome_dtype(dtype)
    problem = make_problem("sphere", dim=DIM)
    box = breeding_box(problem, rows)
    archive = np.random.default_rng(1).uniform(-3, 3, (4, DIM)).astype(rows)
    rng, n, compute = stream(2, 0, 7), 5, half.compute_dtype(dtype)
    for rate, code in ((0.3, operators.bound_code("clip")), (0.03, operators.bound_code("reflect"))):
        vary = operators.vary_plan(rng, n, DIM, rate, code)
        plan = BreedPlan(0, "vary", n, vary.key, vary.base, rng.integers(0, 4, n), rng.integers(0, 4, n),
                         rng.random(n).astype(compute), np.full(n, 0.4, compute), code, vary.threshold,
                         vary.inv_log_q, vary.dense)
        whole = np.empty((n, DIM), rows)
        counts = breed_rows(plan, archive, 0, n, box, whole)
        placed, replica = tuple(device_operators.place(a) for a in box), to_device(archive)
        for a, b in ((0, 2), (2, 5), (3, 4)):
            out = device_operators.empty((b - a, DIM), rows)
            got = breed_device_rows(plan, replica, a, b, placed, out)
            assert to_host(out).tobytes() == whole[a:b].tobytes() and got.tolist() == counts[a:b].tolist()
        assert counts.any()


def test_a_group_of_one_rank_breeds_the_device_island_models_children():
    """The whole device path in one process (plans, replica archive, sync of generation 0)."""
    from mpi4py import MPI

    from mpievo.parallel.groups import GroupLayout
    from mpievo.parallel.hybrid import HybridScheme
    from mpievo.parallel.job import build_problem, job_problem

    job = _job(1, engine=RESTARTS)
    scheme = HybridScheme(Communicator(MPI.COMM_SELF), GroupLayout(((0,),), 0),
                          job_problem(job, build_problem(job.problem)), job.engines, seed=job.run.seed,
                          policy=job.policy, schedule=job.schedule, breed="evaluator")
    serial = build_scheme(SelfComm(), job)
    try:
        for s in (scheme, serial):
            s.initialize()
            for _ in range(4):
                s.step()
        assert {type(i.algorithm).__name__ for i in scheme.inner.islands.values()} == {"DevicePlannedGA"}
        restarts = [sum(i.algorithm.restarts for i in s.islands.values()) for s in (scheme.inner, serial)]
        assert restarts[0] == restarts[1] > 0
        assert _digest(scheme.island_states()) == _digest(serial.island_states())
    finally:
        scheme.close()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("genome, dtype, engine", CASES)
def test_evaluators_breed_device_islands_bit_for_bit_with_no_child_bytes(world, genome, dtype, engine):
    comm = Communicator(world)
    job = _job(comm.size, genome, dtype, engine, scheme="centralized", breed="evaluator")
    generations = 6 if engine is RESTARTS else 4      # a restart's compaction, its refill, then parents again
    digest, mode, sent, synced, made, same = _run(comm, job, generations)
    serial = _run(SelfComm(), _job(1, genome, dtype, engine), generations)[0] if comm.rank == 0 else None
    # after generation 0 only rows the replicas never held travel (generation 0's, immigrants):
    # plans, fitness and decisions otherwise, no child
    rows = 2 * 4 + 2 * (generations // 2)      # per other rank: generation 0's, one immigrant per migration
    ok = mode == "evaluator" and sent == synced <= (comm.size - 1) * rows and same
    made = sum(comm.allgather_object(made))
    ok = ok and made > 0 and (comm.rank != 0 or digest == serial)
    all_ranks_agree(world, ok, f"{mode}: {sent} rows sent, {synced} synced, {made} rebuilt, replicas the same {same}; "
                               f"{digest} vs {serial}")
    comm.free()


@pytest.mark.mpi(min_size=4)
def test_hybrid_groups_of_device_islands_breed_on_evaluators(world):
    comm = Communicator(world)
    if comm.size % 2:
        pytest.skip("groups of 2 ranks need an even rank count")
    islands = comm.size // 2 * 2
    job = _job(comm.size, dtype="bfloat16", scheme="hybrid", ranks_per_island=2, islands=islands, breed="evaluator")
    digest, mode, _, _, made, same = _run(comm, job)
    serial = _run(SelfComm(), _job(1, dtype="bfloat16", islands=islands))[0] if comm.rank == 0 else None
    ok = mode == "evaluator" and same and (comm.rank != 0 or digest == serial)
    all_ranks_agree(world, ok, f"{mode}, {made} rebuilt, replicas the same {same}; {digest} vs {serial}")
    comm.free()


@pytest.mark.mpi(min_size=2)
def test_device_evaluator_checkpoints_resume_from_and_into_the_island_model(world, tmp_path_factory, monkeypatch):
    from mpievo.evo import Island
    from mpievo.io import load_latest
    from parallel.parallel_helpers import stop_and_checkpoint

    monkeypatch.setattr(Island, "diversity", lambda self: 0.0)    # the log's: a slow reduction in the simulator
    comm = Communicator(world)
    run = {"scheme": "centralized", "breed": "evaluator"}
    ckpt = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    stopped = stop_and_checkpoint(comm, _job(comm.size, **run), ckpt, at=3)
    ok = stopped.stopped and stopped.generations < 5
    straight = run_job(_job(1), SelfComm()) if comm.rank == 0 else None
    if comm.rank == 0:     # the evaluators' checkpoint, resumed by the device island model
        ok = ok and best_genome_bytes(run_job(_job(1), SelfComm(), restored=load_latest(ckpt))) == \
            best_genome_bytes(straight)
    # a host island model's checkpoint (device "cpu"), resumed on the evaluators' device path
    host = comm.bcast_object(str(tmp_path_factory.mktemp("host")) if comm.rank == 0 else None)
    if comm.rank == 0:
        stop_and_checkpoint(SelfComm(), _job(1, engine={"device": "cpu"}), host, at=3)
    comm.barrier()
    resumed = run_job(_job(comm.size, **run), comm, restored=load_latest(host, islands=[0, 1] if comm.rank == 0
                                                                         else [], comm=comm))
    if comm.rank == 0:
        island_model = run_job(_job(1), SelfComm(), restored=load_latest(host))
        ok = ok and best_genome_bytes(resumed) == best_genome_bytes(island_model) != b""
    all_ranks_agree(world, ok, "a resume across the device evaluator path differs from the island model's")
    comm.free()


def test_the_memory_estimate_counts_the_replicas():
    from mpievo.parallel.memory import rank_estimate

    def job(breed):
        return validate({"run": {"scheme": "centralized", "islands": 2, "breed": breed},
                         "problem": {"name": "sphere", "dim": 1000},
                         "engine": {"device": "cuda", "capacity": 8, "batch_size": 4}}, 4)

    leader, evaluator = job("leader"), job("evaluator")
    # every rank's GPU: 2 islands x 8 rows and its 1 child (the island estimate: 1 island's
    # 12 rows and the draws of 4 children)
    assert rank_estimate(leader, 4)[1] == 12 * 4000 + 4 * 1000 * 8
    assert rank_estimate(evaluator, 4)[1] == 17 * 4000
