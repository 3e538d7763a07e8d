"""mpievo.io and mpievo.faults stay independent of MPI and of the engine.

mpievo.io is typed against the communication protocol (``mpievo.comm.protocol``, which
imports no MPI, and the numpy-only host-buffer checks and message pickles it uses);
nothing else of mpievo.comm may load.
"""

from __future__ import annotations

import subprocess
import sys

ALLOWED_COMM = {"mpievo.comm", "mpievo.comm.protocol", "mpievo.comm.buffers", "mpievo.comm.pickles"}


def modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


def test_io_and_faults_import_neither_mpi_nor_engine():
    loaded = modules_after("import mpievo.io, mpievo.faults")
    forbidden = {m for m in loaded if m.startswith(("mpi4py", "mpievo.evo", "mpievo.parallel", "mpievo.comm"))}
    assert not forbidden - ALLOWED_COMM, sorted(forbidden - ALLOWED_COMM)
