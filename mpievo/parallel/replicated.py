"""The replicated scheme (``run.scheme = "replicated"``): every rank holds every island.

Every rank breeds every island's batch itself (the draws are keyed by seed, island
and step, so all ranks breed the same children), evaluates its row block of it
(:func:`mpievo.parallel.groups.row_blocks`) and all-gathers the fitness, so every
rank applies the same update and the replicas never diverge; migration happens in
memory on each rank. Per generation only the fitness travels (8 bytes per child).

Guarantees: the result is bit-identical to the island model on any rank count (for
row-independent fitness, see :mod:`.groups`); rank 0 reports and checkpoints the
islands (the other ranks hold the same ones); a checkpoint holds the island model's
states and run state, so it resumes under any scheme, and any scheme's checkpoint
resumes here (every rank loads every island).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..comm.protocol import SelfComm
from ..evo.engine_config import EngineConfig
from ..evo.problems import Problem
from .groups import evaluate_block, row_blocks
from .scheme import BestMember, IslandRecord, IslandScheme, StepResult


class ReplicaProblem(Problem):
    """``problem`` with each batch evaluated in row blocks over ``comm``, the fitness
    all-gathered (collective: every rank evaluates the same batches in the same order)."""

    def __init__(self, problem: Problem, comm):
        self.__dict__.update(problem.__dict__)     # the same bounds, name, sense, hooks
        self.local = problem
        self.comm = comm

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        return self._share(genomes, False)

    def evaluate_device(self, genomes) -> np.ndarray:
        """A device island's batch: this rank's block evaluated on its own GPU."""
        return self._share(genomes, True)

    def _share(self, genomes, on_device: bool) -> np.ndarray:
        n = genomes.shape[0]
        blocks = row_blocks(n, self.comm.size)
        a, b = blocks[self.comm.rank]
        fitness = np.empty(n, np.float64)
        with self.comm.purpose("evaluation"):
            self.comm.allgather(evaluate_block(self.local, genomes[a:b], on_device), fitness,
                                counts=[stop - start for start, stop in blocks])
        return fitness


class ReplicatedScheme:
    """Every island on every rank (see the module docstring).

    Args:
        comm: an mpievo Communicator (all-gather is used).
        problem, engines, seed, policy, schedule, budget: as for :class:`IslandScheme`.
    """

    name = IslandScheme.name     # the same checkpoints as the island model

    def __init__(self, comm, problem, engines: Sequence[EngineConfig], **options):
        self.comm = comm
        self.replica = IslandScheme(SelfComm(), ReplicaProblem(problem, comm), engines, **options)
        self.n_islands = self.replica.n_islands
        self.budget_generation = self.replica.budget_generation
        self.reporting = comm.rank == 0     # one replica speaks for all

    @property
    def generation(self) -> int:
        return self.replica.generation

    def initialize(self) -> None:
        self.replica.initialize()

    def step(self) -> StepResult:
        return self.replica.step()

    def records(self) -> list[IslandRecord]:
        return self.replica.records() if self.reporting else []

    def evaluations(self) -> int:
        return self.replica.evaluations() if self.reporting else 0

    def best_local(self) -> BestMember | None:
        return self.replica.best_local() if self.reporting else None

    def reached(self, target: float) -> bool:
        return self.replica.reached(target)

    def genome_shape(self, island: int) -> tuple[int, np.dtype]:
        return self.replica.genome_shape(island)

    def island_states(self) -> dict[int, dict]:
        return self.replica.island_states() if self.reporting else {}

    def run_state(self) -> dict:
        return self.replica.run_state()

    def restore(self, island_states, run_state) -> None:
        """Load every island (each rank needs all of them).

        Raises:
            ValueError: as :meth:`IslandScheme.restore`.
        """
        self.replica.restore(island_states, run_state)
