"""Node membership: which ranks share memory, as the MPI library reports it.

``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` groups the ranks that can map each
other's memory. Tests (and experiments) split those groups further into fake nodes
with ``MPIEVO_FAKE_NODES``: ``K`` cuts the ranks into K nodes of consecutive ranks,
``c0,c1,...`` gives every rank's node colour (ranks of the wrapped communicator).
A fake node is always part of a real one, so shared memory still works inside it.

Nodes are numbered by their lowest rank; inside a node ranks keep their order. The
hierarchical collectives (mpievo.comm.hierarchical) cut data into ``lanes`` (the
size of the smallest node) and run one cross-node ring per lane: lane t on the ranks
of local rank t, one per node.
"""

from __future__ import annotations

import os

from mpi4py import MPI

FAKE_NODES_ENV = "MPIEVO_FAKE_NODES"


def fake_colours(size: int, text: str | None = None) -> list[int] | None:
    """Per-rank node colours from ``MPIEVO_FAKE_NODES`` (None: not set).

    Raises:
        ValueError: neither a node count in [1, size] nor one integer colour per rank.
    """
    text = os.environ.get(FAKE_NODES_ENV, "") if text is None else text
    text = text.strip()
    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = None
    if values is not None and len(values) == 1 and 1 <= values[0] <= size:
        return [r * values[0] // size for r in range(size)]
    if values is not None and len(values) == size and min(values) >= 0:
        return values
    raise ValueError(f"expected {FAKE_NODES_ENV} to be a node count in [1, {size}] or {size} "
                     f"non-negative colours (one per rank), got {text!r}")


def layout_key(size: int, nodes: int) -> str:
    """Tuning-table key of a layout: ``"4"`` on one node, ``"8/2"`` on two."""
    return str(size) if nodes == 1 else f"{size}/{nodes}"


class NodeLayout:
    """The nodes of a communicator (collective: every rank constructs it together).

    Args:
        comm: the communicator (the library's private duplicate).

    Attributes:
        node: communicator of this rank's node (ranks in order).
        local_rank, local_size: this rank's place in its node.
        nodes: ranks of each node, nodes ordered by their lowest rank.
        node_index: index of this rank's node in ``nodes``.
        lanes: ranks of the smallest node (lane count of the hierarchical algorithms).
        cross: communicator of the ranks with this local rank, one per node (ordered
            by node), or None where local_rank >= lanes or on one node.
        key: the tuning-table key (:func:`layout_key`).
    """

    def __init__(self, comm: MPI.Intracomm):
        rank, size = comm.Get_rank(), comm.Get_size()
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        colours = fake_colours(size)
        if colours is not None:
            fake = node.Split(colours[rank], rank)
            node.Free()
            node = fake
        self.node = node
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        members = MPI.Group.Translate_ranks(node.Get_group(), list(range(self.local_size)),
                                            comm.Get_group())
        self.cross: MPI.Intracomm | None = None
        if self.local_size == size:  # everyone is here, so every rank sees one node
            self.nodes = (tuple(members),)
        else:
            lowest = comm.allgather(min(members))
            self.nodes = tuple(tuple(r for r in range(size) if lowest[r] == low)
                               for low in sorted(set(lowest)))
        self.node_index = next(i for i, ranks in enumerate(self.nodes) if rank in ranks)
        self.lanes = min(len(ranks) for ranks in self.nodes)
        if len(self.nodes) > 1:
            lane = self.local_rank if self.local_rank < self.lanes else MPI.UNDEFINED
            cross = comm.Split(lane, self.node_index)
            self.cross = None if cross == MPI.COMM_NULL else cross
        self.key = layout_key(size, len(self.nodes))

    @property
    def single(self) -> bool:
        """True when every rank is on this node."""
        return len(self.nodes) == 1

    def comm_rank(self, local: int) -> int:
        """The communicator rank of local rank ``local`` of this node."""
        return self.nodes[self.node_index][local]

    def free(self) -> None:
        for comm in (self.cross, self.node):
            if comm is not None and comm != MPI.COMM_NULL:
                comm.Free()
        self.cross = None
