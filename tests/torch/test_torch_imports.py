"""torch stays optional: only mpievo.torch imports it (runs with or without torch installed)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_mpievo_does_not_import_torch():
    code = ("import sys, mpievo, mpievo.evo, mpievo.parallel, mpievo.io, mpievo.cli.main; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_only_mpievo_torch_imports_torch_at_module_level():
    offenders = []
    for path in (ROOT / "mpievo").rglob("*.py"):
        if "torch" in path.relative_to(ROOT / "mpievo").parts[:1]:
            continue
        for node in ast.parse(path.read_text()).body:       # module level only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n.split(".")[0] in ("torch", "transformers", "safetensors") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
