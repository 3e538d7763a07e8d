"""``mpievo bench gpu``: mpievo's device paths on the GPU this job finds, in one run.

Run on a GPU node, with the ranks sharing the node's GPU(s)::

    mpievo launch -n 2 -- mpievo bench gpu --json gpu.json

Sections (rank 0 runs all but the collective ones while the other ranks wait):

1. ``kernel``: :func:`mpievo.kernels.cuda.reduce.device_reduce` (``out = a + b``) against a
   device-to-device copy of the same size, float32 and bfloat16. Bytes moved: the
   reduction reads two arrays and writes one, the copy reads one and writes one.
   Target: reduction bandwidth >= 0.85x the copy's. Timed with CUDA events.
2. ``allreduce``: float32 sum over every rank's device buffer, direct (CUDA-aware MPI)
   and staged through pinned host memory, and the host ring all-reduce of the same size.
3. ``compression``: the fp16, bf16 and top-k wire formats against the float32 ring
   (host buffers).
4. ``island`` and 5. ``breeding``: :mod:`.gpu_engine`; 6. ``startup`` (a second process
   loads the first one's kernels from the disk cache): :mod:`.gpu_startup`.

Every result is checked once, after its timing, against a numpy reference (inputs are
chosen so that every reduction is exact or rounds like numpy); a wrong one raises
:class:`.checks.WrongResultError`. Collective times are the slowest rank's, medians over repeats.

The CUDA simulator gives no GPU timings: there ``--check`` is the only mode. It runs
every section at tiny sizes and verifies every result without timing anything (what
the tests run, in the simulator and on a GPU).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from ..schema import Settings, boolean, integer, list_of, number, setting
from .checks import event_seconds, expect_equal, no_sync

MIB = 1 << 20
EXIT_REFUSED = 2
#: reduction bandwidth over copy bandwidth, at least
TARGET_KERNEL_RATIO = 0.85
#: ``--check`` sizes (elements are what the simulator runs as Python threads)
CHECK_KERNEL_MIB = (1 / 1024,)
CHECK_ALLREDUCE_MIB = (1 / 1024, 1 / 256)
POSITIVE = number(0.0, math.inf, open_low=True)


@dataclass(frozen=True)
class GpuBenchOptions(Settings):
    """What ``mpievo bench gpu`` runs (its command-line flags)."""

    TABLE = "bench.gpu"

    kernel_mib: tuple = setting((64.0, 256.0, 1024.0), list_of(POSITIVE),
                                "operand sizes of the kernel section, MiB")
    allreduce_mib: tuple = setting((1.0, 64.0), list_of(POSITIVE), "all-reduce and compression sizes, MiB")
    dims: tuple = setting((1_000, 100_000, 10_000_000), list_of(integer(1)), "genome sizes of the island section")
    breed_dim: int = setting(10_000_000, integer(1), "genes per child of the breeding section")
    repeats: int = setting(10, integer(1), "timed repetitions (median)")
    island_seconds: float = setting(1.0, POSITIVE, "seconds each island steps per dim")
    host_threads: int = setting(1, integer(1), "Numba/BLAS threads of the host island")
    topk_ratio: float = setting(0.01, number(0.0, 1.0, open_low=True), "fraction of entries top-k sends")
    force_direct: bool = setting(False, boolean, "time the direct device path without CUDA awareness")
    check: bool = setting(False, boolean, "tiny sizes, every section verified, nothing timed")

    def checking(self) -> "GpuBenchOptions":
        """The same run at ``--check`` sizes."""
        from .gpu_engine import CHECK_BREED_DIM, CHECK_DIMS

        return replace(self, kernel_mib=CHECK_KERNEL_MIB, allreduce_mib=CHECK_ALLREDUCE_MIB,
                       dims=CHECK_DIMS, breed_dim=CHECK_BREED_DIM, repeats=1, check=True)


def refusal(check: bool) -> str | None:
    """Why ``mpievo bench gpu`` cannot run here (None: it can)."""
    try:
        from mpievo.kernels.cuda.reduce import simulator_enabled

        simulated = simulator_enabled()
        from numba import cuda
    except ImportError as err:
        return f"expected numba-cuda, got ImportError: {err}"
    if simulated:
        return None if check else (
            "the Numba CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1): it gives no GPU timings, "
            "so none are taken; --check runs every section at tiny sizes without timing")
    if not cuda.is_available():
        return ("expected a CUDA GPU, got none (numba.cuda.is_available() is False): "
                "run it on a GPU node, or --check under NUMBA_ENABLE_CUDASIM=1")
    return None


def _collective_seconds(comm, run, repeats: int, synchronize) -> float:
    """Median over repeats of the slowest rank's time (barrier before each)."""
    run()
    synchronize()
    local = []
    for _ in range(repeats):
        comm.barrier()
        start = time.perf_counter()
        run()
        synchronize()
        local.append(time.perf_counter() - start)
    slowest = comm.allreduce(np.array(local), op="max", algorithm="ring")
    return float(np.median(slowest))


