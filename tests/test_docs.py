"""The documentation matches the tree: the architecture map names every package and
top-level module; every path and every ``mpievo.`` name in the docs and the README exists;
the configuration reference is generated with a row per key."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _map_text() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    return text.split("```", 2)[1]          # the map: the page's first code block


def test_the_architecture_map_names_every_package_and_top_level_module():
    names = {f"mpievo/{p.name}" for p in (ROOT / "mpievo").iterdir()
             if (p / "__init__.py").exists() or (p.suffix == ".py" and p.name != "__init__.py"
                                                 and p.name != "__main__.py")}
    text = _map_text()
    missing = sorted(n for n in names if not re.search(re.escape(n) + r"\b", text))
    assert not missing, f"expected docs/architecture.md's map to name every package and module, got {missing} missing"


def _map_entries() -> dict[str, str]:
    """The map's first column (what each entry names) -> the entry's text."""
    entries, name = {}, None
    for line in _map_text().strip("\n").splitlines():
        if line and not line[0].isspace():
            name = re.split(r"\s{2,}", line, maxsplit=1)[0]
            entries[name] = ""
        entries[name] += " " + line.strip()
    return entries


def test_the_architecture_map_names_only_what_exists_and_every_subpackage():
    entries = _map_entries()
    named = [path.split(" (")[0] for entry in entries for path in entry.split()
             if not path.startswith("(") and not path.endswith(")")]
    gone = sorted(path for path in named if not (ROOT / path).exists())
    assert named and not gone, f"expected every entry of docs/architecture.md's map to exist, got {gone} missing"
    subpackages = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("mpievo/*/*/__init__.py")}
    subpackages |= {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("kernels/*/__init__.py")}
    text = _map_text()
    missing = sorted(p for p in subpackages if not re.search(re.escape(p) + r"\b", text))
    assert not missing, f"expected docs/architecture.md's map to name every subpackage, got {missing} missing"


def test_the_architecture_map_names_the_built_in_algorithms_and_problem_families():
    from mpievo.evo.algorithms.base import algorithm_classes
    from mpievo.evo.moo import BUILTIN_MOO

    evo = _map_entries()["mpievo/evo"]
    named = set(re.findall(r"`(\w+)`", evo))
    assert named == set(algorithm_classes()), (f"expected the map's mpievo/evo entry to name the built-in algorithms "
                                               f"{sorted(algorithm_classes())}, got {sorted(named)}")
    families = {re.sub(r"\d+$", "", name).upper() for name in BUILTIN_MOO}
    listed = re.search(r"([A-Z]+(?:/[A-Z]+)+) problems", evo)
    assert listed and set(listed.group(1).split("/")) == families, (
        f"expected the map to list the multi-objective problem families {sorted(families)}, "
        f"got {listed and listed.group(1)}")


def test_every_path_in_the_docs_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    paths = {path for page in pages for path in
             re.findall(r"\b((?:mpievo|kernels|docs|examples|slurm|tests)/[\w./-]*\w)", page.read_text(encoding="utf-8"))}
    gone = sorted(p for p in paths if not (ROOT / p).exists())
    assert paths and not gone, f"expected every path named in the docs to exist, got {gone} missing"


def test_the_config_reference_is_generated_with_a_row_per_key():
    import importlib.util

    from mpievo.config import schema_tables
    from mpievo.schema import Settings

    assert "<!-- config-reference -->" in (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    spec = importlib.util.spec_from_file_location("reference", ROOT / "docs" / "hooks" / "reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    text = hook.config_reference()
    for cls in schema_tables():
        section = text.split(f"## `[{cls.TABLE}]`\n", 1)[1].split("\n## ", 1)[0]
        rows = [line for line in section.splitlines() if line.startswith("| `")]
        keys = [name for name, key in cls.keys().items() if not isinstance(key.default, Settings)]
        assert [row.split("`")[1] for row in rows] == keys, f"[{cls.TABLE}]: expected a row per key"


def _resolves(name: str) -> bool:
    """Whether ``mpievo.a.b.c`` names a module, or an attribute of the longest module prefix."""
    try:
        _object(name)
    except (AttributeError, LookupError):
        return False
    return True


def test_every_module_and_object_named_in_the_docs_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    names = {name for page in pages
             for name in re.findall(r"\bmpievo(?:\.[A-Za-z_]\w*)+(?!\w*\()", page.read_text(encoding="utf-8"))}
    gone = sorted(name for name in names if not _resolves(name))
    assert names and not gone, f"expected every mpievo name in the docs to exist, got {gone} missing"


# --- the public API and its reference -------------------------------------------------
#: The public API: the names in each of these modules' ``__all__`` (a module without one:
#: the functions and classes it defines whose names do not start with "_"). Every one is on
#: docs/reference/api.md, and every public function and class has a docstring with an
#: example (an ``Example:`` section, a ``>>>`` line or a ``::`` literal block).
PUBLIC_MODULES = ("mpievo", "mpievo.evo", "mpievo.evo.algorithms", "mpievo.evo.moo", "mpievo.evo.migration_policy",
                  "mpievo.rules.topology", "mpievo.torch", "mpievo.io")
#: modules whose ``>>>`` examples are run by test_the_doctested_examples_run
DOCTESTED = ("mpievo.rules.topology", "mpievo.evo.migration_policy", "mpievo.evo.moo.pareto")
EXAMPLE = re.compile(r"^\s*(?:Examples?:|>>> |.*::$)", re.MULTILINE)
API_PAGE = ROOT / "docs" / "reference" / "api.md"


def _public_names(module_name: str) -> list[str]:
    import importlib
    import inspect

    if module_name == "mpievo.torch":
        pytest.importorskip("torch")
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return [name for name in module.__all__ if not name.startswith("_")]
    return [name for name, obj in vars(module).items() if not name.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == module_name]


def _rendered() -> dict[str, object]:
    """Dotted path -> object, for everything docs/reference/api.md's ``::: path`` directives
    render: the path itself and its members (the ``members:`` list, or a module's public names)."""
    text = API_PAGE.read_text(encoding="utf-8")
    rendered = {}
    for match in re.finditer(r"^::: ([\w.]+)\n((?:[ \t]+.*\n)*)", text, re.MULTILINE):
        path, block = match.group(1), match.group(2)
        assert _resolves(path), f"{API_PAGE.name}: expected '::: {path}' to name an object, got nothing there"
        listed = re.search(r"\bmembers:\s*(\[[^\]]*\]|\w+)", block)
        if (listed is None or listed.group(1) == "true") and _is_module(path):   # everything public
            try:
                members = [name for name in _public_names(path) if callable(_object(f"{path}.{name}"))]
            except pytest.skip.Exception:                   # mpievo.torch without torch
                continue
            if re.search(r"\bshow_if_no_docstring:\s*true", block):    # constants too (they have none)
                module = _object(path)
                names = getattr(module, "__all__", None) or [name for name in vars(module) if not name.startswith("_")]
                members += [name for name in names if not callable(getattr(module, name))
                            and not isinstance(getattr(module, name), types.ModuleType)]
        elif listed is None or listed.group(1) in ("true", "false"):    # a class or function itself
            members = []
        else:
            members = re.findall(r"\w+", listed.group(1))
        for name in [None, *members]:
            full = path if name is None else f"{path}.{name}"
            rendered[full] = _object(full)
    return rendered


def _is_module(path: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(path) is not None
    except ModuleNotFoundError:         # a parent that is not a package
        return False


def _object(path: str):
    """The module ``path`` names, or the attribute of the longest module prefix of it."""
    import importlib

    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise LookupError(f"no module in {path!r}")


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_is_in_the_reference_with_an_example(module_name):
    import inspect

    rendered = _rendered()
    missing, without_example = [], []
    for name in _public_names(module_name):
        obj = _object(f"{module_name}.{name}")
        if not any(value is obj and path.rsplit(".", 1)[-1] == name for path, value in rendered.items()):
            missing.append(name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not EXAMPLE.search(inspect.cleandoc(obj.__doc__ or "")):
            without_example.append(name)
    assert not missing, f"{module_name}: expected every public name on {API_PAGE.name} (a '::: path' directive), got {missing} missing"
    assert not without_example, (f"{module_name}: expected a docstring with an example (an 'Example:' section, "
                                 f"'>>>' or a '::' block), got none for {without_example}")


def test_the_doctested_examples_run():
    import doctest
    import importlib

    for module_name in DOCTESTED:
        failures, tried = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.NORMALIZE_WHITESPACE)
        assert tried and not failures, f"{module_name}: expected its {tried} doctest examples to pass, got {failures} failing"


# --- the worked custom algorithm (docs/guides/custom-algorithm.md) -----------------------
def test_the_custom_algorithm_example_runs_through_minimize_and_resumes(monkeypatch):
    import numpy as np

    from mpievo.evo import EngineConfig, Island, Problem

    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    example = importlib.import_module("custom_algorithm")
    result = example.main(budget=4_000, verbose=False)          # "custom_algorithm:HillClimber", 4 islands
    # random search with this budget gets no lower than about 12; the hill climber reaches about 0.6
    assert result.nfev == 4_000 and result.fun < 2, f"expected the hill climber's best below 2, got {result.fun}"

    problem = Problem(example.sphere, 5, -5.0, 5.0)
    first = Island(0, problem, EngineConfig(capacity=8), seed=3, algorithm=example.HillClimber()).run(4)
    second = Island(0, problem, EngineConfig(capacity=8), seed=3, algorithm=example.HillClimber())
    second.load_state_dict(first.state_dict())
    for g in range(5, 8):
        first.step(g)
        second.step(g)
    assert np.array_equal(first.best()[0], second.best()[0]) and first.best()[1] == second.best()[1]
