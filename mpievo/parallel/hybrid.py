"""The hybrid scheme: islands over groups of ranks (``run.ranks_per_island``); also the
centralized scheme (one group of every rank: rank 0 breeds every island).

Each group's leader runs the group's islands as an :class:`IslandScheme` over the
leaders' communicator (so migration runs between leaders, exactly as between ranks
of the plain island model); the group's other ranks evaluate row blocks of every
batch (:mod:`.groups`). After each generation the leader releases its group with the
scheme-level run state, so every rank knows the generation and migration count.

Guarantees: the result is bit-identical to the same islands on one rank per island
(or any other layout) for row-independent fitness functions (see :mod:`.groups`);
checkpoints hold the islands on leaders only and the same run state as the island
model, so a run resumes with another group layout (2 islands x 2 ranks from
2 islands x 1 rank, and back) or as the plain island model.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..evo.config import EngineConfig
from .budget import plan
from .groups import GroupLayout, GroupProblem, serve
from .scheme import BestMember, IslandRecord, IslandScheme, StepResult, _plain


def split_communicators(comm, layout: GroupLayout):
    """(this group's Communicator, the leaders' Communicator or None off leaders); collective."""
    from mpi4py import MPI

    from ..comm import Communicator

    def wrap(split):
        if split == MPI.COMM_NULL:
            return None
        wrapped = Communicator(split, timeout=comm.timeout)    # duplicates it
        split.Free()
        return wrapped

    group = wrap(comm.mpi_comm.Split(layout.group_index, comm.rank))
    leaders = wrap(comm.mpi_comm.Split(0 if layout.leader else MPI.UNDEFINED, comm.rank))
    return group, leaders


class HybridScheme:
    """Islands over groups of ranks (see the module docstring).

    Args:
        comm: an mpievo Communicator (all ranks).
        layout: the :class:`GroupLayout` (:func:`mpievo.parallel.groups.group_layout`).
        problem, engines, seed, policy, schedule, budget: as for :class:`IslandScheme`.
    """

    name = IslandScheme.name     # the same checkpoints as the island model

    def __init__(self, comm, layout: GroupLayout, problem, engines: Sequence[EngineConfig], *,
                 seed: int = 0, policy=None, schedule=None, budget: int | None = None):
        self.comm = comm
        self.layout = layout
        self.problem = problem
        self.engines = tuple(engines)
        self.n_islands = len(self.engines)
        layout.islands(self.n_islands)      # checks the island count on every rank
        self.group, self.leaders = split_communicators(comm, layout)
        self.inner = None
        if layout.leader:
            self.inner = IslandScheme(self.leaders, GroupProblem(problem, self.group), self.engines,
                                      seed=seed, policy=policy, schedule=schedule, budget=budget)
        self.budget_generation = plan(self.engines, problem.dim, budget).budget_generation
        self.generation = -1
        self._run_state: dict = {}

    def close(self) -> None:
        """Free the group and leaders' communicators."""
        for sub in (self.group, self.leaders):
            if sub is not None:
                sub.free()

    # ------------------------------------------------------------ evolution
    def initialize(self) -> None:
        self._synchronised(lambda: self.inner.initialize())

    def step(self) -> StepResult:
        if self.generation < 0:
            raise RuntimeError("expected initialize() or restore() before step(), got neither")
        return self._synchronised(lambda: self.inner.step()) or StepResult(self.generation)

    def _synchronised(self, work):
        """Leaders do ``work`` while their groups evaluate; then every rank learns the run state."""
        if self.inner is None:
            self._adopt(serve(self.problem, self.group))
            return None
        result = work()
        state = self.inner.run_state()
        self.inner.problem.release(state)
        self._adopt(state)
        return result

    def _adopt(self, run_state: Mapping) -> None:
        self._run_state = dict(run_state)
        self.generation = int(run_state["generation"])

    # ------------------------------------------------------------ reporting
    def records(self) -> list[IslandRecord]:
        return [] if self.inner is None else self.inner.records()

    def evaluations(self) -> int:
        return 0 if self.inner is None else self.inner.evaluations()

    def best_local(self) -> BestMember | None:
        return None if self.inner is None else self.inner.best_local()

    def reached(self, target: float) -> bool:
        return self.inner is not None and self.inner.reached(target)

    def genome_shape(self, island: int) -> tuple[int, np.dtype]:
        return self.problem.dim, np.dtype(getattr(self.problem, "row_dtype", self.engines[island].dtype))

    # ------------------------------------------------------------ checkpoints
    def island_states(self) -> dict[int, dict]:
        return {} if self.inner is None else self.inner.island_states()

    def run_state(self) -> dict:
        return dict(self._run_state)

    def restore(self, island_states, run_state) -> None:
        """Leaders load their islands; the others only the run state.

        Raises:
            ValueError: as :meth:`IslandScheme.restore`; island states given to a non-leader.
        """
        if self.inner is not None:
            self.inner.restore(island_states, run_state)
            self._adopt(self.inner.run_state())
            return
        if island_states:
            raise ValueError(f"expected no island states on rank {self.comm.rank} (not a group leader), "
                             f"got islands {sorted(island_states)}")
        state = {k: _plain(v) for k, v in run_state.items()}
        for key, value in (("scheme", self.name), ("n_islands", self.n_islands)):
            if state.get(key) != value:
                raise ValueError(f"expected {key} = {value!r} in the saved run state, got {state.get(key)!r}")
        self._adopt(state)

