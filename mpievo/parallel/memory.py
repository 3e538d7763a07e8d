"""The memory check before a run allocates anything: a per-rank estimate from the settings
against what the rank can use.

The estimate counts the arrays that grow with the settings (a lower bound, not a
profile): per island, the archive (``engine.capacity`` rows) and a generation's children
(``engine.batch_size`` rows) of ``problem.dim`` genes in ``engine.dtype``, plus the float64
random draws of the children below :data:`~mpievo.evo.operators.COUNTER_DIM` genes (above,
the counter-based kernels draw nothing ahead); genomes over base models (delta, seeded)
add per rank the block children are materialised into (a model's own buffer, or up to a
batch of genomes within ``engine.materialize_budget``) and a delta island's row box, and
per node the bases once and the best genome rank 0 hands out (:func:`genomes_estimate`);
CMA-ES adds its covariance and eigenvectors (two dim x dim float64 matrices), ES counts
``engine.es_popsize`` members, three genomes (mean, moments) and its kept noise instead, a
rotated built-in its rotation matrix. A rank holds ``ceil(islands / ranks)`` islands.
The ranks on one node share its memory: their estimates are summed and compared with the
least of the cgroup's limit left (v2 ``memory.max - memory.current``, or v1's) and
``MemAvailable``. A GPU island's rows are on its device: they are compared with the
device's free memory once the rank is bound to it (bred on the evaluators, every rank's
GPU holds a replica of its group's islands: :func:`mpievo.parallel.breed_device.replica_bytes`). ``run.memory_check = false`` skips
both checks.
"""

from __future__ import annotations

import math
import socket
from pathlib import Path

from ..evo.algorithms.es import NOISE_CACHE_BYTES
from ..evo.base_models import as_bases
from ..evo.half import genome_dtype
from ..evo.operators import counter_based

#: float64 random draws per child gene (the GA's Gaussian mutation)
_DRAW_BYTES = 8


def box_bytes_per_gene(row_itemsize: int, delta: bool = True) -> int:
    """Bytes a gene of a delta island's row box takes: its two bounds in the rows' dtype
    and, for half-precision rows, the GA's float32 copy of both (it breeds in float32);
    0 for other genomes (their box is the problem's: a scalar box costs nothing).

    Example:
        >>> box_bytes_per_gene(2), box_bytes_per_gene(4), box_bytes_per_gene(2, delta=False)
        (12, 8, 0)
    """
    if not delta:
        return 0
    return 2 * row_itemsize + (2 * 4 if row_itemsize == 2 else 0)


def genomes_estimate(dim: int, *, sources: int = 0, bases_itemsize: int = 4, rows_per_rank: int = 0,
                     row_itemsize: int = 4, genome_itemsize: int = 4, ranks_per_node: int = 1,
                     delta: bool | None = None, block_rows: int = 1) -> int:
    """Bytes a node needs for model-sized genomes: the ``sources`` once (``bases_itemsize``
    bytes a gene: a half model's sources stay in their dtype); per rank ``rows_per_rank``
    rows (archives and batches) of ``row_itemsize``, a delta island's row box
    (:func:`box_bytes_per_gene`; ``delta`` defaults to rows over sources in the genomes'
    own dtype) and ``block_rows`` genomes (``genome_itemsize``) that children are
    materialised into (a model's buffer: one); once per node, the best genome rank 0
    hands out (:func:`best_genome_bytes`). The one estimate of the pre-run checks
    (:func:`memory_problem`, :func:`mpievo.torch.hf.check_memory`) and of
    ``mpievo bench models``.

    Example:
        >>> genomes_estimate(1000, sources=3, bases_itemsize=2, rows_per_rank=6, row_itemsize=2,
        ...                  genome_itemsize=2, ranks_per_node=2)
        64000
    """
    delta = (sources > 0 and row_itemsize == genome_itemsize) if delta is None else delta
    per_rank = dim * (rows_per_rank * row_itemsize + box_bytes_per_gene(row_itemsize, delta)
                      + block_rows * genome_itemsize)
    return (dim * sources * bases_itemsize + ranks_per_node * per_rank
            + best_genome_bytes(dim, row_itemsize, genome_itemsize, encoded=sources > 0))


def best_genome_bytes(dim: int, row_itemsize: int, genome_itemsize: int, *, encoded: bool = True) -> int:
    """Bytes of the best genome a run hands out on rank 0: its archive row copied and,
    for genomes over bases, decoded (into the decode cache, and copied out of it).

    Example:
        >>> best_genome_bytes(1000, 2, 2), best_genome_bytes(1000, 4, 4, encoded=False)
        (6000, 4000)
    """
    return dim * (row_itemsize + (2 * genome_itemsize if encoded else 0))


