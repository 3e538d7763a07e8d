"""The master-worker scheme (``run.scheme = "master_worker"``): rank 0 (the master)
holds every island and breeds; ranks 1..P-1 (the workers) pull blocks of rows to
evaluate.

A worker asks for work by returning the fitness of its last block (its first request
is implicit); the master answers with the next queued block (a batch of n rows is cut
into blocks of ``ceil(n / (4 * workers))`` rows), so a fast worker takes more blocks than
a slow one, where ``centralized`` cuts every batch into one even share per rank. Messages are
pickled point-to-point objects (``send_object``, and ``recv_object`` from any source);
the master sends a worker a block only after that worker's last result arrived, so each
pair of ranks has at most one message in flight each way and nothing can deadlock.
After each generation the master releases the workers with the run state (every rank
then runs the run loop's collectives). A rank that fails aborts the job through the
library's abort machinery (``mpievo run``); one that hangs times out with the
communicator's timeout.

``engine.evaluation`` (the same on every island):

* ``generational``: the islands step one after another as in the island model; each
  batch is cut into blocks handed out on demand and its fitness placed by row.
* ``steady``: every island keeps one batch in flight at once. The blocks of all the
  islands' batches wait in one queue; a worker that returns a block gets the next one
  at once; an island whose batch is complete is told at once and breeds its next batch
  from its current archive, queued behind the others. Workers wait only at the end of
  a generation (the round of :mod:`.budget`), not after every island's batch, so when
  evaluation times vary they stay busier; the master breeds while they evaluate.

Guarantees, both modes: the budget is never exceeded (each island's share, as in the
island model), every child is evaluated exactly once, and each island sees the same
sequence of batches and fitness as in the island model, so the result is bit-identical
to the island model on any rank count, for the same seed and island count and a
row-independent fitness (see :mod:`.groups`). ``steady`` is not an asynchronous
steady-state GA: an island algorithm learns a batch before it breeds the next one (the
ask/tell protocol of :mod:`mpievo.evo.algorithms.base`), so one batch per island is in
flight and with a single island ``steady`` runs like ``generational``; its gain grows
with the islands and with smaller batches. Checkpoints hold the island model's states
(every island on rank 0) and run state, so a run resumes under any scheme and any
scheme's checkpoint resumes here. With P = 1 :func:`mpievo.parallel.build_scheme`
runs the island model.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Sequence

import numpy as np

from ..comm.protocol import SelfComm
from ..evo.config import EngineConfig
from ..evo.problems import Problem
from .budget import plan
from .groups import evaluate_block
from .led import LedScheme
from .scheme import IslandScheme, StepResult


class Batch:
    """One island batch out with the workers: its rows, their fitness as it comes
    back, the rows still out, and the island it belongs to (steady; None otherwise)."""

    def __init__(self, genomes: np.ndarray, island=None):
        self.genomes = np.ascontiguousarray(genomes)
        self.fitness = np.empty(len(self.genomes), np.float64)
        self.left = len(self.genomes)
        self.island = island


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
    """

    def __init__(self, comm):
        if comm.size < 2:
            raise ValueError(f"expected at least 2 ranks (a master and a worker), got {comm.size}")
        self.comm = comm
        self.queue: deque = deque()            # (batch, start, stop) not handed out yet
        self.idle = deque(range(1, comm.size))
        self.out: dict[int, tuple] = {}        # worker -> (batch, start, stop) it evaluates

    def submit(self, batch: Batch) -> None:
        """Queue ``batch``'s blocks (handed out by :meth:`feed`)."""
        for start, stop in block_bounds(len(batch.genomes), self.comm.size - 1):
            self.queue.append((batch, start, stop))

    def feed(self) -> None:
        """Hand queued blocks to idle workers, first come first served."""
        while self.idle and self.queue:
            worker = self.idle.popleft()
            batch, start, stop = block = self.queue.popleft()
            with self.comm.purpose("evaluation"):
                self.comm.send_object(("evaluate", batch.genomes[start:stop]), worker)
            self.out[worker] = block

    def collect(self) -> Batch:
        """Wait for one block's fitness, place it by row; its batch (done when ``left`` is 0)."""
        with self.comm.purpose("evaluation"):
            worker, fitness = self.comm.recv_object()
        batch, start, stop = self.out.pop(worker)
        batch.fitness[start:stop] = fitness
        batch.left -= stop - start
        self.idle.append(worker)
        return batch

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        """The fitness of one batch, its blocks evaluated by the workers (generational)."""
        batch = Batch(genomes)
        self.submit(batch)
        self.feed()
        while batch.left:
            self.collect()
            self.feed()
        return batch.fitness

    def release(self, message) -> None:
        """End every worker's :func:`serve` call, handing it ``message`` (all idle)."""
        with self.comm.purpose("evaluation"):
            for worker in range(1, self.comm.size):
                self.comm.send_object(("release", message), worker)


