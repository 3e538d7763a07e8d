"""Issue 31, finding 9: every third-party module the examples import installs from the
``examples`` extra (or is one of mpievo's own dependencies); imports tried with a
fallback (cupy) are optional."""

import ast
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:     # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
#: import name -> distribution name, where they differ
DISTRIBUTIONS = {"sklearn": "scikit-learn", "mpi4py": "mpi4py"}


def _requirement_names(requirements) -> set[str]:
    names = set()
    for requirement in requirements:
        name = requirement.split(";")[0]
        for stop in "<>=![ ":
            name = name.split(stop)[0]
        names.add(name.strip().lower())
    return names


def _third_party_imports(folder: Path) -> set[str]:
    local = {path.stem for path in folder.rglob("*.py")}
    found = set()
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text())
        optional = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.Try)    # tried, with a fallback
                    for statement in node.body for inner in ast.walk(statement)}
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local and top not in ("mpievo", "__future__"):
                    found.add(top)
    return found


def test_the_examples_extra_covers_what_model_merging_imports():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extra = _requirement_names(project["optional-dependencies"].get("examples", []))
    imported = _third_party_imports(ROOT / "examples" / "model_merging")
    assert "sklearn" in imported      # the check sees the import it is about
    missing = sorted(name for name in imported
                     if DISTRIBUTIONS.get(name, name).lower() not in core | extra)
    assert not missing, f"expected every import of examples/model_merging in the examples extra, got {missing} missing"
