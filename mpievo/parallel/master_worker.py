"""The master-worker scheme (``run.scheme = "master_worker"``): rank 0 (the master)
holds every island and breeds; ranks 1..P-1 (the workers) pull blocks of rows to
evaluate.

A worker asks for work by returning the fitness of its last block (its first request
is implicit); the master answers with the next queued block (a batch of n rows is cut
into blocks of ``ceil(n / (4 * workers))`` rows), so a fast worker takes more blocks than
a slow one, where ``centralized`` cuts every batch into one even share per rank. Messages are
pickled point-to-point objects (``recv_object`` from any source);
the master sends a worker a block only after that worker's last result arrived, so each
pair of ranks has at most one message in flight each way and nothing can deadlock. The
master posts a block (``isend_object``) and goes on: a large block waits for its worker
to take it, and a master that waited too would leave the other workers and its own
breeding idle meanwhile (4 ranks on 2 cores, blocks of 1e5 genes: 2.2-2.8 ms of waiting
per block, two thirds of the master's time). The post completes before the worker's
result arrives, so the block's rows stay unchanged while it travels.

Workers hold no island state, so they take no part in the run loop's per-generation
work: rank 0 runs the loop over a one-rank communicator (:attr:`MasterWorkerScheme.loop_comm`:
logs, the stop/target/checkpoint-time vote, migration between its islands), and a
worker serves blocks from the first generation to the last. Rank 0 summons the workers
out of :meth:`~MasterWorkerScheme.serve` only to join a checkpoint (every rank writes
its file) and once at the end (every rank returns the same run result); a summons
carries the run state. Stop requests and the checkpoint clock are rank 0's; a rank that
fails aborts the job through the library's abort machinery (``mpievo run``); one that
hangs times out with the communicator's timeout.

``engine.evaluation`` (the same on every island):

* ``generational``: the islands step one after another as in the island model; each
  batch is cut into blocks handed out on demand and its fitness placed by row. Between
  batches and between generations the workers wait for the master's next batch.
* ``steady``: every island keeps one batch in flight at all times. The blocks of all the
  islands' batches wait in one queue; a worker that returns a block gets the next one
  at once; an island whose batch is complete is told at once and asks its next batch,
  queued behind the others -- also across generations: an island done with generation
  g asks its first batch of g+1 while the other islands' batches of g are still out
  (at most one generation ahead; a batch of g+1 that is back before g ends is told
  when g+1 begins). So no worker waits at the end of a generation while any island may
  breed. The run drains (workers wait for the last blocks) only where the island model
  forbids asking ahead or the loop must see every island at g: before a migration
  (migrants go out after every island's last batch of g, before any batch of g+1),
  before a checkpoint, at the end of the run, and at the generation where a stop,
  target or checkpoint-time vote takes effect (the loop knows all of these one
  generation before, see :mod:`.runner`). Generation 0's initial populations go out
  together, every island's in the one queue.

Guarantees, both modes: the budget is never exceeded (each island's share, as in the
island model), every child is evaluated exactly once, and each island sees the same
sequence of batches, fitness and migrants as in the island model, so the result is
bit-identical to the island model on any rank count, for the same seed and island count
and a row-independent fitness (see :mod:`.groups`). Logs, votes and checkpoints see every
island exactly at the end of generation g (a batch asked ahead is told only in g+1), so
where a run ends and what it saves are those of the island model. ``steady`` is not a
per-child steady-state GA: an island algorithm learns a batch before it breeds the next
one (the ask/tell protocol of :mod:`mpievo.evo.algorithms.base`), so one batch per
island is in flight; with a single island the workers still wait for each batch's
slowest block. Its gain grows with the islands, with smaller batches, with longer
migration intervals and with the spread of evaluation times.

Evaluator breeding (``run.breed = "evaluator"``, or ``"auto"`` by the rules of
:func:`~.breed_local.choose_breeding`; every rank in one node): every island's archive
rows live once per node in shared memory, the master's GA draws each batch's plan
(:class:`~.breed_local.PlannedGA`) and a block is ``("breed", (plan, start, stop,
evaluated))`` instead of rows; the worker breeds children ``start..stop`` from the shared
rows with the whole batch's counters, evaluates them and returns their mutation counts
and fitness (a :class:`Batch` records who bred each child). The protocol that keeps a
plan from reading a row before it is written (:mod:`.breed_pool`): when an island's
merge has chosen its survivors, the master sends each worker that bred some
``("write", (island, children, slots))`` and waits for every ``("written", island)``
(each worker flushes its writes before it answers) before the merge returns, so before
the island's next plan and before any read of its rows on the master; blocks of other
islands that come back meanwhile are placed and new ones handed out (none reads the
island's rows). The master flushes its own writes (generation 0, immigrants, a restore)
before it sends a plan, a worker flushes before it reads. Only plans, slots, counts and
fitness cross ranks: no child body.

Checkpoints hold the island model's states (every island on rank 0) and run state, so
a run resumes under any scheme and any scheme's checkpoint resumes here. With P = 1
:func:`mpievo.parallel.build_scheme` runs the island model.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Sequence

import numpy as np

from ..comm.protocol import SelfComm
from ..evo.engine_config import EngineConfig
from ..evo.problems import Problem
from ..rules.budget import plan
from .breed_local import choose_breeding
from .breed_pool import PooledBreeding
from .groups import evaluate_block
from .led import LedScheme
from .scheme import IslandScheme, StepResult


class Batch:
    """One island batch out with the workers: its rows, their fitness as it comes
    back, the rows still out, and (steady) its island and the generation it belongs to.
    With a ``plan`` (evaluator breeding) the workers breed the plan's children (``rows``
    of them; ``genomes`` is the GA's placeholder, its length the children evaluated) and
    ``workers`` says who bred each."""

    def __init__(self, genomes: np.ndarray, island=None, generation: int = 0, plan=None):
        self.plan = plan
        self.genomes = np.ascontiguousarray(genomes) if plan is None else genomes
        self.fitness = np.empty(len(genomes), np.float64)
        self.rows = len(genomes) if plan is None else plan.n
        self.left = self.rows
        self.workers = None if plan is None else np.zeros(plan.n, np.int64)
        self.island = island
        self.generation = generation


def block_bounds(rows: int, workers: int) -> list[tuple[int, int]]:
    """The (start, stop) blocks a batch of ``rows`` is cut into: ``ceil(rows / (4 * workers))``
    rows each (about four per worker: fine enough to balance, few enough messages), the
    last one shorter."""
    size = max(1, -(-rows // (4 * workers)))
    return [(a, min(a + size, rows)) for a in range(0, rows, size)]


class WorkerPool:
    """The master's side: queue blocks, hand them to idle workers, collect fitness.

    Args:
        comm: the Communicator of every rank (workers are ranks 1..size-1).
        breeding: the :class:`~.breed_pool.PooledBreeding` under ``run.breed =
            "evaluator"`` (blocks carry plans), else None.
    """

    def __init__(self, comm, breeding=None):
        if comm.size < 2:
            raise ValueError(f"expected at least 2 ranks (a master and a worker), got {comm.size}")
        self.comm = comm
        self.breeding = breeding
        self.queue: deque = deque()            # (batch, start, stop) not handed out yet
        self.idle = deque(range(1, comm.size))
        self.out: dict[int, tuple] = {}        # worker -> ((batch, start, stop), its message's request)
        self.done: deque = deque()             # batches completed while the master awaited writes

    def batch(self, genomes: np.ndarray, island=None, generation: int = 0) -> Batch:
        """The :class:`Batch` of ``genomes`` the GA just asked, with its plan when the
        workers breed it."""
        plan = None
        if self.breeding is not None:
            plan, self.breeding.pending = self.breeding.pending, None
        return Batch(genomes, island, generation, plan)

    def submit(self, batch: Batch) -> None:
        """Queue ``batch``'s blocks (handed out by :meth:`feed`)."""
        for start, stop in block_bounds(batch.rows, self.comm.size - 1):
            self.queue.append((batch, start, stop))

    def feed(self) -> None:
        """Hand queued blocks to idle workers, first come first served."""
        while self.idle and self.queue:
            worker = self.idle.popleft()
            batch, start, stop = block = self.queue.popleft()
            if batch.plan is None:
                purpose, message = "evaluation", ("evaluate", batch.genomes[start:stop])
            else:
                purpose, message = "breeding", self.breeding.order(batch.plan, start, stop, len(batch.fitness))
            with self.comm.purpose(purpose):
                self.out[worker] = block, self.comm.isend_object(message, worker)

    def collect(self) -> Batch:
        """Wait for one block's fitness, place it by row; its batch (done when ``left`` is 0)."""
        if self.done:
            return self.done.popleft()
        with self.comm.purpose("evaluation"):
            worker, fitness = self.comm.recv_object()
        return self._place(worker, fitness)

    def _place(self, worker: int, fitness: np.ndarray) -> Batch:
        (batch, start, stop), posted = self.out.pop(worker)
        posted.wait()       # returns at once: the worker had the block
        if batch.plan is None:
            batch.fitness[start:stop] = fitness
        else:               # the block's mutation counts, then its evaluated children's fitness
            batch.workers[start:stop] = worker
            if batch.plan.counts is not None:
                batch.plan.counts[start:stop] = fitness[:stop - start]
            batch.fitness[start:min(stop, len(batch.fitness))] = fitness[stop - start:]
        batch.left -= stop - start
        if batch.plan is not None and not batch.left:
            self.breeding.bred_by[batch.plan.island] = batch.workers
        self.idle.append(worker)
        return batch

    def write(self, island: int, orders: Mapping[int, tuple]) -> None:
        """Each worker of ``orders`` writes the rows it bred (``orders[worker]``: children,
        slots) into island ``island``'s shared rows; returns when all have answered (the
        protocol of :mod:`.breed_pool`). Blocks that come back meanwhile are placed (a
        batch they complete is the next :meth:`collect`'s) and others handed out: none
        reads this island's rows, whose batch is complete and next one not asked."""
        with self.comm.purpose("breeding"):
            for worker, (children, slots) in orders.items():
                self.comm.send_object(("write", (island, children, slots)), worker)
        waiting = set(orders)
        while waiting:
            with self.comm.purpose("evaluation"):
                worker, message = self.comm.recv_object()
            if isinstance(message, tuple):          # ("written", island)
                waiting.discard(worker)
                continue
            batch = self._place(worker, message)
            if not batch.left:
                self.done.append(batch)
            self.feed()

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        """The fitness of one batch, its blocks evaluated by the workers (generational)."""
        batch = self.batch(genomes)
        self.submit(batch)
        self.feed()
        while batch.left:
            self.collect()
            self.feed()
        return batch.fitness

    def release(self, message) -> None:
        """End every worker's :func:`serve` call, handing it ``message``.

        Raises:
            RuntimeError: blocks are queued or out (a worker would miss the message).
        """
        if self.queue or self.out:
            raise RuntimeError(f"expected every worker idle and no block queued before a release, got "
                               f"{len(self.out)} blocks out and {len(self.queue)} queued")
        with self.comm.purpose("evaluation"):
            for worker in range(1, self.comm.size):
                self.comm.send_object(("release", message), worker)


