"""Imports every module of the installed mpievo (tests/wheel/check.sh runs it with the
wheel's virtual environment, from a directory outside the tree, fed on stdin).

The modules are found from the installed files, not by importing packages (a package
that fails to import would hide its submodules). torch is not installed there: only the
modules of NEEDS_TORCH may fail, and only because torch, transformers or safetensors is
missing; every other module must import. A ``__main__`` module (``python -m mpievo``) is
found, not run.
"""

import importlib
import importlib.util
import pathlib
import sys
import traceback

#: the package whose modules may need the torch extra (its libraries below)
NEEDS_TORCH = "mpievo.torch"
TORCH_LIBRARIES = {"torch", "transformers", "safetensors"}

import mpievo  # noqa: E402

root = pathlib.Path(mpievo.__file__).resolve().parent
if not root.is_relative_to(pathlib.Path(sys.prefix).resolve()):
    sys.exit(f"wheel: expected mpievo from the virtual environment {sys.prefix}, got {root}")
names = sorted(".".join(("mpievo", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
               for path in root.rglob("*.py"))
imported, skipped, failed = [], [], []
for name in names:
    if name.endswith(".__main__"):
        if importlib.util.find_spec(name) is None:
            failed.append((name, "not found"))
        continue
    try:
        importlib.import_module(name)
        imported.append(name)
    except ModuleNotFoundError as err:
        missing = (err.name or "").split(".")[0]
        if (name == NEEDS_TORCH or name.startswith(NEEDS_TORCH + ".")) and missing in TORCH_LIBRARIES:
            skipped.append(f"{name} (needs {missing})")
        else:
            failed.append((name, traceback.format_exc()))
    except Exception:
        failed.append((name, traceback.format_exc()))
for name, trace in failed:
    print(f"wheel: import {name} failed:\n{trace}", file=sys.stderr)
print(f"{len(imported)} modules imported, {len(skipped)} skipped without torch: {', '.join(skipped)}")
if failed or "mpievo.kernels" not in imported or len(imported) < 100:
    sys.exit(f"wheel: expected every module to import (mpievo.kernels among them), "
             f"got {len(failed)} failures, {len(imported)} imported")
