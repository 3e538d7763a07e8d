#!/usr/bin/env bash
# Build the documentation site into site/ from a fresh clone: uses the project's .venv
# (created if absent), installs the package with its docs extra, and runs
# `mkdocs build --strict` (every warning is an error).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/pip install -q -e '.[docs]'
export NO_MKDOCS_2_WARNING=1   # the theme's notice about its successor is not a warning of ours
exec .venv/bin/mkdocs build --strict --site-dir site "$@"
