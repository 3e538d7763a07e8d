"""Numba CUDA twins of the host kernels of :mod:`mpievo.kernels`: reductions, breeding
operators, rows, recipes, problems. A module here has the name of its host twin where
it has one (``operators``, ``counter_operators``, ``recipes``); nothing here touches CUDA
at import time: kernels are compiled on first use."""
