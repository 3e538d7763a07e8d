"""GPU benchmark of mpievo's device collectives, in one run.

Reports
  1. the device reduction kernel's bandwidth against a device-to-device copy of
     the same size (bytes moved: the reduction reads two arrays and writes one, the
     copy reads one and writes one; target ratio >= 0.85),
  2. device all-reduce with every rank sharing the GPU(s): direct (CUDA-aware MPI,
     DeviceWire) and staged through pinned host memory (StagedWire), with the host
     all-reduce of the same size for reference,
  3. the compressed wire formats (fp16, bf16, top-k) against the plain float32 ring.

Run on a GPU node:
    mpievo launch -n 4 -- python examples/bench_gpu.py --json gpu.json

Simulator timings are not GPU timings: under NUMBA_ENABLE_CUDASIM=1 the script
refuses to run unless given --simulate, which runs tiny sizes and labels every
number SIMULATED (a functional check of the script itself).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

SIMULATED_LABEL = "SIMULATED (CUDA simulator: not GPU timings)"
TARGET_RATIO = 0.85
EXIT_REFUSED = 2


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-mib", type=float, default=256.0,
                        help="size of each operand of the kernel benchmark (MiB)")
    parser.add_argument("--allreduce-mib", type=float, nargs="+", default=[1.0, 64.0],
                        help="all-reduce message sizes (MiB)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repetitions (median kept)")
    parser.add_argument("--topk-ratio", type=float, default=0.01, help="top-k fraction sent")
    parser.add_argument("--force-direct", action="store_true",
                        help="time the direct path even when MPI does not report CUDA awareness")
    parser.add_argument("--simulate", action="store_true",
                        help="allow the CUDA simulator: tiny sizes, every number labelled SIMULATED")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"expected --repeats >= 1, got {args.repeats}")
    return args


# ------------------------------------------------------------------ timing
def _median_seconds(run, repeats: int, synchronize) -> float:
    run()  # warm-up: compilation, allocation, first-touch
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _device_seconds(run, repeats: int, simulated: bool) -> float:
    """Median time of ``run`` on the device (CUDA events on a GPU)."""
    from numba import cuda

    if simulated:
        return _median_seconds(run, repeats, cuda.synchronize)
    run()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cuda.event(), cuda.event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def _collective_seconds(comm, run, repeats: int, synchronize) -> float:
    """Median over repeats of the slowest rank's time."""
    def timed():
        comm.barrier()
        run()
        synchronize()

    local = []
    timed()
    for _ in range(repeats):
        comm.barrier()
        start = time.perf_counter()
        run()
        synchronize()
        local.append(time.perf_counter() - start)
    slowest = comm.allreduce(np.array(local), op="max", algorithm="ring")
    return float(np.median(slowest))


