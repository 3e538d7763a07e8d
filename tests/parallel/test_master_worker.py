"""The master-worker scheme: blocks pulled by workers, generational and steady evaluation
bit-identical to the island model, checkpoints shared with the other schemes, a fast
worker taking more blocks, steady keeping workers busier, and abort on a failed rank
(steady across generation boundaries: test_steady.py)."""

import os
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest
from mpi4py import MPI
from parallel_helpers import small_job, stop_and_checkpoint
from test_hybrid import FEATURES

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import RESUMABLE_KEYS, ConfigError, validate
from mpievo.evo.problems import Problem, builtin_problem
from mpievo.io import check_config_compatible, load_latest
from mpievo.parallel import best_genome_bytes, build_scheme, master_worker, run_job
from mpievo.parallel.master_worker import MasterWorkerScheme, block_bounds

MODES = ("generational", "steady")
#: blocks of 1 to 4 rows: a rotation's matrix product rounds by the row count, so the
#: bit-for-bit comparisons use the unrotated (row-independent) problem
ROWWISE = {"rotate": False}


def _job(nranks, evaluation, **tables):
    run = {"scheme": "master_worker", "islands": 4, **tables.pop("run", {})}
    engine = {"evaluation": evaluation, **tables.pop("engine", {})}
    return small_job(nranks, run=run, engine=engine, problem=ROWWISE, **tables)


def _serial(**tables):
    return small_job(1, problem=ROWWISE, **tables)


def test_blocks_cut_a_batch_in_order():
    assert block_bounds(9, 2) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 9)]     # ceil(9 / 8) rows
    assert block_bounds(3, 4) == [(0, 1), (1, 2), (2, 3)]
    assert block_bounds(64, 1) == [(0, 16), (16, 32), (32, 48), (48, 64)]


@pytest.mark.parametrize("tables, nranks, message", [
    ({"engine": {"evaluation": "steady"}}, 2,
     'engine.evaluation: expected "generational" with run.scheme = \'island\' '
     r'\("steady" is the master_worker scheme\'s\), got \'steady\''),
    ({"run": {"scheme": "master_worker", "islands": 2}, "engine": {"evaluation": ["steady", "generational"]}}, 2,
     r"engine.evaluation: expected one value for every island, got \['generational', 'steady'\]"),
    ({"run": {"scheme": "master_worker"}, "engine": {"device": "cuda"}}, 2,
     'engine.device: expected "cpu" with run.scheme = \'master_worker\' .*, got \'cuda\''),
])
def test_evaluation_and_device_are_checked_against_the_scheme(tables, nranks, message):
    with pytest.raises(ConfigError, match=message):
        validate(tables, nranks)


def test_master_worker_defaults_to_one_island_on_any_rank_count():
    job = validate({"run": {"scheme": "master_worker"}, "engine": {"evaluation": "steady"}}, 4)
    assert job.run.islands == 1 and job.engines[0].evaluation == "steady"


def test_a_steady_run_may_resume_under_another_scheme():
    # the result is the same either way, so the mode may change with the scheme on resume
    saved = validate({"run": {"scheme": "master_worker", "islands": 2}, "engine": {"evaluation": "steady"}}, 2)
    check_config_compatible(saved.config, validate({"run": {"islands": 2}}, 2).config, allow=RESUMABLE_KEYS)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("evaluation", MODES)
@pytest.mark.parametrize("tables", [{}, FEATURES, {"run": {"budget": 1000}, "engine": {"batch_size": 7}}],
                         ids=["default", "all-features", "budget"])
