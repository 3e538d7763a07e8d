"""mpievo: distributed evolutionary optimisation on HPC clusters.

Python API: :func:`minimize` (in :mod:`mpievo.api`) runs the island model on a
problem and returns a :class:`MinimizeResult`, in one process without MPI or on
every rank under ``mpiexec``.

Layers (lower never imports higher; tests/test_layers.py checks it, and that no import
cycle exists):
    mpievo.kernels   element-wise host and CUDA kernels (no MPI, no engine)
    mpievo.comm      communicator and custom collectives (imports kernels, mpi4py, numpy)
    mpievo.evo       genomes, archives, operators, island algorithms, problems and their
                     wrappers (no MPI)
    mpievo.rules     MPI-free rules: placement, topologies, adaptive interval, budget
                     shares, the migration schedule
    mpievo.config    the job config (TOML tables through mpievo.schema); imports only the above
    mpievo.parallel  islands over ranks, migration transport, run loop (where comm and evo meet)
    mpievo.io        HDF5 checkpoints: the island state trees as they are, their verification
    mpievo.plan      the schemes' cost model, its calibration, the workload vocabulary
    mpievo.bench     every ``mpievo bench`` benchmark (runtime packages never import it)
    mpievo.cli       the ``mpievo`` command

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
