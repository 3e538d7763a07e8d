"""Import rules and job-level failure handling (serial tests that start subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEVO = str(Path(sys.executable).parent / "mpievo")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_comm_does_not_import_the_engine():
    mods = loaded_after("import mpievo.comm")
    higher = {m for m in mods if m.split(".")[:2] in (["mpievo", "evo"], ["mpievo", "parallel"],
                                                      ["mpievo", "io"], ["mpievo", "cli"])}
    assert not higher, f"mpievo.comm loaded {sorted(higher)}"


def test_engine_does_not_import_mpi():
    evo = ROOT / "mpievo" / "evo"
    if not evo.exists():
        pytest.fail("mpievo.evo is missing")
    mods = loaded_after("import mpievo.evo")
    assert "mpi4py" not in mods and "mpi4py.MPI" not in mods


def test_importing_mpievo_touches_neither_mpi_nor_cuda():
    mods = loaded_after("import mpievo, mpievo.kernels, mpievo.comm")
    assert "numba.cuda" not in mods
    mods = loaded_after("import mpievo")
    assert "mpi4py.MPI" not in mods


def test_no_top_level_kernels_import():
    offenders = []
    for path in ROOT.rglob("*.py"):
        if ".venv" in path.parts:
            continue
        for line in path.read_text(errors="replace").splitlines():
            stripped = line.strip()
            if stripped.startswith(("import kernels", "from kernels ", "from kernels.")):
                offenders.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert not offenders, offenders


def launch(nranks: int, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEVO, "launch", "-n", str(nranks), "--", "python", "-c", code],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_exception_on_one_rank_aborts_the_job_promptly():
    code = (
        "from mpievo.comm import Communicator, abort_on_error\n"
        "import numpy as np\n"
        "c = Communicator()\n"
        "with abort_on_error():\n"
        "    if c.rank == 1:\n"
        "        raise ValueError('fitness exploded')\n"
        "    c.allreduce(np.ones(4))  # rank 0 would wait here forever\n"
    )
    start = time.monotonic()
    proc = launch(2, code)
    assert time.monotonic() - start < 45
    assert proc.returncode != 0
    assert "mpievo: rank 1 failed: ValueError: fitness exploded" in proc.stderr


def test_launcher_sets_wheel_environment():
    from mpievo.launch import launch_env

    env = launch_env({"OMPI_MCA_btl": "self,vader"})
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert env["OMPI_MCA_btl"] == "self,vader"  # a user's setting wins
