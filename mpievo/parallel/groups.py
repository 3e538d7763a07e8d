"""Islands over groups of ranks: the group layout and evaluation spread over a group.

(``run.scheme = "centralized"`` is the layout of one group of every rank.)

With ``run.ranks_per_island = K`` the ranks form groups of K consecutive ranks (with
``"node"``: the ranks that share a node, ``Communicator.nodes``, which
``MPIEVO_FAKE_NODES`` can split further for tests). The first rank of a group is
its *leader*: it holds the group's islands and breeds; every batch an island
evaluates is cut into row blocks, one per rank of the group (the leader's first),
and the fitness comes back to the leader. Fitness is computed per row, so the
result is bit-identical to evaluating the whole batch on one rank -- as long as the
problem's batched function is row-independent (a function whose value for a row
depends on the other rows of the batch, or a BLAS product that rounds differently
for another row count, breaks this; the built-in problems are row-independent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config_tables import ONE_GROUP_SCHEMES
from ..evo.half import genome_dtype
from ..evo.problems import Problem, check_fitness
from mpievo.kernels.cuda import dtype_key
from ..rules.mapping import islands_of_rank


@dataclass(frozen=True)
class GroupLayout:
    """Which ranks form which group (groups ordered by their lowest rank).

    Attributes:
        groups: the ranks of each group, ascending; together they are 0..P-1.
        rank: this rank.
    """

    groups: tuple[tuple[int, ...], ...]
    rank: int

    @property
    def group_index(self) -> int:
        return next(g for g, ranks in enumerate(self.groups) if self.rank in ranks)

    @property
    def group(self) -> tuple[int, ...]:
        return self.groups[self.group_index]

    @property
    def leader(self) -> bool:
        """True on the first rank of its group (the one that holds islands)."""
        return self.group[0] == self.rank

    @property
    def trivial(self) -> bool:
        """True when every group is one rank (the plain island model)."""
        return all(len(ranks) == 1 for ranks in self.groups)

    def islands(self, n_islands: int) -> list[int]:
        """The islands this rank holds: its group's block on a leader, none elsewhere.

        Raises:
            ValueError: fewer islands than groups.
        """
        if n_islands < len(self.groups):
            raise ValueError(f"expected at least one island per group of ranks (>= {len(self.groups)} "
                             f"islands), got {n_islands}")
        if not self.leader:
            return []
        return islands_of_rank(self.group_index, n_islands, len(self.groups))


def group_layout(comm, ranks_per_island: int | str) -> GroupLayout:
    """The :class:`GroupLayout` of ``comm`` (groups of K consecutive ranks, or nodes).

    Raises:
        ValueError: a rank count that K does not divide, or K neither an int >= 1 nor "node".
    """
    size = comm.size
    if ranks_per_island == "node":
        groups = tuple(getattr(comm, "nodes", ((0,),)))   # SelfComm: one rank, one node
    elif isinstance(ranks_per_island, int) and not isinstance(ranks_per_island, bool) and ranks_per_island >= 1:
        if size % ranks_per_island:
            raise ValueError(f"expected a rank count divisible by ranks_per_island = {ranks_per_island}, "
                             f"got {size} ranks")
        groups = tuple(tuple(range(s, s + ranks_per_island)) for s in range(0, size, ranks_per_island))
    else:
        raise ValueError(f"expected ranks_per_island to be an int >= 1 or 'node', got {ranks_per_island!r}")
    return GroupLayout(groups, comm.rank)


def scheme_layout(comm, run) -> GroupLayout:
    """The layout of a validated ``[run]`` table: one group of every rank for
    "centralized" (rank 0 holds the islands and breeds, all ranks evaluate) and
    "replicated" (every rank holds every island: see :func:`islands_to_load`), else
    :func:`group_layout` of ``ranks_per_island`` (1 for "island")."""
    if run.scheme in ONE_GROUP_SCHEMES:
        return GroupLayout((tuple(range(comm.size)),), comm.rank)
    return group_layout(comm, run.ranks_per_island)


def islands_to_load(comm, run, n_islands: int) -> list[int]:
    """The islands this rank restores from a checkpoint of ``n_islands`` under a
    validated ``[run]`` table: every island for "replicated", else its layout's."""
    if run.scheme == "replicated":
        return list(range(n_islands))
    return scheme_layout(comm, run).islands(n_islands)