def serve(problem: Problem, comm, answer=None):
    """A worker's side: evaluate blocks until the master releases it; returns the
    master's message. ``answer(kind, payload)`` answers the orders of evaluator
    breeding ("breed", "write": :meth:`~.breed_pool.PooledBreeding.answer`)."""
    while True:
        with comm.purpose("evaluation"):
            _, (kind, payload) = comm.recv_object(0)
        if kind == "release":
            return payload
        reply = evaluate_block(problem, payload) if kind == "evaluate" else answer(kind, payload)
        with comm.purpose("breeding" if kind == "write" else "evaluation"):
            comm.send_object(reply, 0)


class PooledProblem(Problem):
    """The master's view of ``problem``: each batch evaluated by the workers."""

    def __init__(self, problem: Problem, pool: WorkerPool):
        self.__dict__.update(problem.__dict__)     # the same bounds, name, sense, hooks
        self.local = problem
        self.pool = pool

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        return self.pool.evaluate(genomes)


class SteadyIslands(IslandScheme):
    """The island model on the master with every island's batch in flight at once
    (``engine.evaluation = "steady"``, see the module docstring)."""

    def __init__(self, pool: WorkerPool, problem: Problem, engines: Sequence[EngineConfig], **options):
        super().__init__(SelfComm(), PooledProblem(problem, pool), engines, **options)
        self.pool = pool
        self.flight: dict[int, Batch] = {}     # island -> its batch asked and not told yet

    def initialize(self) -> None:
        """Generation 0 with every island's initial population out with the workers at
        once (the same genomes and fitness as one island after another)."""
        batches = [Batch(self.islands[i].initial_population(), self.islands[i]) for i in self.local_indices]
        for batch in batches:
            self.pool.submit(batch)
        self.pool.feed()
        while self.pool.out:
            self.pool.collect()
            self.pool.feed()
        for batch in batches:
            batch.island.initialize_with(batch.genomes, batch.fitness)
        self.generation = 0

    def step(self, ahead: bool = False) -> StepResult:
        """Run generation ``generation + 1``; with ``ahead`` an island done with it asks
        its first batch of the next generation at once (never before a migration).

        Returns once every island is done with this generation; batches asked ahead may
        still be out (told in the next step).
        """
        if self.generation < 0:
            raise RuntimeError("expected initialize() or restore() before step(), got neither")
        generation = self.generation + 1
        ahead = ahead and generation != self.next_migration
        for index in self.local_indices:
            batch = self.flight.get(index)
            if batch is None or not batch.left:      # none, or asked ahead and complete
                self._next(index, generation, ahead)
        self.pool.feed()
        while any(batch.generation == generation for batch in self.flight.values()):
            batch = self.pool.collect()
            if not batch.left and batch.generation == generation:
                self._next(batch.island.index, generation, ahead)   # queued before feeding: out now
            self.pool.feed()
        self.generation = generation
        result = StepResult(generation)
        if generation == self.next_migration:
            result.migration = self._migrate(generation)
        return result

    def _next(self, index: int, generation: int, ahead: bool) -> None:
        """Tell island ``index`` its complete batch, if any, and queue its next one: of
        ``generation`` while it has children of it to evaluate, else (``ahead``) of the next."""
        island = self.islands[index]
        done = self.flight.pop(index, None)
        if done is not None:
            island.tell(done.fitness, evaluated=len(done.fitness))
        batch = self._ask(island, generation)
        if batch is None and ahead:
            batch = self._ask(island, generation + 1)
        if batch is not None:
            self.flight[index] = batch
            self.pool.submit(batch)

    def _ask(self, island, generation: int) -> Batch | None:
        """``island``'s next batch of ``generation``, or None when it evaluated that
        generation's children since its initial population or spent its share (the
        island model's rule, one step)."""
        start = self.plan.initial[island.index]
        share = None if self.plan.shares is None else self.plan.shares[island.index]
        left = None if share is None else share - island.evaluations
        if island.evaluations - start >= generation * self.plan.round_size or (left is not None and left <= 0):
            return None
        genomes = island.ask(island.generation + 1)
        rows = genomes.shape[0] if left is None else min(left, genomes.shape[0])
        return self.pool.batch(genomes[:rows], island, generation)


