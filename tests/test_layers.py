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
                                                      ["mpievo", "io"], ["mpievo", "cli"], ["mpievo", "rules"],
                                                      ["mpievo", "plan"], ["mpievo", "bench"])}
    assert not higher, f"mpievo.comm loaded {sorted(higher)}"


def test_engine_does_not_import_mpi():
    evo = ROOT / "mpievo" / "evo"
    if not evo.exists():
        pytest.fail("mpievo.evo is missing")
    mods = loaded_after("import mpievo.evo, mpievo.rules")
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
#: packages that run inside a job: they import neither the benchmarks nor the cost model
RUNTIME = ("mpievo.comm", "mpievo.evo", "mpievo.parallel", "mpievo.io", "mpievo.rules", "mpievo.kernels",
           "mpievo.torch")


def source_modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package) of every module of mpievo/ and kernels/ (as mpievo.kernels)."""
    modules = {}
    for path in [*(root / "mpievo").rglob("*.py"), *(root / "kernels").rglob("*.py")]:
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[0] == "kernels":
            parts = ["mpievo", *parts]
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    return modules


def imported_names(module: str, package: bool, node) -> list[str]:
    """The absolute names an import statement names (a ``from`` import's names may be submodules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        parts = module.split(".")[:None if package else -1]
        base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of mpievo it imports, at the top or inside functions alike.
    Importing ``a.b.c`` runs the packages ``a.b`` and ``a`` first, so they count as
    imported too (but not the importer's own packages, which are already running)."""
    modules = source_modules(root)
    graph = {}
    for module, (path, package) in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in imported_names(module, package, node):
                if not name.startswith("mpievo"):
                    continue
                parts = name.split(".")
                found.update(".".join(parts[:n]) for n in range(2, len(parts) + 1)
                             if ".".join(parts[:n]) in modules
                             and not (module + ".").startswith(".".join(parts[:n]) + "."))
        graph[module] = found - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that ends where it starts, or None."""
    done, path = set(), []

    def visit(module):  # depth-first; a module met again on the current path closes a cycle
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            cycle = visit(imported)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return None

    return next((cycle for module in sorted(graph) if (cycle := visit(module))), None)


def test_no_import_cycle_anywhere():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles_through_packages():
    graph = {"mpievo.a": {"mpievo.b.c"}, "mpievo.b.c": {"mpievo.b"}, "mpievo.b": {"mpievo.a"}}
    assert find_cycle(graph) == ["mpievo.a", "mpievo.b.c", "mpievo.b", "mpievo.a"]
    assert find_cycle({"mpievo.a": {"mpievo.b"}, "mpievo.b": set()}) is None


def test_import_graph_counts_function_level_imports_and_packages(tmp_path):
    files = {"mpievo/__init__.py": "", "mpievo/a.py": "def f():\n    from .b import c\n",
             "mpievo/b/__init__.py": "from . import c\n", "mpievo/b/c.py": "import numpy\n",
             "kernels/__init__.py": "", "kernels/k.py": "from .. import a\nfrom mpievo.b.c import x\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["mpievo.a"] == {"mpievo.b", "mpievo.b.c"}      # inside a function; the package runs first
    assert graph["mpievo.b"] == {"mpievo.b.c"} and graph["mpievo.b.c"] == set()
    assert graph["mpievo.kernels.k"] == {"mpievo.a", "mpievo.b", "mpievo.b.c"}   # kernels/ is mpievo.kernels


def imports_into(graph, importers: tuple[str, ...], targets: tuple[str, ...]) -> list[str]:
    """"importer -> imported" for every import from a module under ``importers`` into one under ``targets``."""
    def under(module, packages):
        return any(module == p or module.startswith(p + ".") for p in packages)

    return sorted(f"{m} -> {i}" for m, imported in graph.items() if under(m, importers)
                  for i in imported if under(i, targets))


def test_runtime_packages_import_no_benchmark_and_no_cost_model():
    assert imports_into(import_graph(), RUNTIME, ("mpievo.bench", "mpievo.plan")) == []


def test_the_cost_model_imports_no_benchmark():
    assert imports_into(import_graph(), ("mpievo.plan",), ("mpievo.bench",)) == []


def test_config_and_rules_import_only_downward():
    """The job config checks against the MPI-free rules, never the layers that run it."""
    above = ("mpievo.parallel", "mpievo.comm", "mpievo.io", "mpievo.cli", "mpievo.api", "mpievo.bench",
             "mpievo.plan")
    graph = import_graph()
    assert imports_into(graph, ("mpievo.config", "mpievo.config_tables", "mpievo.schema"), above) == []
    assert imports_into(graph, ("mpievo.rules",), above + ("mpievo.config", "mpievo.config_tables")) == []
    assert "mpi4py" not in loaded_after("import mpievo.rules.topology, mpievo.rules.budget, mpievo.rules.schedule")


def comm_modules() -> dict[str, Path]:
    """Dotted name -> file of every module of mpievo.comm, its subpackages' modules included."""
    found = {}
    for path in COMM.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] != "__init__":
            found[".".join(parts)] = path
    return found


def test_comm_modules_all_import_and_form_no_cycle():
    modules = comm_modules()
    assert {"mpievo.comm.wire.host", "mpievo.comm.shm.window", "mpievo.comm.device.buffers"} <= set(modules)
    mods = loaded_after("import importlib; " + "; ".join(
        f"importlib.import_module('{m}')" for m in sorted(modules)))
    assert set(modules) <= mods
    graph = import_graph()
    cycle = find_cycle({m: graph.get(m, set()) & set(modules) for m in modules})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def private_use(node) -> bool:
    """``x._name`` on something other than self/cls (the namedtuple API aside)."""
    return (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            and node.attr not in NAMEDTUPLE_API
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")))


def test_comm_modules_use_no_private_names_of_other_objects():
    offenders = [f"{path.name}:{node.lineno}: {ast.unparse(node)}"
                 for path in sorted(COMM.rglob("*.py"))
                 for node in ast.walk(ast.parse(path.read_text())) if private_use(node)]
    assert not offenders, offenders


def test_comm_and_kernels_files_stay_small():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in [*COMM.rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]}
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
