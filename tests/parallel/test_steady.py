"""master_worker's steady evaluation across generation boundaries: islands ask their next
generation's batch while the others finish theirs, every checkpoint, log line and target
still lands where the island model's does, and no worker waits at a generation barrier."""

import time
import zlib

import numpy as np
import pytest
from parallel_helpers import small_job

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.evo.problems import Problem
from mpievo.io import Checkpointer
from mpievo.parallel import RunLoop, RunSettings, best_genome_bytes, build_scheme, run_job

#: every boundary kind at once: a mix of batch sizes (GA 16, DE, CMA-ES), adaptive
#: migration intervals, a budget (a cut last batch: test_master_worker's "budget"
#: case; here the target ends the run first), a checkpoint every 2 generations and a
#: log line every generation; a sphere (improving every few
#: generations, for a target reached late) without rotation: blocks of a few rows must
#: round as the whole batch (see test_master_worker.ROWWISE)
TABLES = {"migration": {"topology": "random", "interval": 3,
                        "adaptive": {"enabled": True, "minimum": 2, "maximum": 6}},
          "engine": {"algorithm": ["ga", "de", "cmaes", "ga"]},
          "run": {"budget": 1500, "generations": 30, "log_every": 1, "checkpoint_every": 2},
          "problem": {"name": "sphere", "rotate": False}}


def _tables(**run):
    tables = {k: dict(v) for k, v in TABLES.items()}
    tables["run"].update(run)
    return tables


class _Logs:
    """Rank 0's log points without their clock (what every island looked like when)."""

    def __init__(self):
        self.points = []

    def on_log(self, point):
        self.points.append((point.generation, point.records, point.evaluations, point.migrations))

    def on_finish(self, result):
        pass


def _watch_ahead(scheme, comm):
    """Count, after each of rank 0's steps, the batches already out for the next generation."""
    ahead = []
    if comm.rank != 0:
        return ahead
    step = scheme.step

    def counted(**options):
        result = step(**options)
        ahead.append(sum(b.generation > scheme.generation for b in scheme.inner.flight.values()))
        return result
    scheme.step = counted
    return ahead


@pytest.mark.mpi(min_size=2)
def test_steady_runs_ahead_yet_checkpoints_and_ends_as_the_island_model(world, tmp_path_factory):
    comm = Communicator(world)
    # a target some island reaches part-way: the island model's own best at generation 9
    target = run_job(small_job(1, **_tables(budget=None, generations=9)), SelfComm()).best_fitness
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("steady")) if comm.rank == 0 else None)
    tables = _tables(scheme="master_worker", target=target)
    tables["engine"]["evaluation"] = "steady"
    job = small_job(comm.size, **tables)
    scheme = build_scheme(comm, job)
    ahead = _watch_ahead(scheme, comm)
    run = job.run
    settings = RunSettings(run.generations, run.log_every, run.checkpoint_every, target=run.target)
    logs, serial_logs = _Logs(), _Logs()
    pulled = RunLoop(comm, scheme, settings, checkpointer=Checkpointer(directory, keep=50, comm=comm),
                     config=job.config, reporters=[logs]).run()
    serial_job = small_job(1, **_tables(target=target))
    serial = RunLoop(SelfComm(), build_scheme(SelfComm(), serial_job), settings, reporters=[serial_logs],
                     checkpointer=Checkpointer(f"{directory}-serial-{comm.rank}", keep=50),
                     config=serial_job.config).run()
    ok = (pulled.stop_reason == serial.stop_reason == "target" and pulled.generations == serial.generations
          and pulled.evaluations == serial.evaluations and len(pulled.checkpoints) == len(serial.checkpoints))
    if comm.rank == 0:
        # saves drained (a release with blocks out raises), yet batches ran ahead elsewhere
        # and every log line saw the islands at its generation (a batch asked ahead told later)
        ok = ok and max(ahead) > 0 and best_genome_bytes(pulled) == best_genome_bytes(serial) \
            and pulled.islands == serial.islands and logs.points == serial_logs.points
    all_ranks_agree(world, ok, f"steady: {pulled.generations} generations, {pulled.stop_reason}, ahead {ahead}; "
                               f"island model: {serial.generations}, {serial.stop_reason}")


