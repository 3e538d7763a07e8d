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

from ..evo.engine_config import EngineConfig
from ..rules.budget import plan
from ..rules.mapping import islands_of_rank
from .breed_device import breeding_rows, breeding_view
from .groups import GroupLayout, serve
from .led import LedScheme
from .scheme import IslandScheme


def split_communicators(comm, layout: GroupLayout):
    """(this group's Communicator, the leaders' Communicator or None off leaders); collective.
    Release each with :func:`close_split`."""
    from mpi4py import MPI

    from ..comm import Communicator

    def wrap(split):
        if split == MPI.COMM_NULL:
            return None
        return Communicator(split, timeout=comm.timeout)    # duplicates it; split freed by close_split

    group = wrap(comm.mpi_comm.Split(layout.group_index, comm.rank))    # its mpi_comm: node-shared rows
    leaders = wrap(comm.mpi_comm.Split(0 if layout.leader else MPI.UNDEFINED, comm.rank))
    return group, leaders


def close_split(sub) -> None:
    """Free a Communicator of :func:`split_communicators` and the split it wraps (collective).

    Example::

        group, leaders = split_communicators(comm, layout)
        ...
        close_split(group)
    """
    sub.free()
    sub.mpi_comm.Free()


class HybridScheme(LedScheme):
    """Islands over groups of ranks (see the module docstring).

    Args:
        comm: an mpievo Communicator (all ranks).
        layout: the :class:`GroupLayout` (:func:`mpievo.parallel.groups.group_layout`).
        problem, engines, seed, policy, schedule, budget: as for :class:`IslandScheme`.
        breed: ``run.breed``: "leader" (the leader breeds every child), "evaluator"
            (each rank breeds its own block from the archive held once per node,
            :mod:`.breed_local`) or "auto".
    """

    serving_rank = "rank {rank} (not a group leader)"

    def __init__(self, comm, layout: GroupLayout, problem, engines: Sequence[EngineConfig], *,
                 seed: int = 0, policy=None, schedule=None, budget: int | None = None,
                 breed: str = "leader"):
        self.comm = comm
        self.layout = layout
        self.problem = problem
        self.engines = tuple(engines)
        self.n_islands = len(self.engines)
        layout.islands(self.n_islands)      # checks the island count on every rank
        self.group, self.leaders = split_communicators(comm, layout)
        self.breed, rows = breeding_rows(breed, self.engines, problem, self.group)
        self.breeding = None
        if self.breed == "evaluator":       # the group's islands' rows: once per node, or per GPU (collective)
            islands = islands_of_rank(layout.group_index, self.n_islands, len(layout.groups))
            self.breeding = rows(problem, self.group, self.engines, islands)
        self.inner = None
        if layout.leader:
            view = breeding_view(problem, self.group, self.breeding)
            self.inner = IslandScheme(self.leaders, view, self.engines,
                                      seed=seed, policy=policy, schedule=schedule, budget=budget)
            if self.breeding is not None:
                self.breeding.adopt(self.inner.islands)
        self.budget_generation = plan(self.engines, problem.dim, budget).budget_generation
        self.generation = -1
        self._run_state: dict = {}

    def close(self) -> None:
        """Free the shared archives (evaluator breeding) and the group and leaders' communicators."""
        if self.breeding is not None:
            self.breeding.close()
            self.breeding = None
        for sub in (self.group, self.leaders):
            if sub is not None:
                close_split(sub)

    def _serve(self) -> Mapping:
        return serve(self.problem, self.group, None if self.breeding is None else self.breeding.handle)

    def _release(self, run_state: Mapping) -> None:
        self.inner.problem.release(run_state)
