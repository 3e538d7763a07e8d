"""The communicator checkpoint writing and loading run with.

Checkpoint writing and loading are collective; passing ``comm=None`` runs them with
:class:`mpievo.comm.protocol.SelfComm` (one rank, no MPI), so serial runs, tools and
tests use the same code path as MPI runs.
"""

from __future__ import annotations

from mpievo.comm.protocol import EngineComm, SelfComm, missing_members


def resolve_comm(comm: EngineComm | None) -> EngineComm:
    """``comm`` itself, or a SelfComm when None.

    Raises:
        TypeError: ``comm`` lacks members of :class:`mpievo.comm.protocol.EngineComm`.
    """
    if comm is None:
        return SelfComm()
    missing = missing_members(comm)
    if missing:
        raise TypeError(f"expected an mpievo.comm.Communicator (or None), got {type(comm).__name__} "
                        f"lacking {missing}")
    return comm
