"""OSU-style benchmarks of mpievo's collectives against the MPI library's own.

For each collective and size: warm-up, then iterations each started after a
barrier, alternating mpievo's call and the native one; an iteration's time is the
maximum over ranks, and the reported time is the median over iterations. Bandwidths follow nccl-tests: algbw = bytes / time,
busbw = algbw x factor (all-reduce 2(P-1)/P; reduce-scatter and all-gather
(P-1)/P with bytes = the full array; broadcast 1).

Native MPI pays for large temporary allocations with glibc's default mmap
thresholds; ``malloc_modes=("default", "tuned")`` runs the sweep a second time
after ``mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=64 GiB)`` (the same as
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736``) so both are reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import time

import numpy as np
from mpi4py import MPI

from . import select
from .communicator import Communicator

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast")
DEFAULT_SIZES = [4096 << i for i in range(17)]  # 4 KiB .. 256 MiB
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def busbw_factor(collective: str, nranks: int) -> float:
    if collective == "allreduce":
        return 2 * (nranks - 1) / nranks
    if collective in ("reduce_scatter", "allgather"):
        return (nranks - 1) / nranks
    return 1.0


def tune_malloc() -> bool:
    """Keep freed memory instead of returning it to the OS (what MALLOC_* variables do)."""
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    ok = libc.mallopt(_M_MMAP_MAX, 0) == 1
    return ok and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)) == 1


def memcpy_bandwidth(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Single-core copy bandwidth in GB/s (bytes copied / time), median of repeats."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return src.nbytes / float(np.median(times)) / 1e9


class _Case:
    """Buffers and the two callables (mpievo, native) for one collective and size."""

    def __init__(self, comm: Communicator, native: MPI.Intracomm, collective: str, nbytes: int,
                 algorithm: str | None):
        p, r = comm.size, comm.rank
        n = max(p, nbytes // 4)
        n -= n % p  # equal blocks, so the native calls need no counts
        block = n // p
        self.nbytes = n * 4
        if collective == "allreduce":
            send, recv = np.ones(n, np.float32), np.empty(n, np.float32)
            self.ours = lambda: comm.allreduce(send, recv, "sum", algorithm=algorithm)
            self.native = lambda: native.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], MPI.SUM)
        elif collective == "reduce_scatter":
            send, recv = np.ones(n, np.float32), np.empty(block, np.float32)
            self.ours = lambda: comm.reduce_scatter(send, recv, "sum", algorithm=algorithm)
            self.native = lambda: native.Reduce_scatter_block([send, MPI.FLOAT], [recv, MPI.FLOAT], MPI.SUM)
        elif collective == "allgather":
            send, recv = np.full(block, r, np.float32), np.empty(n, np.float32)
            counts = [block] * p
            self.ours = lambda: comm.allgather(send, recv, counts=counts, algorithm=algorithm)
            self.native = lambda: native.Allgather([send, MPI.FLOAT], [recv, MPI.FLOAT])
        elif collective == "broadcast":
            buf = np.ones(n, np.float32)
            self.ours = lambda: comm.broadcast(buf, 0, algorithm=algorithm)
            self.native = lambda: native.Bcast([buf, MPI.FLOAT], 0)
        else:
            raise ValueError(f"expected a collective in {COLLECTIVES}, got {collective!r}")


def time_call(comm: MPI.Intracomm, fn, *, min_iters: int = 5, max_iters: int = 1000,
              target_s: float = 0.3, warmup: int = 3) -> float:
    """Median over iterations of the per-iteration maximum time over ranks (seconds)."""
    return time_pair(comm, fn, None, min_iters=min_iters, max_iters=max_iters,
                     target_s=target_s, warmup=warmup)[0]


def time_pair(comm: MPI.Intracomm, fn_a, fn_b, *, min_iters: int = 5, max_iters: int = 1000,
              target_s: float = 0.3, warmup: int = 3) -> tuple[float, float | None]:
    """Time ``fn_a`` and ``fn_b`` in alternating iterations (so that drift in machine load
    affects both alike); each: median over iterations of the maximum over ranks.

    Returns:
        (time of fn_a, time of fn_b or None) in seconds.
    """
    fns = [fn_a] if fn_b is None else [fn_a, fn_b]
    one = float("inf")
    for _ in range(max(1, warmup)):
        for fn in fns:
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            one = min(one, time.perf_counter() - t0)  # min: a descheduled warm-up must not shrink the sample
    one = comm.allreduce(one, op=MPI.MAX)
    iters = int(min(max_iters, max(min_iters, target_s / max(one, 1e-7))))
    times = np.empty((iters, len(fns)))
    for i in range(iters):
        order = range(len(fns)) if i % 2 == 0 else reversed(range(len(fns)))  # no position bias
        for j in order:
            fn = fns[j]
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            times[i, j] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    medians = np.median(times, axis=0)
    return float(medians[0]), (None if fn_b is None else float(medians[1]))


def run_collectives(sizes=None, collectives=COLLECTIVES, malloc_modes=("default", "tuned"),
                    algorithm: str | None = None, target_s: float = 0.3, report=print) -> dict:
    """Benchmark mpievo vs native collectives; returns ``{"rows": [...], "memcpy_GBps": x}``.

    Args:
        sizes: message sizes in bytes (default 4 KiB .. 256 MiB, doubling).
        collectives: which collectives to run.
        malloc_modes: "default" and/or "tuned" (tuned runs after default).
        algorithm: force one mpievo algorithm (default: automatic selection).
        report: called with each formatted line on rank 0.
    """
    sizes = DEFAULT_SIZES if sizes is None else list(sizes)
    comm = Communicator()
    native = MPI.COMM_WORLD.Dup()
    p, rank = comm.size, comm.rank
    out = {"nranks": p, "mpi": MPI.Get_library_version().splitlines()[0], "rows": []}
    memcpy = memcpy_bandwidth(min(max(sizes), 256 << 20)) if rank == 0 else 0.0
    out["memcpy_GBps"] = native.bcast(memcpy, root=0)
    say = report if rank == 0 else (lambda *_: None)
    say(f"# mpievo collectives benchmark: {p} ranks, {out['mpi']}")
    say(f"# single-core memcpy: {out['memcpy_GBps']:.2f} GB/s")
    for mode in malloc_modes:
        if mode == "tuned":
            native.Barrier()
            tune_malloc()
        elif mode != "default":
            raise ValueError(f"expected malloc mode 'default' or 'tuned', got {mode!r}")
        say(f"# malloc: {mode}")
        say(f"{'collective':<15}{'bytes':>11} {'algorithm':<19}{'mpievo ms':>11}{'busbw GB/s':>11}"
            f"{'native ms':>11}{'busbw GB/s':>11}{'ratio':>7}")
        for collective in collectives:
            for nbytes in sizes:
                row = _measure(comm, native, collective, nbytes, algorithm, target_s)
                row["malloc"] = mode
                out["rows"].append(row)
                say(f"{collective:<15}{row['bytes']:>11} {row['algorithm']:<19}{row['time_s'] * 1e3:>11.3f}"
                    f"{row['busbw'] / 1e9:>11.2f}{row['native_time_s'] * 1e3:>11.3f}"
                    f"{row['native_busbw'] / 1e9:>11.2f}{row['native_time_s'] / row['time_s']:>7.2f}")
    native.Free()
    comm.free()
    return out


def _measure(comm, native, collective, nbytes, algorithm, target_s) -> dict:
    if algorithm not in select.ALGORITHMS[collective]:
        algorithm = None  # a forced name this collective does not have (e.g. ring for broadcast)
    case = _Case(comm, native, collective, nbytes, algorithm)
    chosen = algorithm or comm._forced.get(collective) or select.choose(collective, case.nbytes, comm.size)
    t_ours, t_native = time_pair(native, case.ours, case.native, target_s=target_s)
    factor = busbw_factor(collective, comm.size)
    return {"collective": collective, "algorithm": chosen, "nranks": comm.size, "bytes": case.nbytes,
            "time_s": t_ours, "busbw": case.nbytes / t_ours * factor,
            "native_time_s": t_native, "native_busbw": case.nbytes / t_native * factor}


def calibrate(sizes=None, target_s: float = 0.15, report=print) -> dict:
    """Time every algorithm of every collective over ``sizes``; return selection rules.

    Returns:
        ``{"collectives": {name: {str(nranks): [[max_bytes, algorithm], ..., [None, alg]]}},
        "segment_bytes": .., "copy_segment_bytes": ..}`` for this rank count.
    """
    sizes = [256 << i for i in range(19)] if sizes is None else sorted(sizes)
    native = MPI.COMM_WORLD.Dup()
    say = report if native.Get_rank() == 0 else (lambda *_: None)
    segment = _calibrate_segment(native, target_s, say, "allreduce", "ring", "segment_bytes")
    copy_segment = _calibrate_segment(native, target_s, say, "allgather", "ring", "copy_segment_bytes")
    comm = Communicator(segment_bytes=segment, copy_segment_bytes=copy_segment)
    rules = {}
    for collective in COLLECTIVES:
        winners = []
        for nbytes in sizes:
            times = {}
            for algorithm in select.ALGORITHMS[collective]:
                case = _Case(comm, native, collective, nbytes, algorithm)
                times[algorithm] = time_call(native, case.ours, target_s=target_s)
            best = min(times, key=times.get)
            winners.append((nbytes, best))
            say(f"{collective:<15}{nbytes:>11} " + " ".join(f"{a}={t * 1e3:.4f}ms" for a, t in times.items())
                + f" -> {best}")
        rules[collective] = {str(comm.size): _merge_rules(winners)}
    native.Free()
    comm.free()
    return {"collectives": rules, "segment_bytes": segment, "copy_segment_bytes": copy_segment}


def _calibrate_segment(native, target_s, say, collective: str, algorithm: str, option: str) -> int:
    """Fastest pipeline segment for ``collective`` at 64 MiB."""
    times = {}
    for seg in (128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20):
        comm = Communicator(**{option: seg})
        case = _Case(comm, native, collective, 64 << 20, algorithm)
        times[seg] = time_call(native, case.ours, target_s=target_s)
        comm.free()
    best = min(times, key=times.get)
    say(f"{collective} {algorithm} segment: "
        + " ".join(f"{s >> 10}KiB={t * 1e3:.2f}ms" for s, t in times.items()) + f" -> {best}")
    return int(best)


def _merge_rules(winners) -> list:
    """[(size, algorithm)] ascending -> [[max_bytes, algorithm], ..., [None, last]].

    A lone winner between two runs of the same other algorithm is noise and is merged.
    """
    algs = [a for _, a in winners]
    for i in range(1, len(algs) - 1):
        if algs[i - 1] == algs[i + 1] != algs[i]:
            algs[i] = algs[i - 1]
    rules = []
    for i, (nbytes, alg) in enumerate(zip([s for s, _ in winners], algs)):
        if i + 1 < len(algs) and algs[i + 1] == alg:
            continue
        rules.append([nbytes, alg])
    rules[-1][0] = None
    return rules


def merge_tuning(table: dict, update: dict) -> dict:
    """Merge one rank count's calibration into a tuning table (returns a new dict)."""
    merged = json.loads(json.dumps(table)) if table else {"collectives": {}}
    for collective, per in update["collectives"].items():
        merged.setdefault("collectives", {}).setdefault(collective, {}).update(per)
    merged["segment_bytes"] = update["segment_bytes"]
    merged["copy_segment_bytes"] = update["copy_segment_bytes"]
    return merged
