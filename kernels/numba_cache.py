"""Where Numba keeps the compiled kernels of mpievo (``cache=True``).

Numba stores a cached kernel in the ``__pycache__`` beside its source file. That
fails for a read-only install (a system site-packages, a container image): every
process would compile again, tens of seconds before generation 0. When
``NUMBA_CACHE_DIR`` is not set and this package's directory is not writable,
:func:`configure` points Numba at :func:`default_dir` (``$XDG_CACHE_HOME/mpievo/numba``,
else ``~/.cache/mpievo/numba``), where it stays valid across processes.
A copied tree keeps its ``__pycache__`` entries when the copy brings them along:
Numba checks a cached kernel against its source file's contents, not its path's
timestamp (Numba >= 0.68; older versions compare modification times, so a copy
made without ``cp -p`` compiles again).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"
HERE = Path(__file__).resolve().parent


def default_dir(environ=os.environ) -> Path:
    """The per-user cache directory mpievo uses when its own is not writable."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mpievo" / "numba"


def writable(directory: Path) -> bool:
    """True when Numba can write its cache beside the sources in ``directory``."""
    cache = directory / "__pycache__"
    return os.access(cache if cache.is_dir() else directory, os.W_OK)


def configure(package_dir: Path = HERE, environ=None) -> str | None:
    """Set ``NUMBA_CACHE_DIR`` to :func:`default_dir` when it is unset and
    ``package_dir`` is not writable (in ``environ``; None: this process's environment,
    and an already imported Numba's config).

    Returns:
        The cache directory in use when mpievo chose or the user set one; None: the
        default beside the sources.
    """
    process = environ is None
    environ = os.environ if process else environ
    chosen = environ.get(ENV)
    if not chosen and not writable(package_dir):
        chosen = str(default_dir(environ))
        environ[ENV] = chosen
        numba = sys.modules.get("numba") if process else None
        if numba is not None:   # imported already: its config was read at import
            numba.config.CACHE_DIR = chosen
    return chosen or None


def location() -> str:
    """Where this process's kernels are cached, for a start-up line."""
    return os.environ.get(ENV) or str(HERE / "__pycache__")