# ------------------------------------------------------------------ sections
def kernel_section(mib: float, repeats: int, simulated: bool) -> list[dict]:
    """Reduction kernel vs device-to-device copy, per dtype."""
    from numba import cuda

    from mpievo.kernels import cuda as kc
    from mpievo.kernels import host

    rows = []
    for dtype in (np.dtype(np.float32), np.dtype(np.float16), host.BFLOAT16):
        kdtype = kc.kernel_dtype(dtype)
        n = max(1, int(mib * (1 << 20)) // dtype.itemsize)
        a = cuda.device_array(n, kdtype)
        b = cuda.device_array(n, kdtype)
        cuda.to_device(np.ones(n, dtype).view(kdtype), to=a)
        cuda.to_device(np.zeros(n, dtype).view(kdtype), to=b)
        t_reduce = _device_seconds(lambda: kc.device_reduce_into(a, b, "sum", dtype=dtype),
                                   repeats, simulated)
        t_copy = _device_seconds(lambda: a.copy_to_device(b), repeats, simulated)
        reduce_bw = 3 * n * dtype.itemsize / t_reduce / 1e9
        copy_bw = 2 * n * dtype.itemsize / t_copy / 1e9
        rows.append({"dtype": str(dtype), "bytes": n * dtype.itemsize, "reduce_s": t_reduce,
                     "copy_s": t_copy, "reduce_GBps": reduce_bw, "copy_GBps": copy_bw,
                     "ratio": reduce_bw / copy_bw})
    return rows


def allreduce_section(comm, sizes_mib, repeats: int, simulated: bool, direct: bool) -> list[dict]:
    """Device all-reduce (direct and staged) and the host all-reduce, float32 sum."""
    from numba import cuda

    from mpievo.comm import Communicator

    # one communicator per wire, each keeping its streams and pinned slots between calls
    wires = {"staged": Communicator(cuda_aware=False)}
    if direct:
        wires["direct"] = Communicator(cuda_aware=True)
    rows = []
    for mib in sizes_mib:
        n = max(comm.size, int(mib * (1 << 20)) // 4)
        host_buf = np.ones(n, np.float32)
        dev_buf = cuda.to_device(host_buf)
        row = {"bytes": n * 4, "ranks": comm.size}
        for name, over in wires.items():
            row[f"{name}_s"] = _collective_seconds(
                comm, lambda over=over: over.allreduce(dev_buf, dev_buf, "sum"), repeats, cuda.synchronize)
        row["host_s"] = _collective_seconds(
            comm, lambda: comm.allreduce(host_buf, host_buf, "sum", algorithm="ring"), repeats,
            lambda: None)
        factor = 2 * (comm.size - 1) / comm.size
        for key in [k for k in row if k.endswith("_s")]:
            row[key[:-2] + "_busbw_GBps"] = row["bytes"] * factor / row[key] / 1e9
        rows.append(row)
    for over in wires.values():
        over.free()
    return rows


def compression_section(comm, sizes_mib, repeats: int, topk_ratio: float) -> list[dict]:
    """Compressed formats against the float32 ring (host buffers), sum."""
    from mpievo.comm import topk

    feedback = topk.ErrorFeedback()
    rows = []
    for mib in sizes_mib:
        n = max(comm.size, int(mib * (1 << 20)) // 4)
        x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        work = x.copy()
        runs = {"float32_ring": lambda: comm.allreduce(x, work, "sum", algorithm="ring"),
                "fp16": lambda: comm.allreduce(x, work, "sum", compression="fp16"),
                "bf16": lambda: comm.allreduce(x, work, "sum", compression="bf16"),
                f"topk_{topk_ratio:g}": lambda: topk.topk_allreduce(
                    comm, x, ratio=topk_ratio, feedback=feedback, key=("bench", n), out=work)}
        row = {"bytes": n * 4, "ranks": comm.size}
        for name, run in runs.items():
            row[f"{name}_s"] = _collective_seconds(comm, run, repeats, lambda: None)
        for name in list(runs)[1:]:
            row[f"{name}_speedup"] = row["float32_ring_s"] / row[f"{name}_s"]
        rows.append(row)
    return rows


# ------------------------------------------------------------------ report
def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def _print_report(results: dict) -> None:
    label = f"  [{SIMULATED_LABEL}]" if results["simulated"] else ""
    print(f"mpievo GPU benchmark: {results['device']}, {results['ranks']} rank(s){label}")
    print(f"CUDA-aware MPI: {results['cuda_aware']['aware']} ({results['cuda_aware']['detail']})")
    for row in results.get("kernel", []):
        verdict = "" if results["simulated"] else (
            " ok" if row["ratio"] >= TARGET_RATIO else f" BELOW target {TARGET_RATIO}")
        print(f"kernel {row['dtype']:>8} {_size(row['bytes']):>10}: reduce "
              f"{row['reduce_GBps']:8.1f} GB/s, copy {row['copy_GBps']:8.1f} GB/s, "
              f"ratio {row['ratio']:.2f}{verdict}{label}")
    for row in results.get("allreduce", []):
        parts = [f"{k[:-2]} {row[k] * 1e3:.3f} ms ({row[k[:-2] + '_busbw_GBps']:.2f} GB/s busbw)"
                 for k in row if k.endswith("_s")]
        print(f"allreduce {_size(row['bytes']):>10} x{row['ranks']}: " + ", ".join(parts) + label)
    if results.get("direct_skipped"):
        print(f"allreduce direct: not run ({results['direct_skipped']})")
    for row in results.get("compression", []):
        parts = [f"{k[:-8]} x{row[k]:.2f}" for k in row if k.endswith("_speedup")]
        print(f"compression {_size(row['bytes']):>10} x{row['ranks']}: float32 ring "
              f"{row['float32_ring_s'] * 1e3:.3f} ms; speed-up " + ", ".join(parts) + label)


def _device_name(simulated: bool) -> str:
    if simulated:
        return "CUDA simulator"
    from numba import cuda

    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def main(argv=None) -> int:
    args = parse_args(argv)
    from mpievo.kernels.cuda import simulator_enabled

    simulated = simulator_enabled()
    if simulated and not args.simulate:
        print("mpievo bench_gpu: the Numba CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1): "
              "its timings are not GPU timings, so none are reported. "
              "Pass --simulate for a labelled functional run.", file=sys.stderr)
        return EXIT_REFUSED
    from numba import cuda

    if not simulated and not cuda.is_available():
        print("mpievo bench_gpu: no CUDA GPU available; run it on a GPU node.", file=sys.stderr)
        return EXIT_REFUSED
    if simulated:  # a functional check: tiny sizes only
        args.kernel_mib, args.allreduce_mib, args.repeats = 1 / 256, [1 / 256, 1 / 64], 2

    from mpievo.comm import Communicator, cuda_support

    comm = Communicator()
    awareness = cuda_support.cuda_awareness()
    direct = awareness.aware or args.force_direct
    results = {"simulated": simulated, "gpu_timings": not simulated,
               "device": _device_name(simulated), "ranks": comm.size,
               "cuda_aware": awareness._asdict(), "target_ratio": TARGET_RATIO}
    if comm.rank == 0:
        results["kernel"] = kernel_section(args.kernel_mib, args.repeats, simulated)
    results["allreduce"] = allreduce_section(comm, args.allreduce_mib, args.repeats, simulated, direct)
    if not direct:
        results["direct_skipped"] = f"MPI is not CUDA-aware: {awareness.detail}; --force-direct overrides"
    results["compression"] = compression_section(comm, args.allreduce_mib, args.repeats, args.topk_ratio)
    if comm.rank == 0:
        _print_report(results)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
    comm.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
