"""Element-wise kernels for mpievo (installed as ``mpievo.kernels``).

Host kernels (numpy ufuncs with ``out=``, Numba where numpy is not enough) and
Numba CUDA kernels. Nothing here knows about MPI or the evolutionary engine, and
importing this package never touches CUDA: device kernels compile lazily on
first use. Compiled host kernels are cached on disk (:mod:`.numba_cache` says where).
"""

from . import numba_cache

numba_cache.configure()   # before any kernel module compiles or loads from the cache

from .host import REDUCE_OPS, reduce_into, supported_dtype, check_reducible  # noqa: E402

__all__ = ["REDUCE_OPS", "reduce_into", "supported_dtype", "check_reducible"]
