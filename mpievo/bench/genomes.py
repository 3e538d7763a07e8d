"""``mpievo bench genomes``: dense, delta and seeded genomes side by side (issue 10).

One synthetic model-merging problem for every encoding: three float32 base models
(standard normals, made once per node in the shared window of
:func:`~mpievo.parallel.shared_bases.share_bases`), fitness the squared distance to the fixed
convex combination ``0.25 b0 + 0.45 b1 + 0.3 b2`` (computed in chunks from the bases,
no genome-sized temporaries), box [-6, 6]. Every rank hosts one GA island (at least
two islands; on one rank both live in this process), archive ``capacity`` and batch
``batch``, float32 genomes, the GA's default (sparse) mutation rate; dense and delta
islands start uniform in the box, seeded ones from the bases (its rule). Per cell
(encoding, dim):

* ``migrant_bytes``: one migrant as it travels (its row plus its 32-byte record,
  :class:`~mpievo.parallel.packing.EdgeLayout`); on more than one rank cross-checked
  against ``comm.traffic["migration"]`` of a real migration (``traffic_bytes``: what
  this rank sent per migration, one edge of one emigrant plus the edge's 8-byte header).
* ``migration_ms``: ring migration of 1 emigrant (best in, better replaces), the
  slowest rank's time per migration, median (and ``migration_min_ms``, the fastest)
  of ``repeats``; ranks that share busy cores wait for each other's time slices.
* ``breed_gbs``: GB/s of child genome (``batch * dim * 4`` bytes) of the GA's ``ask``
  (crossover + mutation of rows: genomes, deltas or recipes), best of ``generations``
  on every island (one Numba thread per rank); for seeded also ``materialize_gbs``
  (making the whole child genomes from the recipes) and ``produce_gbs`` (both: what
  whole child genomes cost).
* ``peak_bytes``: this rank's VmHWM over the cell (reset at its start as
  :func:`mpievo.bench.engine_vs_pygmo.island_peak_memory` does), the largest over ranks, against
  ``data_bytes`` = the rank's archive + batch rows + the bases (+ for delta and seeded
  the whole genomes it may materialise, ``engine.materialize_budget`` = 2 genomes);
  ``peak_ratio`` = (peak - ``base_bytes``) / ``data_bytes``, ``base_bytes`` the
  process's resident memory before the cell (interpreter, kernels, MPI); ``phase_peaks``
  the largest VmHWM of each phase (bases loaded, init, breed, migrate, checkpoint,
  check) and ``peak_phase`` the phase of the peak.
* ``checkpoint_bytes`` / ``checkpoint_s``: the islands' HDF5 files written by
  :class:`~mpievo.io.Checkpointer` (all ranks' files) and the time to write them.

Checks (a failure raises :class:`GenomesCheckError` on every rank after the table):
every island's decoded best genome has the reported fitness (re-evaluated on the
host); the traffic of a migration is exactly the layout's bytes; the checkpoint holds
every archive row. A cell whose estimated memory (:func:`estimated_bytes`) is over
:data:`USABLE` of the node's available memory is skipped with its reason, and so is an
encoding whose islands refuse ``device`` (:func:`_refusal`).

``device = "cuda"`` (:mod:`.genomes_device`): every island runs with
``engine.device = "cuda"`` -- dense and delta islands keep archive, batch and breeding
on the GPU, seeded ones keep recipes on the host and materialise children on the GPU --
and the fitness runs there (``Problem(..., device=True)``). Timed steps drain the GPU's
queue first and last. Per cell also ``gpu_phases`` (the GPU's used bytes at the end of
each phase, largest over ranks: :func:`~.genomes_device.gpu_memory`),
``gpu_peak_bytes``, ``gpu_cell_bytes`` (the peak minus the use before the cell) and
``gpu_need_bytes`` (the estimate for the ranks on one GPU: over :data:`USABLE` of a
GPU's free memory skips the cell). The decoded-best check then asks agreement to
``1e-9`` (sums in another order on the GPU).
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..evo import Island, Problem
from ..evo.engine_config import EngineConfig
from ..evo.genomes import BaseModels, encode, row_dtype
from ..evo.operators import COUNTER_DIM
from ..parallel.shared_bases import share_bases
from .genomes_device import (DeviceMergeDistance, bind_gpu, device_need, gpu_columns, gpu_memory, gpu_used,
                                   release_pending)
from .genomes_steps import breed_rates, check_best, checkpoint_size, migration_times, record_bytes
from ..rules.mapping import rank_of_island
from ..parallel.threads import limit_blas_threads
from ..schema import Settings, choice, integer, list_of, setting

GENOMES = ("dense", "delta", "seeded")
#: where the islands run (engine.device)
DEVICES = ("cpu", "cuda")
#: the merge every fitness measures the distance to (a convex combination of the bases)
WEIGHTS = (0.25, 0.45, 0.3)
LOWER, UPPER = -6.0, 6.0
DTYPE = np.dtype(np.float32)
#: genes per fitness chunk (bounds the float64 temporaries to batch * 512 KiB)
_CHUNK = 1 << 16
#: share of the node's available memory a cell may take (the rest stays with others)
USABLE = 0.8
#: resident memory of a rank before any genome (interpreter, numpy, Numba kernels, MPI)
_PROCESS_BYTES = 400 << 20


class GenomesCheckError(RuntimeError):
    """A measured result failed its check (raised on every rank, after the table)."""


@dataclass(frozen=True)
class GenomesOptions(Settings):
    """The grid and sizes of the benchmark (defaults: the issue's, 1e8 only when asked)."""

    TABLE = "bench.genomes"

    dims: tuple = setting((1_000, 100_000, 10_000_000), list_of(integer(1)), "genome sizes")
    capacity: int = setting(4, integer(1), "archive of every island")
    batch: int = setting(4, integer(1), "children per generation")
    generations: int = setting(3, integer(1), "timed generations per island")
    repeats: int = setting(5, integer(1), "timed migrations (median)")
    threads: int = setting(1, integer(1), "Numba/BLAS threads per rank")
    seed: int = setting(0, integer(0), "seed of the islands")
    device: str = setting("cpu", choice(DEVICES), "where islands and fitness run")

    @property
    def on_device(self) -> bool:
        return self.device == "cuda"


def load_bases(out: np.ndarray) -> None:
    """The synthetic bases: row ``b`` standard normals from seed ``b`` (no temporaries)."""
    for b, row in enumerate(out):
        np.random.default_rng(b).standard_normal(out=row, dtype=out.dtype)


class MergeDistance:
    """Squared distance of each genome to ``WEIGHTS @ bases`` (float64 sums, chunked)."""

    def __init__(self, bases: BaseModels):
        self.bases = bases

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        bases = self.bases.array
        values = np.zeros(genomes.shape[0])
        for start in range(0, genomes.shape[1], _CHUNK):
            part = slice(start, start + _CHUNK)
            target = sum(w * bases[b, part].astype(np.float64) for b, w in enumerate(WEIGHTS))
            diff = genomes[:, part] - target
            values += np.einsum("ij,ij->i", diff, diff)
        return values


def merge_problem(dim: int, device: bool = False) -> Problem:
    """The benchmark's problem at ``dim`` genes, with its (not yet loaded) bases; with
    ``device`` its fitness runs on the GPU (:class:`.genomes_device.DeviceMergeDistance`)."""
    bases = BaseModels(load_bases, shape=(len(WEIGHTS), dim), dtype=DTYPE, reference="bench-genomes:normal")
    func = DeviceMergeDistance(bases, WEIGHTS) if device else MergeDistance(bases)
    return Problem(func, dim, LOWER, UPPER, bases=bases, name=f"merge-distance-{dim}", device=device)


def engine_config(genome: str, dim: int, options: GenomesOptions) -> EngineConfig:
    # a materialising budget of two genomes: one evaluated at a time, one cached best
    return EngineConfig(genome=genome, capacity=options.capacity, batch_size=options.batch,
                        dtype=DTYPE.name, materialize_budget=2 * dim * DTYPE.itemsize,
                        stagnation_patience=0, device=options.device)


def estimated_bytes(genome: str, dim: int, options: GenomesOptions, ranks: int) -> int:
    """Memory a cell needs on one node of ``ranks`` ranks, +10%: per rank the genomes
    this benchmark's phase peaks showed at 1e7 genes (archive and batch; besides them
    dense 2 in migration, delta 2 more for its row box and 2 materialised, seeded 3
    materialised and decoded; one genome of slack each) and the process; the bases once.
    On the device the archive and batch live on the GPU (:func:`gpu_need`), the rest
    stays on the host."""
    genome_bytes = dim * DTYPE.itemsize
    held = 0 if options.on_device else options.capacity + options.batch
    rows = {"dense": held + 3, "delta": held + 7, "seeded": 4}[genome]
    need = ranks * (rows * genome_bytes + _PROCESS_BYTES) + len(WEIGHTS) * genome_bytes
    return int(1.1 * need)


def available_bytes() -> int:
    """The node's MemAvailable (Linux)."""
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


def _phase_peak() -> int:
    """VmHWM since the last reset, then reset (the next phase's peak starts here)."""
    peak = _status("VmHWM")
    _reset_peak()
    return peak


def bench_genomes(comm, options: GenomesOptions, out: str | None = None, log=print) -> list[dict]:
    """Every (encoding, dim) cell of ``options`` (collective); rank 0 prints the table
    and writes genomes.csv / genomes.json / table.md under ``out``.

    Returns:
        one row per cell (skipped cells with ``skipped``: the reason), the same on every rank.

    Raises:
        GenomesCheckError: on every rank, when a check failed (after the table is written).
    """
    from .genomes_report import write_results

    workdir = comm.bcast_object(tempfile.mkdtemp(prefix="mpievo-bench-genomes-") if comm.rank == 0 else None)
    with contextlib.ExitStack() as stack:
        limit_blas_threads(options.threads, stack)   # as mpievo run gives a rank
        rows = _grid(comm, options, Path(workdir), log)
    if comm.rank == 0 and out is not None:
        for path in write_results(rows, out, comm.size, options.device):
            log(f"wrote {path}")
    failed = [f"{r['genome']} dim {r['dim']}: {p}" for r in rows for p in r.get("problems", ())]
    if failed:
        raise GenomesCheckError("mpievo bench genomes: checks failed:\n  " + "\n  ".join(failed))
    return rows


def _grid(comm, options: GenomesOptions, workdir: Path, log) -> list[dict]:
    """The warm-up, then every cell (rank 0 prints each row as it comes)."""
    from .genomes_report import format_table

    rows = []
    sharing = bind_gpu(comm) if options.on_device else 0
    refused = {genome: _refusal(comm, genome, options) for genome in GENOMES}
    try:
        # untimed: every code path (small and counter-based kernels) loaded before the first
        # peak, at sizes that never need the memory check (--dims 1e9 alone must not warm at 1e9)
        smallest = min(int(min(options.dims)), COUNTER_DIM)
        warm = {smallest} | ({COUNTER_DIM} if max(options.dims) >= COUNTER_DIM else set())
        for genome in (g for g in GENOMES if refused[g] is None):
            for dim in sorted(warm):
                _cell(comm, genome, dim, options, workdir / f"warm-{genome}-{dim}", sharing)
        for dim in options.dims:
            for genome in GENOMES:
                row = _cell_or_skip(comm, genome, int(dim), options, workdir, refused[genome], sharing)
                rows.append(row)
                if comm.rank == 0:
                    log(format_table([row], header=len(rows) == 1))
    finally:
        # no barrier: after a failure the other ranks may be in another collective; on
        # success every rank is past the last checkpoint's gather, so nothing writes here
        if comm.rank == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    return rows


def _refusal(comm, genome: str, options: GenomesOptions) -> str | None:
    """Why islands of ``genome`` cannot run with ``options.device`` (an island of 2 genes
    refuses them), the same on every rank; None when they can."""
    try:
        Island(0, merge_problem(2, options.on_device), engine_config(genome, 2, options), seed=options.seed)
        reason = None
    except (ValueError, RuntimeError) as err:
        reason = str(err)
    reasons = [r for r in comm.allgather_object(reason) if r is not None]
    return reasons[0] if reasons else None


def _cell_or_skip(comm, genome: str, dim: int, options: GenomesOptions, workdir: Path, refused: str | None,
                  sharing: int) -> dict:
    if refused:
        return {"genome": genome, "dim": dim, "skipped": f"refused: {refused}"}
    gc.collect()   # the previous cell's arrays are gone before the memory is looked at
    if options.on_device:
        release_pending()
    reason = _too_large(comm, genome, dim, options, sharing)
    if reason:
        return {"genome": genome, "dim": dim, "skipped": reason}
    return _cell(comm, genome, dim, options, workdir / f"{genome}-{dim}", sharing)


def _too_large(comm, genome: str, dim: int, options: GenomesOptions, sharing: int) -> str | None:
    """The skip reason of a cell that needs over :data:`USABLE` of the node's available
    memory or (on the device) of the free memory of a GPU; None when it fits."""
    need = estimated_bytes(genome, dim, options, comm.size)
    have = comm.bcast_object(available_bytes() if comm.rank == 0 else None)
    if need > USABLE * have:
        return f"needs about {need / 1e9:.1f} GB on the node, {USABLE:.0%} of the {have / 1e9:.1f} GB available"
    if not options.on_device:
        return None
    need = sharing * gpu_need(genome, dim, options, comm.size)
    free = [f for f in comm.allgather_object(gpu_memory()[1]) if f is not None]   # none in the simulator
    if free and need > USABLE * min(free):
        return (f"needs about {need / 1e9:.1f} GB on a GPU ({sharing} rank(s) on it), {USABLE:.0%} of the "
                f"{min(free) / 1e9:.1f} GB free")
    return None


def gpu_need(genome: str, dim: int, options: GenomesOptions, ranks: int) -> int:
    """GPU bytes of one rank's cell among ``ranks`` (:func:`.genomes_device.device_need`)."""
    budget = engine_config(genome, dim, options).materialize_budget
    block_rows = max(1, budget // (dim * DTYPE.itemsize) // 2)   # EncodedProblem's block
    islands = -(-max(2, ranks) // ranks)                           # the most on one rank
    return device_need(genome, dim, options.capacity, options.batch, len(WEIGHTS), DTYPE.itemsize,
                       block_rows, islands)


def _cell(comm, genome: str, dim: int, options: GenomesOptions, directory: Path, sharing: int) -> dict:
    base_rss = _status("VmRSS")
    gpu_base = gpu_used() if options.on_device else None
    _reset_peak()
    problem = merge_problem(dim, options.on_device)
    release = share_bases(comm, problem.bases)
    row = _measure(comm, genome, dim, options, problem, directory)
    # freeing the window is collective: only on success (after a failure the other ranks
    # may be elsewhere, and the job is aborted)
    gc.collect()
    release()
    peak = max(row["phase_peaks"].values())
    base = max(comm.allgather_object(base_rss))
    # what the cell added to the process, against what it must hold
    row.update(base_bytes=base, peak_bytes=peak, peak_ratio=(peak - base) / row["data_bytes"])
    if options.on_device:
        row.update(gpu_columns(comm, row.pop("gpu_phases"), gpu_base,
                               sharing * gpu_need(genome, dim, options, comm.size)))
    return row


def _measure(comm, genome, dim, options, problem, directory) -> dict:
    config = engine_config(genome, dim, options)
    encoded = encode(problem, config)      # one encoded problem for this rank's islands
    n_islands = max(2, comm.size)
    mine = [i for i in range(n_islands) if rank_of_island(i, n_islands, comm.size) == comm.rank]
    islands = {i: Island(i, encoded, config, seed=options.seed) for i in mine}
    peaks, gpu = {"bases": _status("VmHWM")}, {}
    _reset_peak()

    def mark(phase: str) -> None:
        peaks[phase] = _phase_peak()
        if options.on_device:
            gpu[phase] = gpu_used()

    for island in islands.values():
        island.initialize()
    mark("init")
    breeding = breed_rates(islands, options.generations, genome, DTYPE.itemsize, options.on_device)
    mark("breed")
    row_dim, rows = encoded.dim, row_dtype(encoded, DTYPE)
    row_bytes = row_dim * rows.itemsize
    migration = migration_times(comm, islands, n_islands, row_dim, rows, options)
    mark("migrate")
    checkpoint = checkpoint_size(comm, islands, directory, options.generations + 1 + options.repeats,
                                 n_islands * options.capacity * row_bytes)
    mark("checkpoint")
    # re-evaluated on the host: a device fitness agrees to rounding (other sum orders)
    problems = (check_best(islands, MergeDistance(problem.bases), dim, DTYPE, 1e-9 if options.on_device else 1e-12)
                + checkpoint.pop("problems") + migration.pop("problems") + _placement(islands, options))
    mark("check")
    everyone = comm.allgather_object(peaks)
    phase_peaks = {phase: max(p[phase] for p in everyone) for phase in peaks}
    problems = sorted({p for ps in comm.allgather_object(problems) for p in ps})
    # best of the generations, as mpievo.bench.engine_vs_pygmo.breeding_throughput: a rate is at most
    # lowered by a busy machine
    breeding = {k: max(v) for k, v in _merged(comm.allgather_object(breeding)).items()}
    # what the rank must hold: its archives and batches (on the host), the bases, and
    # (delta, seeded) the genomes it materialises (engine.materialize_budget)
    held = 0 if options.on_device and genome != "seeded" else (options.capacity + options.batch) * row_bytes
    data = held * len(mine) + problem.bases.nbytes
    data += 0 if genome == "dense" else config.materialize_budget
    return {"genome": genome, "dim": dim, "ranks": comm.size, "islands": n_islands, "device": options.device,
            "row_bytes": row_bytes, "migrant_bytes": row_bytes + record_bytes(row_dim, rows), **migration,
            **breeding, **checkpoint, "data_bytes": data, "phase_peaks": phase_peaks,
            "peak_phase": max(phase_peaks, key=phase_peaks.get), "problems": problems,
            **({"gpu_phases": gpu} if options.on_device else {})}


def _placement(islands: dict, options: GenomesOptions) -> list[str]:
    """With the device: every island breeds on the GPU (dense, delta) or materialises
    its genomes there (seeded recipes)."""
    if not options.on_device:
        return []
    return [f"island {i}: expected it on the device, got a host island" for i, island in islands.items()
            if not (island.on_device or getattr(island.problem, "on_device", False))]


def _merged(parts: list[dict]) -> dict:
    merged: dict[str, list] = {}
    for part in parts:
        for key, values in part.items():
            merged.setdefault(key, []).extend(values)
    return merged
