"""Device (GPU) buffers as the collectives see them (``buffers``) and whether the MPI
library is CUDA-aware (``support``)."""
