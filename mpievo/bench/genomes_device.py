"""``mpievo bench genomes --device cuda``: the GPU side of :mod:`.genomes`.

* :class:`DeviceMergeDistance`: the benchmark's fitness on the GPU (a
  ``Problem(..., device=True)`` function): the batch arrives as device arrays and
  :mod:`mpievo.bench.merge_distance` reduces it against the bases on the GPU
  (:meth:`~mpievo.evo.genomes.BaseModels.on_device`: once per process, shared with
  seeded islands).
* GPU memory as numba-cuda can tell it (:func:`gpu_memory`): ``cuMemGetInfo`` of the
  rank's current device, so the used bytes count every process on that GPU (ranks
  that share it included) and numba's deferred frees not yet flushed.
* :func:`device_need`: what a cell holds on one GPU, for the skip rule.

Nothing here touches CUDA until a device cell runs.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..evo.device import as_numba, is_device_array

#: BaseModels -> (bases, weights) on this process's GPU, uploaded once
_PLACED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class DeviceMergeDistance:
    """Squared distance of each device genome to ``weights @ bases`` (float64 sums on the GPU)."""

    def __init__(self, bases, weights):
        self.bases = bases
        self.weights = tuple(float(w) for w in weights)

    def __call__(self, genomes) -> np.ndarray:
        from mpievo.bench import merge_distance as cuda_merge_distance

        if not is_device_array(genomes):
            raise TypeError(f"expected genomes on the device, got {type(genomes).__module__}."
                            f"{type(genomes).__name__}")
        bases, weights = self._placed()
        return cuda_merge_distance.merge_distance(as_numba(genomes), bases, weights)

    def _placed(self) -> tuple:
        placed = _PLACED.get(self.bases)
        if placed is None:
            from numba import cuda

            placed = (self.bases.on_device(), cuda.to_device(np.asarray(self.weights, np.float64)))
            _PLACED[self.bases] = placed
        return placed


def synchronize(device: bool) -> None:
    """Wait for this rank's GPU work (device work is asynchronous: timings need it)."""
    if device:
        from numba import cuda

        cuda.synchronize()


def gpu_memory() -> tuple[int | None, int | None]:
    """``(used, free)`` bytes of the current GPU (all its processes), or ``(None, None)``
    where numba-cuda cannot tell (the simulator reports no memory)."""
    from numba import cuda

    free, total = cuda.current_context().get_memory_info()
    if not (math.isfinite(free) and math.isfinite(total)):
        return None, None
    return int(total - free), int(free)


def release_pending() -> None:
    """Free what numba still holds of arrays already dropped (it defers frees in
    batches), so the next cell sees the GPU's memory without the previous one's."""
    from numba import cuda

    context = cuda.current_context()
    # device memory's frees queue in the memory manager's list, streams' and events' in
    # the context's; the simulator has neither, a foreign memory manager maybe not the first
    for owner in (getattr(context, "memory_manager", None), context):
        pending = getattr(owner, "deallocations", None)
        if pending is not None:
            pending.clear()


def gpu_used() -> int | None:
    """The current GPU's used bytes after its queued work (None in the simulator)."""
    synchronize(True)
    return gpu_memory()[0]


def gpu_columns(comm, phases: dict, base: int | None, need: int) -> dict:
    """The GPU's used bytes per phase (largest over ranks), at its peak, and what the
    cell added to what was used before it (None where numba-cuda cannot tell)."""
    bases = [b for b in comm.allgather_object(base) if b is not None]
    if not bases:
        return {"gpu_need_bytes": need}
    everyone = comm.allgather_object(phases)
    phases = {phase: max(p[phase] for p in everyone) for phase in phases}
    peak = max(phases.values())
    return {"gpu_need_bytes": need, "gpu_base_bytes": max(bases), "gpu_peak_bytes": peak,
            "gpu_cell_bytes": peak - max(bases), "gpu_phases": phases}


def device_need(genome: str, dim: int, capacity: int, batch: int, bases: int, itemsize: int,
                block_rows: int, islands: int) -> int:
    """GPU bytes one rank's cell holds, +10%, in genomes of ``dim * itemsize`` bytes:
    the ``bases`` (:meth:`~mpievo.evo.genomes.BaseModels.on_device`: one copy per
    process, the fitness's and seeded islands'), and per encoding

    * dense: archive and batch rows of each of the rank's ``islands``, 2 more in
      migration (emigrant out, immigrant in), and the GA's box and scale, which the
      device operators hold as whole genomes (3);
    * delta: the same, plus its own base copy and the materialising ``block_rows``;
    * seeded (recipes on the host): the block (a uniform box and scale are one element each).
    """
    held = islands * (capacity + batch) + 2 + 3
    rows = {"dense": held, "delta": held + 1 + block_rows, "seeded": block_rows}[genome]
    return int(1.1 * (rows + bases) * dim * itemsize)


def bind_gpu(comm) -> int:
    """Bind this rank to ``local_rank % GPUs`` of its node (as ``mpievo run`` does);
    returns how many ranks of the job share the GPU this rank got (the most of any GPU)."""
    import socket

    from ..parallel.device_binding import bind_device

    binding = bind_device(getattr(comm, "mpi_comm", None))
    where = comm.allgather_object((socket.gethostname(), binding.device))
    return max(where.count(w) for w in where)
