"""The communicator of this process: MPI under a launcher, none for a single process.

Starting MPI costs time (about 1.2 s for Open MPI's wheel without the launcher's
settings) and a single process gains nothing from it, so a process that no MPI
launcher started runs on :class:`~mpievo.comm.protocol.SelfComm` and never imports
mpi4py. A launcher is recognised by the variables it gives its ranks.
"""

from __future__ import annotations

import os
from typing import Mapping

from ..comm.protocol import EngineComm, SelfComm

#: set in every rank by an MPI launcher: Open MPI's mpiexec, PMI-2 (MPICH/Hydra,
#: Intel MPI, ``srun --mpi=pmi2``), PMIx (``srun --mpi=pmix``, PRRTE), MVAPICH
LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """True when an MPI launcher started this process (one of :data:`LAUNCHER_VARIABLES` is set)."""
    environ = os.environ if environ is None else environ
    return any(environ.get(name) for name in LAUNCHER_VARIABLES)


def world_comm(environ: Mapping[str, str] | None = None) -> EngineComm:
    """A :class:`mpievo.comm.Communicator` over COMM_WORLD under a launcher, else a
    :class:`SelfComm` (one rank; mpi4py is not imported)."""
    if not launched(environ):
        return SelfComm()
    from ..comm import Communicator

    return Communicator()