def island_bytes(engine, dim: int) -> int:
    """The estimated bytes of one island's arrays (see the module docstring)."""
    itemsize = genome_dtype(engine.dtype).itemsize
    rows = engine.capacity + engine.batch_size
    # counter-based kernels (large genomes) draw where they use a number: no draw rows
    draws = 0 if counter_based(dim) else engine.batch_size * dim * _DRAW_BYTES
    total = rows * dim * itemsize + draws
    if engine.genome == "seeded":        # rows are recipes; one genome at a time is whole
        total = 2 * dim * itemsize
    if engine.algorithm == "cmaes":
        total += 2 * dim * dim * 8
    if engine.algorithm == "es":         # its members, the mean, the optimizer's two moments, kept noise
        noise = (engine.es_popsize // 2) * dim * 4
        total = (engine.capacity + engine.es_popsize + 3) * dim * itemsize
        total += noise if noise <= NOISE_CACHE_BYTES else 0
    return total


def rank_estimate(job, nranks: int) -> tuple[int, int]:
    """(host bytes, device bytes) one rank needs at least for ``job`` on ``nranks`` ranks."""
    dim = job.problem.dim
    per_rank = math.ceil(job.n_islands / nranks)
    largest = max(island_bytes(engine, dim) for engine in job.engines)
    on_device = any(engine.device == "cuda" for engine in job.engines)
    islands = per_rank * largest
    host = 0 if on_device else islands
    if _bases(job) is not None and not on_device:     # the buffers of genomes over bases
        engine = job.engines[0]
        itemsize = genome_dtype(engine.dtype).itemsize
        fit = max(1, int(engine.materialize_budget) // (dim * itemsize))
        # the blocks children are materialised into: a model's own buffers (two where it
        # pipelines), else at most half the budget, of which a batch (or generation 0) is used at a time
        buffers = getattr(job.problem, "model_buffers", None)
        block = buffers(genome_dtype(engine.dtype)) if buffers is not None else min(
            max(1, fit // 2), max(engine.capacity, engine.batch_size))
        host += per_rank * dim * box_bytes_per_gene(itemsize, engine.genome == "delta") + block * dim * itemsize
    if getattr(job.problem, "rotate", False):
        host += 8 * dim * dim
    if on_device:       # device islands bred on the evaluators: a replica of the group's rows per GPU
        from .breed_device import replica_bytes

        islands = replica_bytes(job, nranks) or islands
    return host, islands if on_device else 0


def usable_host_bytes() -> tuple[int | None, str]:
    """(bytes this process may still allocate, where that number comes from); None when unknown."""
    limits = []
    available = _meminfo_available()
    if available is not None:
        limits.append((available, "MemAvailable"))
    cgroup = _cgroup_room()
    if cgroup is not None:
        limits.append((cgroup, "the cgroup's memory limit"))
    if not limits:
        return None, "unknown"
    return min(limits)


def memory_problem(comm, job) -> str | None:
    """Collective: why ``job`` cannot fit in host memory on some node (None: it fits, the
    check is off, or the memory cannot be read). Every rank gets the same answer."""
    if not job.run.memory_check:
        return None
    host, _ = rank_estimate(job, comm.size)
    usable, source = usable_host_bytes()
    with comm.purpose("control"):
        seen = comm.allgather_object((socket.gethostname(), host, usable, source))
    bases = _bases(job)
    shared = 0 if bases is None else bases.nbytes      # once per node (mpievo.parallel.shared_bases)
    if bases is not None:                              # and the best genome rank 0 hands out
        shared += best_genome_bytes(job.problem.dim, _row_itemsize(job), genome_dtype(job.engines[0].dtype).itemsize)
    for node in dict.fromkeys(name for name, *_ in seen):
        here = [entry for entry in seen if entry[0] == node]
        need = sum(entry[1] for entry in here) + shared
        known = [(entry[2], entry[3]) for entry in here if entry[2] is not None]
        if known and need > min(known)[0]:
            usable, source = min(known)
            kind = "host" if bases is None else (f"host ({bases.count} base models of {_gib(bases.nbytes)} "
                                                 "and the best genome included)")
            return _refusal(job, f"{len(here)} rank(s) on {node}", need, usable, source, kind)
    return None


def _row_itemsize(job) -> int:
    """Bytes of a gene of an island's rows: a seeded recipe's float64, else the genomes'."""
    return 8 if job.engines[0].genome == "seeded" else genome_dtype(job.engines[0].dtype).itemsize


def _bases(job):
    """The base models a job's genomes are read against (delta, seeded), else None."""
    if job.engines[0].genome == "dense":
        return None
    bases = getattr(job.problem, "bases", None)      # BaseModels, an array, or a job's .npy path
    return None if bases is None else as_bases(bases)


def device_memory_problem(comm, job) -> str | None:
    """Collective, once each rank is bound to its device: why some rank's GPU islands
    cannot fit in its device's free memory (None: they fit, none is on a GPU, or off)."""
    need = rank_estimate(job, comm.size)[1] if job.run.memory_check else 0
    free = _free_device_bytes() if need else None
    with comm.purpose("control"):
        seen = comm.allgather_object((need, free))
    for rank, (need, free) in enumerate(seen):
        if free is not None and need > free:
            return _refusal(job, f"rank {rank}'s device", need, free, "its free device memory", "device")
    return None


def _free_device_bytes() -> int | None:
    try:
        from numba import cuda

        return int(cuda.current_context().get_memory_info()[0])
    except Exception:  # no usable device here: the run itself reports that
        return None


def _refusal(job, where: str, need: int, usable: int, source: str, kind: str) -> str:
    engine = job.engines[0]
    return (f"memory: expected the job to fit in the {_gib(usable)} {where} can use ({source}), got an "
            f"estimate of {_gib(need)} of {kind} memory for {job.n_islands} islands of dim "
            f"{job.problem.dim} (engine.capacity {engine.capacity}, engine.batch_size {engine.batch_size}, "
            f"engine.dtype {engine.dtype}); lower problem.dim, engine.capacity, engine.batch_size or "
            "run.islands, run on more ranks or nodes, or set run.memory_check = false to skip this check")


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """The cgroup's limit minus its usage (v2, then v1); None without a limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(int(limit) - usage, 0)
    return None
