"""Evaluator breeding under master-worker (``run.scheme = "master_worker"``,
``run.breed = "evaluator"``): the workers breed their blocks' children from the
archive rows held once per node, from plans the master's GA draws.

The pieces are :mod:`.breed_local`'s (the shared rows, :class:`~.breed_local.PlannedGA`,
:class:`~.breed_local.SharedArchive`, the counter-based :func:`~.breed_local.breed_rows`);
what differs is the protocol, point-to-point instead of collective (the master's pool
hands blocks to whichever worker is free, see :mod:`.master_worker`):

* a block is ``("breed", (plan, start, stop, evaluated))``: the worker breeds children
  ``start..stop`` of the plan (the bits of the same children of the whole batch), evaluates
  those below ``evaluated``, keeps the rows, and returns their mutation counts and fitness;
* when the island's merge has chosen its survivors, the master sends each worker that
  bred some ``("write", (island, children, slots))``; the worker writes those rows into
  the shared archive, flushes (:meth:`~mpievo.comm.shm.array.SharedArray.flush`) and
  answers ``("written", island)``. The master waits for every answer (placing any
  block's fitness that arrives meanwhile, and handing out blocks of other islands)
  before the island's merge returns, so the island's next plan -- and any read of its
  rows on the master (migration, checkpoints) -- comes after every write is complete;
* the master flushes before it sends a plan (its own writes: generation 0, immigrants,
  a restore) and a worker flushes after it receives one.

A worker keeps the rows it bred of each island's last planned batch until the master's
write for that island or the island's next plan (at most its share of one batch per
island).
"""

from __future__ import annotations

import numpy as np

from .breed_local import BreedPlan, EvaluatorBreeding


class PooledBreeding(EvaluatorBreeding):
    """A master-worker rank's part of evaluator breeding (collective over ``comm`` to
    build: one node-shared array of rows per island, every island's).

    Args:
        problem: the encoded problem (rows), the same on every rank.
        comm: the Communicator of every rank (rank 0 is the master).
        engines: every island's resolved EngineConfig.

    Example::

        breeding = PooledBreeding(problem, comm, engines)
        breeding.adopt(inner.islands)          # the master; workers: serve(problem, comm, breeding.answer)
    """

    def __init__(self, problem, comm, engines):
        super().__init__(problem, comm, engines, range(len(engines)))
        self.pool = None        # the master's WorkerPool (set by it)
        self.bred_by: dict[int, np.ndarray] = {}     # master: island -> the worker of each child
        self._kept: dict[int, tuple] = {}            # worker: island -> (plan id, [(first child, rows)])
        self._spare: list[np.ndarray] = []           # worker: child buffers to reuse

    # --- the master -------------------------------------------------------------
    def order(self, plan: BreedPlan, start: int, stop: int, evaluated: int) -> tuple:
        """The message of a block of ``plan`` (its rows flushed first)."""
        self.shared[plan.island].flush()
        return "breed", (plan, start, stop, evaluated)

    def write(self, island: int, entered: np.ndarray, slots: np.ndarray) -> None:
        """The master's merge decided ``entered`` children go to ``slots``: the workers
        that bred them write them; returns when every write is complete."""
        by = self.bred_by.pop(island, None)
        if by is None or not len(entered):
            return
        orders: dict[int, tuple[list, list]] = {}
        for child, slot in zip(entered, slots):
            cs, ss = orders.setdefault(int(by[child]), ([], []))
            cs.append(int(child))
            ss.append(int(slot))
        self.pool.write(island, orders)
        self.shared[island].flush()

    # --- a worker ---------------------------------------------------------------
    def answer(self, kind: str, payload):
        """A worker's answer to a "breed" or "write" order (None for other kinds)."""
        if kind == "breed":
            return self._serve_breed(*payload)
        if kind == "write":
            self._serve_write(*payload)
            return "written", payload[0]
        return None

    def _serve_breed(self, plan: BreedPlan, start: int, stop: int, evaluated: int) -> np.ndarray:
        shared = self.shared[plan.island]
        shared.flush()                      # the master's writes and other workers' are seen
        ident = (plan.key, plan.base)
        kept = self._kept.get(plan.island)
        if kept is None or kept[0] != ident:    # the island's next batch: the last one's rows are free
            self._free(plan.island)
            kept = self._kept[plan.island] = (ident, [])
        children = self._buffer(shared.array.dtype, stop - start)
        kept[1].append((start, children))
        return self.breed_block(plan, start, stop, evaluated, children)

    def _serve_write(self, island: int, children, slots) -> None:
        shared = self.shared[island]
        blocks = self._kept.get(island, (None, []))[1]
        for child, slot in zip(children, slots):
            first, rows = next((a, r) for a, r in blocks if a <= child < a + r.shape[0])
            shared.array[slot] = rows[child - first]
        shared.flush()
        self._free(island)

    def _free(self, island: int) -> None:
        _, blocks = self._kept.pop(island, (None, []))
        self._spare.extend(rows if rows.base is None else rows.base for _, rows in blocks)

    def _buffer(self, dtype, rows: int) -> np.ndarray:
        for index, spare in enumerate(self._spare):
            if spare.dtype == dtype and spare.shape[0] >= rows:
                return self._spare.pop(index)[:rows]
        return np.empty((rows, self.problem.dim), dtype)
