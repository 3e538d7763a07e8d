"""The base models of ``delta``/``seeded`` genomes held once per node: :func:`share_bases`.

Each node's leader (its local rank 0) loads the bases into a node-shared array
(:func:`mpievo.comm.shared_array.node_shared_array`) and, when there are several nodes,
hashes them (on one node the checksum is left to :attr:`BaseModels.checksum`, computed
when a checkpoint first needs it: hashing the bases costs about as much as loading
them, and a run without checkpoints never needs it); one all-gather
over the communicator then tells every rank whether each leader succeeded and what
it got, so a loader that fails, or nodes that load different bases, make every rank
raise together instead of leaving some waiting. A node barrier orders the fill
before any rank reads; then every rank attaches the shared array to its
:class:`BaseModels`. One process without MPI (SelfComm) loads into its own memory.
"""

from __future__ import annotations

from typing import Callable

from ..comm.shared_array import SharedArray, node_shared_array
from ..evo.base_models import BaseModels, checksum


class BasesError(RuntimeError):
    """Loading the bases failed on some node, or nodes loaded different bases (raised on
    every rank alike)."""


def share_bases(comm, bases: BaseModels) -> Callable[[], None]:
    """Load ``bases`` once per node and attach them on every rank (collective over ``comm``).

    Args:
        comm: a :class:`mpievo.comm.Communicator`, or a one-rank SelfComm.
        bases: the same description on every rank.

    Returns:
        ``release()``: frees the node's copy (collective over the node). Call it when
        nothing reads ``bases.array`` any more: the memory is gone afterwards.

    Raises:
        BasesError: on every rank, when a leader's load raised (the leader's own
            exception is the cause) or the nodes' checksums differ.
    """
    shared = node_shared_array(comm, bases.shape, bases.dtype)
    several_nodes = len(shared.node_ranks) < comm.size
    report, failure = _load(bases, shared, several_nodes) if shared.leader else (None, None)
    reports = comm.allgather_object(report)
    problem = _problem([r for r in reports if r is not None])
    if problem is not None:
        shared.free()  # every rank of every node is here: freeing together cannot hang
        raise BasesError(problem) from failure
    shared.sync()
    bases.attach(shared.array, reports[shared.node_ranks[0]][1])
    return shared.free


def _load(bases: BaseModels, shared: SharedArray, digest: bool):
    """The leader's report ``(node ranks, checksum (None unless ``digest``) or None,
    error text or None)`` and the exception its load raised (None on success)."""
    try:
        bases.load_into(shared.array)
        return (shared.node_ranks, checksum(shared.array) if digest else None, None), None
    except Exception as err:  # noqa: BLE001 - reported to every rank, re-raised there
        return (shared.node_ranks, None, f"{type(err).__name__}: {err}"), err


def _problem(reports) -> str | None:
    """What went wrong, from the leaders' reports (the same text on every rank), or None."""
    failed = [f"{_node(ranks)}: {error}" for ranks, _, error in reports if error is not None]
    if failed:
        return "expected the bases to load on every node, got a failure on " + "; ".join(failed)
    digests: dict[str, list[str]] = {}
    for ranks, digest, _ in reports:
        digests.setdefault(digest, []).append(_node(ranks))
    if len(digests) > 1:
        found = "; ".join(f"{digest} on {', '.join(nodes)}" for digest, nodes in digests.items())
        return f"expected the same bases (one checksum) on every node, got {found}"
    return None


def _node(ranks: tuple[int, ...]) -> str:
    return f"the node of ranks {list(ranks)}"