def test_both_modes_give_the_island_model_bit_for_bit(world, evaluation, tables):
    comm = Communicator(world)
    job = _job(comm.size, evaluation, **{k: dict(v) for k, v in tables.items()})
    scheme = build_scheme(comm, job)
    held = comm.size == 1 or isinstance(scheme, MasterWorkerScheme) and (
        sorted(scheme.inner.islands) == [0, 1, 2, 3] if comm.rank == 0 else scheme.inner is None)
    pulled = run_job(job, comm)
    serial = run_job(_serial(**{k: dict(v) for k, v in tables.items()}), SelfComm())
    ok = held and pulled.evaluations == serial.evaluations and pulled.generations == serial.generations
    if comm.rank == 0:
        ok = ok and best_genome_bytes(pulled) == best_genome_bytes(serial) and pulled.islands == serial.islands
    all_ranks_agree(world, ok, f"master_worker ({evaluation}) differs from the island model")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("evaluation", MODES)
def test_checkpoints_resume_across_schemes(world, tmp_path_factory, evaluation):
    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    every = list(range(4)) if comm.rank == 0 else []
    stopped = stop_and_checkpoint(comm, _job(comm.size, evaluation, **FEATURES), directory)
    # the master_worker checkpoint, resumed here and as 4 islands in one process ...
    resumed = run_job(_job(comm.size, evaluation, **FEATURES), comm,
                      restored=load_latest(directory, islands=every, comm=comm))
    straight = run_job(_serial(**FEATURES), SelfComm())
    ok = stopped.stopped and resumed.evaluations == straight.evaluations
    if comm.rank == 0:
        alone = run_job(_serial(**FEATURES), SelfComm(), restored=load_latest(directory))
        ok = ok and best_genome_bytes(resumed) == best_genome_bytes(straight) == best_genome_bytes(alone)
    if comm.size > 4:     # the island scheme needs an island per rank
        all_ranks_agree(world, ok, f"master_worker ({evaluation}) resumed differently")
        return
    # ... and an island-scheme checkpoint resumed under master_worker
    island_dir = comm.bcast_object(str(tmp_path_factory.mktemp("islands")) if comm.rank == 0 else None)
    stop_and_checkpoint(comm, small_job(comm.size, problem=ROWWISE, **FEATURES), island_dir)
    adopted = run_job(_job(comm.size, evaluation, **FEATURES), comm,
                      restored=load_latest(island_dir, islands=every, comm=comm))
    if comm.rank == 0:
        ok = ok and best_genome_bytes(adopted) == best_genome_bytes(straight)
    all_ranks_agree(world, ok, f"master_worker ({evaluation}) resumed differently")


def _slow_on_rank_one(genomes):
    # 100 ms a block of 2 rows: slower than the other workers' share of a batch by far, even
    # when the scheduler holds a fast worker back for tens of milliseconds
    if MPI.COMM_WORLD.Get_rank() == 1:
        time.sleep(0.05 * len(genomes))
    return np.einsum("ij,ij->i", genomes, genomes, dtype=np.float64)


@pytest.mark.mpi(min_size=3)
def test_a_fast_worker_pulls_more_blocks(world):
    comm = Communicator(world)
    problem = Problem(_slow_on_rank_one, 4, -5.0, 5.0, name="slow on rank 1")
    job = validate({"run": {"scheme": "master_worker", "islands": 2, "generations": 4},
                    "engine": {"capacity": 16, "batch_size": 16}}, comm.size, problem=problem)
    run_job(job, comm)
    sent = comm.allgather_object(comm.traffic.get("evaluation", 0))
    # every block's fitness is the same size: bytes sent count a worker's blocks
    # pulled on demand, the slow worker takes about one block of each batch's 8 and the fast
    # ones share the rest (static shares would give each worker about 8 / workers); which
    # fast worker takes more depends on the scheduler (4 ranks on 2 cores), so only their mean
    # is held to twice the slow one's
    fast = sent[2:]
    ok = sent[1] < min(fast) and sent[1] * 2 < sum(fast) / len(fast)
    all_ranks_agree(world, ok, f"the slow worker sent {sent[1]} bytes, the others {sent[2:]}")


