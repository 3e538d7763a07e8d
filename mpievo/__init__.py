"""mpievo: distributed evolutionary optimisation on HPC clusters.

Python API: :func:`minimize` (in :mod:`mpievo.api`) runs the island model on a
problem and returns a :class:`MinimizeResult`, in one process without MPI or on
every rank under ``mpiexec``.

The layers (lower never imports higher) and where everything lives: docs/architecture.md,
the one map (tests/test_docs.py keeps it in step with the tree).

Importing ``mpievo`` imports none of these (``minimize`` loads on first use), so
``import mpievo`` is cheap and never initialises MPI or CUDA.
"""

from ._version import __version__

__all__ = ["__version__", "minimize", "MinimizeResult"]


def __getattr__(name: str):
    if name in ("minimize", "MinimizeResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
