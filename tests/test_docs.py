"""The documentation matches the tree: the architecture map names every package and
top-level module; every path and every ``mpievo.`` name in the docs and the README exists;
the configuration reference is generated with a row per key."""

from __future__ import annotations

import re
from pathlib import Path

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
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_module_and_object_named_in_the_docs_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    names = {name for page in pages
             for name in re.findall(r"\bmpievo(?:\.[A-Za-z_]\w*)+(?!\w*\()", page.read_text(encoding="utf-8"))}
    names -= {"mpievo.kernels.cuda_"}         # "mpievo.kernels.cuda_*": a family of modules
    gone = sorted(name for name in names if not _resolves(name))
    assert names and not gone, f"expected every mpievo name in the docs to exist, got {gone} missing"