def serve(problem: Problem, comm):
    """A worker's side of a generation: evaluate blocks until the master releases it;
    returns the master's message."""
    while True:
        with comm.purpose("evaluation"):
            _, (kind, payload) = comm.recv_object(0)
            if kind == "release":
                return payload
            comm.send_object(evaluate_block(problem, payload), 0)


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

    def step(self) -> StepResult:
        if self.generation < 0:
            raise RuntimeError("expected initialize() or restore() before step(), got neither")
        generation = self.generation + 1
        clock = generation * self.plan.round_size
        for index in self.local_indices:
            self._ask(self.islands[index], clock)
        self.pool.feed()
        while self.pool.out:
            batch = self.pool.collect()
            if not batch.left:
                island = batch.island
                island.tell(batch.fitness, evaluated=len(batch.fitness))
                self._ask(island, clock)     # queued before feeding, so its blocks go out now
            self.pool.feed()
        self.generation = generation
        result = StepResult(generation)
        if generation == self.next_migration:
            result.migration = self._migrate(generation)
        return result

    def _ask(self, island, clock: int) -> None:
        """Queue ``island``'s next batch unless it evaluated ``clock`` children since its
        initial population or spent its share (the island model's rule, one step)."""
        start = self.plan.initial[island.index]
        share = None if self.plan.shares is None else self.plan.shares[island.index]
        left = None if share is None else share - island.evaluations
        if island.evaluations - start >= clock or (left is not None and left <= 0):
            return
        genomes = island.ask(island.generation + 1)
        rows = genomes.shape[0] if left is None else min(left, genomes.shape[0])
        self.pool.submit(Batch(genomes[:rows], island))


class MasterWorkerScheme(LedScheme):
    """Every island on rank 0, evaluated by ranks 1..P-1 (see the module docstring).

    Args:
        comm: an mpievo Communicator of at least 2 ranks.
        problem, engines, seed, policy, schedule, budget: as for :class:`IslandScheme`;
            ``engines[0].evaluation`` chooses generational or steady.
    """

    serving_rank = "worker rank {rank}"

    def __init__(self, comm, problem: Problem, engines: Sequence[EngineConfig], **options):
        self.comm = comm
        self.problem = problem
        self.engines = tuple(engines)
        self.n_islands = len(self.engines)
        self.evaluation = self.engines[0].evaluation
        self.inner = None
        if comm.rank == 0:
            pool = WorkerPool(comm)
            if self.evaluation == "steady":
                self.inner = SteadyIslands(pool, problem, self.engines, **options)
            else:
                self.inner = IslandScheme(SelfComm(), PooledProblem(problem, pool), self.engines, **options)
            self.pool = pool
            on_device = [i for i, island in self.inner.islands.items() if island.on_device]
            if on_device:
                raise ValueError(f"expected host islands under master_worker (workers evaluate host rows), "
                                 f"got islands {on_device} on the GPU")
        self.budget_generation = plan(self.engines, problem.dim, options.get("budget")).budget_generation
        self.generation = -1
        self._run_state: dict = {}

    def _serve(self) -> Mapping:
        return serve(self.problem, self.comm)

    def _release(self, run_state: Mapping) -> None:
        self.pool.release(run_state)
