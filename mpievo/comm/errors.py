"""Exceptions raised by mpievo.comm."""

from __future__ import annotations


class CommError(RuntimeError):
    """Base class of mpievo.comm errors."""


class CollectiveTimeoutError(CommError):
    """A collective did not complete within its timeout.

    Attributes:
        operation: name of the collective (e.g. ``"allreduce"``).
        peers: ranks whose messages were still outstanding, as ``(direction, rank)``
            pairs with direction ``"from"`` (receive) or ``"to"`` (send).
    """

    def __init__(self, operation: str, timeout: float, rank: int, peers):
        self.operation = operation
        self.peers = list(peers)
        waiting = ", ".join(f"{d} rank {p}" for d, p in self.peers) or "the collective to complete"
        super().__init__(
            f"{operation} on rank {rank} timed out after {timeout:g} s waiting for {waiting}; "
            "a peer may have failed or called a different collective")


class CollectiveMismatchError(CommError):
    """Ranks called collectives that do not match (validate mode)."""


class CommunicatorBrokenError(CommError):
    """The communicator is unusable after an earlier timeout left messages in flight."""
