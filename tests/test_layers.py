"""Import rules and job-level failure handling (serial tests that start subprocesses)."""

from __future__ import annotations

import ast
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


def test_the_engine_protocol_does_not_import_mpi():
    for statement in ("import mpievo.comm.protocol", "from mpievo.comm import SelfComm, EngineComm"):
        mods = loaded_after(statement)
        assert "mpi4py" not in mods and "mpi4py.MPI" not in mods, statement


COMM = ROOT / "mpievo" / "comm"
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}


def comm_imports(path: Path) -> set[str]:
    """The mpievo.comm modules that ``path`` (a module of mpievo.comm) imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found.update(name.split(".")[0] for name in names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpievo.comm."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("mpievo.comm."))
    return found


def test_comm_modules_all_import_and_form_no_cycle():
    modules = sorted(p.stem for p in COMM.glob("*.py") if p.stem != "__init__")
    mods = loaded_after("import importlib; " + "; ".join(
        f"importlib.import_module('mpievo.comm.{m}')" for m in modules))
    assert {f"mpievo.comm.{m}" for m in modules} <= mods
    graph = {m: comm_imports(COMM / f"{m}.py") & set(modules) for m in modules}
    done, path = set(), []

    def visit(module):  # depth-first search; a module met again on the current path closes a cycle
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module not in done:
            path.append(module)
            for imported in sorted(graph[module]):
                visit(imported)
            path.pop()
            done.add(module)

    for module in modules:
        visit(module)


def private_use(node) -> bool:
    """``x._name`` on something other than self/cls (the namedtuple API aside)."""
    return (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            and node.attr not in NAMEDTUPLE_API
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")))


def test_comm_modules_use_no_private_names_of_other_objects():
    offenders = [f"{path.name}:{node.lineno}: {ast.unparse(node)}"
                 for path in sorted(COMM.glob("*.py"))
                 for node in ast.walk(ast.parse(path.read_text())) if private_use(node)]
    assert not offenders, offenders


def test_comm_and_kernels_files_stay_small():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in [*COMM.glob("*.py"), *(ROOT / "kernels").glob("*.py")]}
    assert {name: n for name, n in sizes.items() if n > 420} == {}


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
    from mpievo.launcher import launch_env

    env = launch_env({"OMPI_MCA_btl": "self,vader"})
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1"
    assert env["OMPI_MCA_btl"] == "self,vader"  # a user's setting wins