def _skewed_sleep(genomes):
    """2 ms per child, 24 ms for about one child in four (by its genome's bytes)."""
    for row in genomes:
        time.sleep(0.024 if zlib.crc32(np.ascontiguousarray(row).view(np.uint8)) % 4 == 0 else 0.002)
    return np.einsum("ij,ij->i", genomes, genomes, dtype=np.float64)


def _watch_starving(scheme, comm):
    """Rank 0: the generation being stepped each time a worker was left without a block
    after the master handed out what it had queued."""
    starved = []
    if comm.rank != 0:
        return starved
    pool, feed, step = scheme.pool, scheme.pool.feed, scheme.step

    def watched_feed():
        feed()
        if pool.idle:
            starved.append(scheme.generation + 1)

    def stepped(**options):      # watched from the first step: generation 0 goes island by island
        pool.feed = watched_feed
        return step(**options)
    scheme.step = stepped
    return starved


@pytest.mark.mpi(min_size=2)
def test_no_worker_waits_at_a_generation_boundary(world):
    """Blocks of one row, costs varying x12, no migration: in the island model each
    island may breed its next batch as soon as its own is told. The generation barrier
    left a worker without a block at the end of every generation (and, steady,
    whenever the last islands finished theirs) until the master bred the next; now one
    is queued for it before the last generation (where the run drains). Counted by
    events, not times, so a loaded machine cannot fake or hide a wait."""
    comm = Communicator(world)
    workers = comm.size - 1
    problem = Problem(_skewed_sleep, 4, -5.0, 5.0, name="skewed sleep")
    # 4 islands of 4 * workers blocks of 2 rows: a worker returning a block finds one
    # queued unless the other workers finish the other 3 islands' next batches (at
    # least 12 * workers * 4 ms / (workers - 1) > 48 ms) while one block (at most 48 ms)
    # of this generation is out: never, bar a worker descheduled that long
    job = validate({"run": {"scheme": "master_worker", "islands": 4, "generations": 6, "log_every": 1},
                    "engine": {"capacity": 8 * workers, "batch_size": 8 * workers, "evaluation": "steady"},
                    "migration": {"interval": 1000}}, comm.size, problem=problem)
    scheme = build_scheme(comm, job, problem)
    starved = _watch_starving(scheme, comm)
    result = RunLoop(comm, scheme, RunSettings(job.run.generations, job.run.log_every)).run()
    early = [g for g in starved if g < result.generations]
    ok = result.generations == 6 and (comm.rank > 0 or starved and not early)   # the last one drains
    all_ranks_agree(world, ok, f"workers left without a block in generations {early}")


@pytest.mark.mpi(min_size=2)
def test_every_initial_population_is_out_at_once(world):
    """Generation 0: all islands' initial populations are queued before the first block
    comes back (one island after another left workers idle at each island's end), and
    the run is still the island model's."""
    comm = Communicator(world)
    workers = comm.size - 1
    problem = Problem(_skewed_sleep, 4, -5.0, 5.0, name="skewed sleep")
    tables = {"run": {"scheme": "master_worker", "islands": 3, "generations": 2, "log_every": 1},
              "engine": {"capacity": 4 * workers, "batch_size": 4 * workers, "evaluation": "steady"}}
    job = validate(tables, comm.size, problem=problem)
    scheme = build_scheme(comm, job, problem)
    submitted = []
    if comm.rank == 0:
        pool, submit, collect = scheme.pool, scheme.pool.submit, scheme.pool.collect
        pool.submit = lambda batch: submitted.append("submit") or submit(batch)
        pool.collect = lambda: submitted.append("collect") or collect()
    result = RunLoop(comm, scheme, RunSettings(job.run.generations, job.run.log_every)).run()
    serial = run_job(validate(tables, 1, problem=problem), SelfComm())
    first = submitted.index("collect") if "collect" in submitted else -1
    ok = comm.rank > 0 or (first == 3 and result.best_fitness == serial.best_fitness
                           and result.evaluations == serial.evaluations)
    all_ranks_agree(world, ok, f"submitted before the first result: {submitted[:6]}")
