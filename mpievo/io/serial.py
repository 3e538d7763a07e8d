"""A one-rank stand-in for mpievo.comm.Communicator's control-plane methods.

Checkpoint writing and loading are collective; passing ``comm=None`` runs them with
this object, so serial runs, tools and tests use the same code path as MPI runs.
"""

from __future__ import annotations

from typing import Any


class SerialComm:
    """Rank 0 of 1: every collective returns what a single rank would get."""

    rank = 0
    size = 1

    def barrier(self, timeout: float | None = None) -> None:
        """Nothing to wait for."""

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        """Return ``obj``."""
        return obj

    def gather_object(self, obj: Any, root: int = 0) -> list[Any]:
        """Return ``[obj]``."""
        return [obj]

    def allgather_object(self, obj: Any) -> list[Any]:
        """Return ``[obj]``."""
        return [obj]


def resolve_comm(comm: Any | None) -> Any:
    """``comm`` itself, or a SerialComm when None.

    Raises:
        TypeError: ``comm`` lacks the control-plane methods used here.
    """
    if comm is None:
        return SerialComm()
    needed = ("rank", "size", "bcast_object", "gather_object", "allgather_object")
    missing = [name for name in needed if not hasattr(comm, name)]
    if missing:
        raise TypeError(f"expected an mpievo.comm.Communicator (or None), got {type(comm).__name__} "
                        f"lacking {missing}")
    return comm
