"""mpievo: distributed evolutionary optimisation on HPC clusters.

Layers (lower never imports higher):
    mpievo.kernels   element-wise host and CUDA kernels (no MPI, no engine)
    mpievo.comm      communicator and custom collectives (imports kernels, mpi4py, numpy)
    mpievo.evo       genomes, archives, operators, island algorithms, problems (no MPI)
    mpievo.parallel  islands over ranks, topologies, migration (where comm and evo meet)
    mpievo.io        HDF5 checkpoints
    mpievo.cli       the ``mpievo`` command

Importing ``mpievo`` imports none of these, so ``import mpievo`` is cheap and never
initialises MPI or CUDA.
"""

from ._version import __version__

__all__ = ["__version__"]
