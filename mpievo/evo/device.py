"""Where an island's genomes live: the host (numpy) or the rank's GPU (Numba CUDA).

A *device island* (``engine.device = "cuda"``, or ``"auto"`` on a rank with a GPU)
keeps its archive, its children and every breeding step on the GPU
(:class:`~mpievo.evo.device_archive.DeviceArchive`,
:mod:`~mpievo.evo.device_operators`); only fitness values, indices and other
per-row numbers live on the host. Genomes leave the device to migrate through an
MPI that is not CUDA-aware (staged by :mod:`mpievo.comm`), to checkpoint (copied in
bounded chunks) and to report the best.

This module holds what the engine needs to tell the two apart and to move between
them: the device decision (:func:`resolve_device`), row helpers that accept either
kind of array (:func:`take`, :func:`concat`, :func:`to_host`, :func:`to_device`),
and the evaluation hand-off (:func:`evaluate`): a user's fitness receives the batch
on the device without a copy -- a CuPy array when CuPy is installed, otherwise a
Numba device array; both export ``__cuda_array_interface__`` (``torch.as_tensor``
takes them) -- and may return fitness on the device or the host. Built-in problems
run as Numba CUDA kernels (:mod:`mpievo.kernels.cuda.problems`).

Nothing here imports CUDA until a device array is actually met.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..kernels.host import BFLOAT16
from .half import is_half
from .builtin_functions import ShiftedRotated
from .problems import Problem, check_fitness

DEVICES = ("auto", "cpu", "cuda")
#: algorithms that breed on the device (the others keep the host)
DEVICE_ALGORITHMS = ("ga", "es")


def is_device_array(arr) -> bool:
    """True for a Numba device array or any ``__cuda_array_interface__`` exporter."""
    return bool(getattr(arr, "__cuda_ndarray__", False)) or hasattr(arr, "__cuda_array_interface__")


def cuda_usable() -> bool:
    """True when Numba can run CUDA kernels here (a GPU, or the CUDA simulator)."""
    try:
        from numba import cuda
    except ImportError:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver means "no usable GPU"
        return False


def real_gpu() -> bool:
    """True on a real GPU (not the simulator): where ``auto`` picks the device."""
    from mpievo.kernels.cuda.reduce import simulator_enabled

    return cuda_usable() and not simulator_enabled()


def resolve_device(setting: str, algorithm: str, problem: Problem) -> bool:
    """Whether an island breeds on the device, from ``engine.device``.

    ``cuda``: yes (the algorithm must breed on the device and CUDA must be usable);
    ``cpu``: no; ``auto``: when the rank has a real GPU, the algorithm is one of
    :data:`DEVICE_ALGORITHMS` and the problem evaluates on the device (a built-in, or
    a user problem made with ``device=True``).

    Raises:
        ValueError: an unknown setting, or ``cuda`` for an algorithm that has no
            device path.
        RuntimeError: ``cuda`` where Numba sees no GPU.
    """
    if setting not in DEVICES:
        raise ValueError(f"expected engine.device among {DEVICES}, got {setting!r}")
    if setting == "cpu":
        return False
    breeds_on_device = isinstance(algorithm, str) and algorithm in DEVICE_ALGORITHMS
    if setting == "auto":
        return breeds_on_device and evaluates_on_device(problem) and real_gpu()
    if not breeds_on_device:
        raise ValueError(f"expected engine.algorithm among {DEVICE_ALGORITHMS} with engine.device "
                         f"'cuda', got {algorithm!r} (use device 'cpu' or 'auto')")
    require_cuda()
    if not problem.batched:
        raise ValueError(f"expected a batched problem on the device, got {problem.name!r} with "
                         "batched=False")
    return True


def require_cuda() -> None:
    """Raises RuntimeError when engine.device 'cuda' has no GPU to run on."""
    if not cuda_usable():
        raise RuntimeError("expected a CUDA GPU for engine.device 'cuda', got none: numba.cuda sees no "
                           "device (use device 'auto' to fall back to the CPU)")


def evaluates_on_device(problem: Problem) -> bool:
    """True for built-in problems and user problems declared with ``device=True``."""
    return isinstance(problem.func, ShiftedRotated) or bool(getattr(problem, "device", False))


# --- rows of either kind ---------------------------------------------------------

def as_numba(arr):
    """A Numba device array over ``arr``'s memory (no copy)."""
    if getattr(arr, "__cuda_ndarray__", False):
        return arr
    from numba import cuda

    return cuda.as_cuda_array(arr)