def _pattern(n: int, dtype, period: int, offset: int) -> np.ndarray:
    """``n`` values repeating every ``period`` (no element-sized index array)."""
    block = ((np.arange(period) + offset) % period - period // 2) * 0.37
    return np.resize(block.astype(dtype), n)


# ------------------------------------------------------------------ sections
def kernel_section(options: GpuBenchOptions) -> list[dict]:
    """Reduction kernel vs device-to-device copy, per size and dtype."""
    from mpievo.kernels.host import BFLOAT16

    return [_kernel_case(mib, dtype, options)
            for mib in options.kernel_mib for dtype in (np.dtype(np.float32), BFLOAT16)]


def _kernel_case(mib: float, dtype: np.dtype, options: GpuBenchOptions) -> dict:
    from numba import cuda

    from mpievo.kernels.cuda import reduce as kc

    kdtype = kc.kernel_dtype(dtype)
    n = max(1, int(mib * MIB) // dtype.itemsize)
    a_host, b_host = _pattern(n, dtype, 1021, 0), _pattern(n, dtype, 1019, 7)
    a, b = cuda.to_device(a_host.view(kdtype)), cuda.to_device(b_host.view(kdtype))
    out = cuda.device_array(n, kdtype)
    row = {"dtype": dtype.name, "bytes": n * dtype.itemsize, "elements": n}
    runs = {"copy": (lambda: out.copy_to_device(a), a_host),
            "reduce": (lambda: kc.device_reduce(out, a, b, "sum", dtype=dtype), a_host + b_host)}
    for name, (run, want) in runs.items():  # the copy first: the reduction then overwrites out
        if options.check:
            run()
        else:
            row[f"{name}_s"] = event_seconds(run, options.repeats)
        expect_equal(out.copy_to_host().view(dtype), want, f"kernel {name} {dtype.name} n={n}")
    if not options.check:
        row["reduce_GBps"] = 3 * row["bytes"] / row["reduce_s"] / 1e9
        row["copy_GBps"] = 2 * row["bytes"] / row["copy_s"] / 1e9
        row["ratio"] = row["reduce_GBps"] / row["copy_GBps"]
        row["target"], row["met"] = TARGET_KERNEL_RATIO, row["ratio"] >= TARGET_KERNEL_RATIO
    return row


def _contribution(comm, n: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's float32 input and the exact sum over ranks (small integers: every
    summation order gives the same bits)."""
    base = np.resize(np.arange(-8, 9, dtype=np.float32), n)
    mine = base + np.float32(comm.rank)
    return mine, base * np.float32(comm.size) + np.float32(comm.size * (comm.size - 1) // 2)


def allreduce_section(comm, options: GpuBenchOptions, direct: bool) -> list[dict]:
    """Device all-reduce (staged, and direct when allowed) and the host ring, float32 sum."""
    from numba import cuda

    from mpievo.comm import Communicator

    # one communicator per wire, each keeping its streams and pinned slots between calls
    wires = {"staged": Communicator(cuda_aware=False)}
    if direct:
        wires["direct"] = Communicator(cuda_aware=True)
    rows = []
    for mib in options.allreduce_mib:
        n = max(comm.size, int(mib * MIB) // 4)
        src, want = _contribution(comm, n)
        dev_src, dev_out, host_out = cuda.to_device(src), cuda.device_array(n, np.float32), np.empty_like(src)
        runs = {name: (lambda over=over: over.allreduce(dev_src, dev_out, "sum"), cuda.synchronize,
                       dev_out.copy_to_host) for name, over in wires.items()}
        runs["host"] = (lambda: comm.allreduce(src, host_out, "sum", algorithm="ring"), no_sync,
                        lambda: host_out)
        row = {"bytes": n * 4, "ranks": comm.size, "dtype": "float32", "op": "sum", "paths": list(runs)}
        for name, (run, sync, result) in runs.items():
            if options.check:
                run()
                sync()
            else:
                row[f"{name}_s"] = _collective_seconds(comm, run, options.repeats, sync)
            expect_equal(result(), want, f"allreduce {name} n={n} rank {comm.rank}")
        if not options.check:
            factor = 2 * (comm.size - 1) / comm.size
            for name in runs:
                row[f"{name}_busbw_GBps"] = row["bytes"] * factor / row[f"{name}_s"] / 1e9
        rows.append(row)
    for over in wires.values():
        over.free()
    return rows


def _sparse_contribution(comm, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k nonzero small integers per rank (so top-k sends exactly them: no residual) and
    the exact sum, representable in fp16 and bf16."""
    stride = max(1, n // k)
    values = np.resize(np.array([1, -2, 3, -4], np.float32), k)
    x = np.zeros(n, np.float32)
    x[np.arange(k) * stride + comm.rank % stride] = values
    want = np.zeros(n, np.float32)
    for rank in range(comm.size):
        want[np.arange(k) * stride + rank % stride] += values
    return x, want


def compression_section(comm, options: GpuBenchOptions) -> list[dict]:
    """Compressed formats against the float32 ring (host buffers), sum."""
    from mpievo.comm import topk

    feedback = topk.ErrorFeedback()
    topk_name = f"topk_{options.topk_ratio:g}"
    rows = []
    for mib in options.allreduce_mib:
        n = max(comm.size, int(mib * MIB) // 4)
        k = topk.topk_count(n, ratio=options.topk_ratio)
        x, want = _sparse_contribution(comm, n, k)
        out = np.empty_like(x)
        runs = {"float32_ring": lambda: comm.allreduce(x, out, "sum", algorithm="ring"),
                "fp16": lambda: comm.allreduce(x, out, "sum", compression="fp16"),
                "bf16": lambda: comm.allreduce(x, out, "sum", compression="bf16"),
                topk_name: lambda: topk.topk_allreduce(comm, x, ratio=options.topk_ratio,
                                                       feedback=feedback, key=("bench", n), out=out)}
        row = {"bytes": n * 4, "ranks": comm.size, "topk_sent": k}
        for name, run in runs.items():
            if options.check:
                run()
            else:
                row[f"{name}_s"] = _collective_seconds(comm, run, options.repeats, no_sync)
            expect_equal(out, want, f"compression {name} n={n} rank {comm.rank}")
        if not options.check:
            for name in list(runs)[1:]:
                row[f"{name}_speedup"] = row["float32_ring_s"] / row[f"{name}_s"]
        rows.append(row)
    return rows


# ------------------------------------------------------------------ the run
def _device_name() -> str:
    from mpievo.kernels.cuda.reduce import simulator_enabled

    if simulator_enabled():
        return "CUDA simulator"
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def bench_gpu(comm, options: GpuBenchOptions) -> dict:
    """Run every section (collective: call on every rank); rank 0 prints the report.

    Returns:
        The results (complete on rank 0): conditions (device, ranks and their GPUs,
        CUDA awareness, check mode) and one entry per section; the island and
        breeding sections may hold ``{"skipped": reason}`` when the device engine is
        absent.

    Raises:
        WrongResultError: a result differs from its reference.
    """
    from mpievo.comm.device import support as cuda_support

    from . import gpu_engine as engine
    from . import gpu_startup
    from ..parallel.device_binding import bind_device

    binding = bind_device(comm.mpi_comm)
    awareness = cuda_support.cuda_awareness()
    direct = awareness.aware or options.force_direct
    results = {"check": options.check, "gpu_timings": not options.check, "device": _device_name(),
               "ranks": comm.size, "rank_devices": comm.allgather_object(binding.label),
               "cuda_aware": awareness._asdict(), "options": _conditions(options)}
    if not direct:
        results["direct_skipped"] = f"MPI is not CUDA-aware: {awareness.detail}; --force-direct overrides"
    sections = {  # name -> (run, whether every rank takes part, report lines)
        "kernel": (lambda: kernel_section(options), False, kernel_lines),
        "allreduce": (lambda: allreduce_section(comm, options, direct), True, allreduce_lines),
        "compression": (lambda: compression_section(comm, options), True, compression_lines),
        "island": (lambda: engine.island_section(options), False, engine.island_lines),
        "breeding": (lambda: engine.breeding_section(options), False, engine.breeding_lines),
        "startup": (lambda: gpu_startup.startup_section(options), False, gpu_startup.startup_lines),
    }
    if comm.rank == 0:
        print(header_line(results), flush=True)
    for name, (run, collective, lines) in sections.items():
        if collective or comm.rank == 0:
            results[name] = run()
        if comm.rank == 0:  # as each section ends: a later failure keeps these lines
            print("\n".join(lines(results)), flush=True)
        comm.barrier()
    return results


def _conditions(options: GpuBenchOptions) -> dict:
    fields = vars(options).copy()
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


# ------------------------------------------------------------------ report
def _size(nbytes: int) -> str:
    return f"{nbytes / MIB:.1f} MiB" if nbytes >= MIB else f"{nbytes / 1024:.1f} KiB"


def header_line(results: dict) -> str:
    aware = results["cuda_aware"]
    return (f"mpievo bench gpu: {results['device']}, {results['ranks']} rank(s) on "
            f"{', '.join(results['rank_devices'])}; CUDA-aware MPI: {aware['aware']} ({aware['detail']})")


# Report lines per section. ``--check`` gives one "checked" line per case and no number
# that could pass for a timing.
def kernel_lines(results: dict) -> list[str]:
    lines = []
    for row in results["kernel"]:
        if results["check"]:
            lines.append(f"checked kernel {row['dtype']} ({row['elements']} elements): "
                         "copy and reduction equal numpy")
            continue
        verdict = "met" if row["met"] else "MISSED"
        lines.append(f"kernel {row['dtype']:>8} {_size(row['bytes']):>10}: reduce {row['reduce_GBps']:8.1f} "
                     f"GB/s, copy {row['copy_GBps']:8.1f} GB/s, ratio {row['ratio']:.2f} "
                     f"(target >= {TARGET_KERNEL_RATIO}: {verdict})")
    return lines


def allreduce_lines(results: dict) -> list[str]:
    lines = []
    for row in results["allreduce"]:
        if results["check"]:
            lines.append(f"checked allreduce {row['bytes'] // 4} float32 x{row['ranks']}: "
                         f"{', '.join(row['paths'])} equal numpy")
            continue
        parts = [f"{n} {row[n + '_s'] * 1e3:.3f} ms ({row[n + '_busbw_GBps']:.2f} GB/s busbw)"
                 for n in row["paths"]]
        lines.append(f"allreduce {_size(row['bytes']):>10} x{row['ranks']}: " + ", ".join(parts))
    if results.get("direct_skipped"):
        lines.append(f"allreduce direct: not run ({results['direct_skipped']})")
    return lines


def compression_lines(results: dict) -> list[str]:
    lines = []
    for row in results["compression"]:
        if results["check"]:
            lines.append(f"checked compression {row['bytes'] // 4} float32 x{row['ranks']}: "
                         "float32 ring, fp16, bf16 and top-k equal numpy")
            continue
        parts = [f"{k[:-8]} x{row[k]:.2f}" for k in row if k.endswith("_speedup")]
        lines.append(f"compression {_size(row['bytes']):>10} x{row['ranks']}: float32 ring "
                     f"{row['float32_ring_s'] * 1e3:.3f} ms; speed-up " + ", ".join(parts))
    return lines