@pytest.mark.mpi(min_size=3)
def test_the_master_feeds_the_others_while_a_worker_is_late_to_take_its_block(world, monkeypatch):
    """A run of one batch (8 blocks at 3 or 4 ranks) with worker 1 starting 2 s late. Its
    block (rows of 64 KiB: too large to be buffered, the message waits for the receive)
    is posted, and meanwhile the other workers take the batch's other blocks; a master
    that waited for worker 1 to take it would hand out nothing for 2 s and then share
    the rest with it."""
    comm = Communicator(world)
    problem = builtin_problem("sphere", 16384)
    job = validate({"run": {"scheme": "master_worker", "islands": 1, "budget": 16},
                    "engine": {"capacity": 16, "batch_size": 16}}, comm.size, problem=problem)
    if comm.rank == 1:
        def late(problem, comm, serve=master_worker.serve):
            time.sleep(2.0)
            return serve(problem, comm)

        monkeypatch.setattr(master_worker, "serve", late)
    run_job(job, comm)
    sent = comm.allgather_object(comm.traffic.get("evaluation", 0))
    # the blocks are of equal rows (2 at 2 or 3 workers, 1 from 4), so their fitness
    # messages are of equal bytes
    blocks = len(block_bounds(16, comm.size - 1))
    ok = sent[1] * (blocks - 1) == sum(sent[2:])
    all_ranks_agree(world, ok, f"the late worker sent {sent[1]} bytes of fitness, the others {sent[2:]}")


def _varied_sleep(genomes):
    """10 ms per child, 40 ms for about one child in four (by its genome's bytes)."""
    for row in genomes:
        time.sleep(0.04 if zlib.crc32(np.ascontiguousarray(row).view(np.uint8)) % 4 == 0 else 0.01)
    return np.einsum("ij,ij->i", genomes, genomes, dtype=np.float64)


@pytest.mark.mpi(min_size=4)
def test_steady_keeps_workers_busier_when_costs_vary(world):
    comm = Communicator(world)
    workers = comm.size - 1
    problem = Problem(_varied_sleep, 4, -5.0, 5.0, name="varied sleep")

    def wall(evaluation, generations):
        # a batch of one row per worker: generational waits for each island's slowest
        # child (about 27 ms of a 17.5 ms mean at 3 workers), steady only at the end of
        # each generation; the initial populations are evaluated alike by both
        job = validate({"run": {"scheme": "master_worker", "islands": 8, "generations": generations},
                        "engine": {"capacity": workers, "batch_size": workers, "evaluation": evaluation}},
                       comm.size, problem=problem)
        comm.barrier()
        return run_job(job, comm).wall_s

    for evaluation in MODES:      # untimed: first calls set up MPI paths and imports
        wall(evaluation, 1)
    walls = {evaluation: wall(evaluation, 6) for evaluation in MODES}
    ok = walls["steady"] < 0.85 * walls["generational"]     # measured 0.70 at 3 workers on 2 cores
    all_ranks_agree(world, ok, f"wall times {walls}")


FAILING = """
import numpy as np
from mpi4py import MPI

def f(genomes):
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise ValueError("fitness exploded")
    return np.einsum("ij,ij->i", genomes, genomes)
"""


@pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="starts its own mpiexec: serial stage only")
@pytest.mark.parametrize("evaluation", MODES)
def test_a_failing_worker_aborts_the_job(tmp_path, evaluation):
    # the master waits for that worker's block; the workers serve outside the run loop
    (tmp_path / "failing_fitness.py").write_text(FAILING)
    cmd = [sys.executable, "-m", "mpievo", "launch", "-n", "2", "--", "mpievo", "run", "--problem",
           "failing_fitness:f", "--dim", "4", "--lower", "-1", "--upper", "1", "--generations", "5",
           "--set", "run.scheme=master_worker", "--set", f"engine.evaluation={evaluation}",
           "--out", str(tmp_path / "out")]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert time.monotonic() - start < 60
    assert proc.returncode not in (0, 2), proc.stderr
    assert "mpievo: rank 1 failed: ValueError: fitness exploded" in proc.stderr