def to_host(arr) -> np.ndarray:
    """A numpy copy of device rows (in bounded chunks); numpy arrays pass through."""
    if not is_device_array(arr):
        return np.asarray(arr)
    from mpievo.kernels.cuda import rows as cuda_rows

    arr = as_numba(arr)
    if len(arr.shape) != 2:
        return arr.copy_to_host()
    return cuda_rows.to_host(arr)


def to_device(arr, dtype=None):
    """Device rows of ``arr`` (host arrays copied in bounded chunks), cast to ``dtype``."""
    if is_device_array(arr):
        arr = as_numba(arr)
        if dtype is not None and np.dtype(arr.dtype) != np.dtype(dtype):
            return to_device(arr.copy_to_host(), dtype)  # a cast: rare (mixed-dtype migration)
        return arr
    from mpievo.kernels.cuda import rows as cuda_rows

    host = np.ascontiguousarray(arr, dtype=dtype)
    return cuda_rows.from_host(host)


def take(genomes, rows):
    """Copies of ``genomes[rows]`` (device rows stay on the device)."""
    rows = np.asarray(rows, dtype=np.int64)
    if not is_device_array(genomes):
        return genomes[rows]
    from mpievo.kernels.cuda import rows as cuda_rows

    return cuda_rows.take_rows(as_numba(genomes), rows)


def concat(batches: list, dim: int, dtype):
    """Rows of every batch in order, cast to ``dtype``: on the device when any batch is."""
    if not any(is_device_array(b) for b in batches):
        return np.concatenate([np.asarray(b).astype(dtype, copy=False) for b in batches]).reshape(-1, dim)
    from numba import cuda

    from mpievo.kernels.cuda import rows as cuda_rows

    parts = [to_device(b, dtype) for b in batches]
    out = cuda.device_array((sum(p.shape[0] for p in parts), dim), dtype)
    start = 0
    for part in parts:
        n = part.shape[0]
        if n:
            cuda_rows.copy_rows(part, np.arange(n), out, np.arange(start, start + n))
        start += n
    return out


# --- evaluation ------------------------------------------------------------------

def user_batch(genomes):
    """The batch as a user's fitness receives it on the device: a CuPy array over the
    same memory when CuPy is usable (never in the simulator), else the Numba array;
    bfloat16 rows as their uint16 bits (see mpievo.evo.half)."""
    from mpievo.kernels.cuda.reduce import simulator_enabled

    if genomes.dtype == BFLOAT16:   # no device library has ml_dtypes' type: the uint16 bits
        genomes = as_numba(genomes).view(np.uint16)
    if not simulator_enabled():
        try:
            import cupy
        except ImportError:
            return genomes
        return cupy.asarray(genomes)  # zero-copy through __cuda_array_interface__
    return genomes


def fitness_to_host(values) -> np.ndarray:
    """Fitness returned on the device (CAI or DLPack) or the host, as a numpy array."""
    if is_device_array(values):
        return as_numba(values).copy_to_host()
    device = getattr(values, "__dlpack_device__", None)
    if device is not None and device()[0] != 1:  # 1: kDLCPU
        import cupy

        return cupy.asnumpy(cupy.from_dlpack(values))
    return np.asarray(values)


#: built-in problem -> its shift and rotation on the device, copied once (a shift is as
#: large as a genome: uploading it every generation would cost a genome's transfer)
_PLACED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _placed(func: ShiftedRotated) -> tuple:
    placed = _PLACED.get(func)
    if placed is None:
        from numba import cuda

        placed = tuple(None if a is None else cuda.to_device(np.ascontiguousarray(a, np.float64))
                       for a in (func.shift, func.rotation))
        _PLACED[func] = placed
    return placed


def evaluate(problem: Problem, genomes) -> np.ndarray:
    """Minimised fitness (float64, host) of device ``genomes``."""
    n = genomes.shape[0]
    if isinstance(problem.func, ShiftedRotated):
        from mpievo.kernels.cuda import problems as cuda_problems

        func = problem.func
        shift, rotation = _placed(func)
        if is_half(genomes.dtype):   # the built-ins compute in float32 (or float64) on widened rows
            from mpievo.kernels.cuda import half as cuda_half

            genomes = cuda_half.widen_rows(as_numba(genomes), np.arange(n), genomes.dtype)
        values = cuda_problems.evaluate(func.name, genomes, shift=shift, rotation=rotation,
                                        optimum=func.benchmark.optimum)
    else:
        values = fitness_to_host(problem.func(user_batch(genomes)))
    values = check_fitness(values, n, problem.name)
    return -values if problem.maximize else values