class MasterWorkerScheme(LedScheme):
    """Every island on rank 0, evaluated by ranks 1..P-1 (see the module docstring).

    A scheme *served* by its other ranks (see :mod:`.runner`): rank 0 steps it over
    :attr:`loop_comm` (None on the workers) and calls :meth:`summon` where the workers
    must join a collective; a worker calls :meth:`serve` until summoned.

    Args:
        comm: an mpievo Communicator of at least 2 ranks.
        problem, engines, seed, policy, schedule, budget: as for :class:`IslandScheme`;
            ``engines[0].evaluation`` chooses generational or steady.
        breed: ``run.breed``: "leader" (the master breeds every child), "evaluator"
            (the workers breed their blocks from the rows held once per node,
            :mod:`.breed_pool`) or "auto" (:func:`~.breed_local.choose_breeding`).
    """

    serving_rank = "worker rank {rank}"

    def __init__(self, comm, problem: Problem, engines: Sequence[EngineConfig], *, breed: str = "leader",
                 **options):
        self.comm = comm
        self.problem = problem
        self.engines = tuple(engines)
        self.n_islands = len(self.engines)
        self.evaluation = self.engines[0].evaluation
        self.inner = None
        self.loop_comm = None
        self.breed = choose_breeding(breed, self.engines, problem, comm)
        # every island's rows, once per node (collective)
        self.breeding = PooledBreeding(problem, comm, self.engines) if self.breed == "evaluator" else None
        if comm.rank == 0:
            pool = WorkerPool(comm, self.breeding)
            if self.evaluation == "steady":
                self.inner = SteadyIslands(pool, problem, self.engines, **options)
            else:
                self.inner = IslandScheme(SelfComm(), PooledProblem(problem, pool), self.engines, **options)
            self.pool = pool
            self.loop_comm = SelfComm()
            on_device = [i for i, island in self.inner.islands.items() if island.on_device]
            if on_device:
                raise ValueError(f"expected host islands under master_worker (workers evaluate host rows), "
                                 f"got islands {on_device} on the GPU")
            if self.breeding is not None:
                self.breeding.pool = pool
                self.breeding.adopt(self.inner.islands)
        self.budget_generation = plan(self.engines, problem.dim, options.get("budget")).budget_generation
        self.generation = -1
        self._run_state: dict = {}

    # ------------------------------------------------------------ rank 0
    def initialize(self) -> None:
        self._master().initialize()
        self._adopt(self.inner.run_state())

    def step(self, ahead: bool = False) -> StepResult:
        """Generation ``generation + 1`` on rank 0; ``ahead``: steady islands may start
        the next one (the run loop says so where it neither saves, ends nor acts on a vote)."""
        if self.generation < 0:
            raise RuntimeError("expected initialize() or restore() before step(), got neither")
        inner = self._master()
        result = inner.step(ahead) if isinstance(inner, SteadyIslands) else inner.step()
        self._adopt(inner.run_state())
        return result

    def summon(self, call: Mapping) -> None:
        """End every worker's :meth:`serve` with ``call`` and the run state (rank 0).

        Raises:
            RuntimeError: not rank 0, or blocks still out (a step that ran ahead).
        """
        self._master()
        self.pool.release({**call, "run_state": self.inner.run_state()})

    def _master(self) -> IslandScheme:
        if self.inner is None:
            raise RuntimeError(f"expected rank 0 (the master) to step master_worker, got "
                               f"{self.serving_rank.format(rank=self.comm.rank)} (workers call serve())")
        return self.inner

    # ------------------------------------------------------------ workers
    def serve(self) -> dict:
        """Evaluate blocks until rank 0 summons this worker; the summons (its run state
        adopted)."""
        answer = {} if self.breeding is None else {"answer": self.breeding.answer}
        call = serve(self.problem, self.comm, **answer)
        self._adopt(call["run_state"])
        return call

    def close(self) -> None:
        """Free the shared archives of evaluator breeding (collective over the node)."""
        if self.breeding is not None:
            self.breeding.close()
            self.breeding = None