def row_blocks(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (start, stop) row ranges covering 0..n, the first ``n % parts``
    one row longer (some empty when n < parts)."""
    base, extra = divmod(n, parts)
    blocks, start = [], 0
    for p in range(parts):
        stop = start + base + (1 if p < extra else 0)
        blocks.append((start, stop))
        start = stop
    return blocks


class GroupProblem(Problem):
    """The leader's view of ``problem``: the same problem, each batch evaluated by the
    whole group (row blocks, see the module docstring). Collective with
    :func:`serve` on the group's other ranks."""

    def __init__(self, problem: Problem, group):
        self.__dict__.update(problem.__dict__)     # the same bounds, name, sense, hooks
        self.local = problem
        self.group = group

    @property
    def width(self):
        """The problem's own (a delta row box's width is the genome box's: the mutation
        scale of the island model)."""
        return self.local.width

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        return self._spread(np.ascontiguousarray(genomes), False)

    def evaluate_device(self, genomes) -> np.ndarray:
        """A device island's batch: every rank of the group evaluates its block on its
        own GPU (blocks travel on the device path of ``exchange``)."""
        return self._spread(genomes, True)

    def _spread(self, genomes, on_device: bool) -> np.ndarray:
        n = genomes.shape[0]
        blocks = row_blocks(n, self.group.size)
        with self.group.purpose("evaluation"):
            self.group.bcast_object(("evaluate", n, dtype_key(genomes.dtype), on_device), root=0)
            self.group.exchange(sends=[(r, genomes[a:b]) for r, (a, b) in enumerate(blocks) if r and b > a])
            fitness = np.empty(n, np.float64)
            a, b = blocks[0]
            fitness[a:b] = evaluate_block(self.local, genomes[a:b], on_device)
            self.group.exchange(recvs=[(r, fitness[a:b]) for r, (a, b) in enumerate(blocks) if r and b > a])
        return fitness

    def release(self, message) -> None:
        """End the workers' :func:`serve` loop, handing them ``message``."""
        with self.group.purpose("evaluation"):
            self.group.bcast_object(("release", message), root=0)


def serve(problem: Problem, group, handle=None):
    """A non-leader's side of :class:`GroupProblem`: evaluate this rank's block of
    every batch until the leader releases the group; returns the leader's message.
    ``handle(order) -> bool`` takes the orders it knows first (evaluator breeding,
    :mod:`.breed_local`)."""
    while True:
        with group.purpose("evaluation"):
            order = group.bcast_object(None, root=0)
            if order[0] == "release":
                return order[1]
            if handle is not None and handle(order):
                continue
            _, n, dtype, on_device = order
            a, b = row_blocks(n, group.size)[group.rank]
            if b == a:
                continue
            if on_device:
                from numba import cuda

                block = cuda.device_array((b - a, problem.dim), genome_dtype(dtype))
            else:
                block = np.empty((b - a, problem.dim), genome_dtype(dtype))
            group.exchange(recvs=[(0, block)])
            group.exchange(sends=[(0, evaluate_block(problem, block, on_device))])


def evaluate_block(problem: Problem, genomes, on_device: bool = False) -> np.ndarray:
    """``problem``'s fitness of a row block (maybe empty), checked, as contiguous float64;
    on this rank's GPU for a device island's block."""
    n = genomes.shape[0]
    if not n:
        return np.empty(0, np.float64)
    if on_device:
        from ..evo import device

        return np.ascontiguousarray(device.evaluate(problem, genomes))
    return np.ascontiguousarray(check_fitness(problem.evaluate(genomes), n, problem.name))
