"""OSU-style benchmarks of mpievo's collectives against the MPI library's own.

For each collective, (dtype, op) case and size: warm-up, then iterations each
started after a barrier, alternating mpievo's call and the native one; an
iteration's time is the maximum over ranks, and the reported time is the median
over iterations. Bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw
x factor (all-reduce 2(P-1)/P; reduce-scatter and all-gather (P-1)/P with bytes =
the full array; broadcast 1). After timing, both results (mpievo's and native's)
are checked against a numpy reference (``bench_verify``); a wrong one raises
``WrongResultError`` naming the case, on every rank.

Native MPI pays for large temporary allocations with glibc's default mmap
thresholds; ``malloc_modes=("default", "tuned")`` runs the sweep a second time
after ``mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=2**31 - 1)`` (mallopt takes an int:
2 GiB - 1 is its largest threshold), the same as
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``, so both are reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import time

import numpy as np
from mpi4py import MPI

from . import selection
from .bench_verify import REDUCING, Spec, WrongResultError, check_case, fill_unwritten, rank_input, verify
from .communicator import Communicator
from .native import NATIVE_TYPES, native_reduce_scatter_supports, native_supports

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast")
DEFAULT_SIZES = [4096 << i for i in range(17)]  # 4 KiB .. 256 MiB
#: (dtype, op) cases timed when none are given: float32 max/min time the NaN handling
DEFAULT_CASES = {
    "allreduce": (("float32", "sum"), ("float32", "max"), ("float32", "min"), ("int32", "sum")),
    "reduce_scatter": (("float32", "sum"),),
    "allgather": (("float32", None),),
    "broadcast": (("float32", None),),
}
TRIM_THRESHOLD = 2**31 - 1  # bytes; mallopt's value is an int
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_NATIVE_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


def busbw_factor(collective: str, nranks: int) -> float:
    if collective == "allreduce":
        return 2 * (nranks - 1) / nranks
    if collective in ("reduce_scatter", "allgather"):
        return (nranks - 1) / nranks
    return 1.0


def tune_malloc() -> bool:
    """Keep freed memory instead of returning it to the OS: ``mallopt(M_MMAP_MAX=0,
    M_TRIM_THRESHOLD=TRIM_THRESHOLD)``. Returns whether glibc accepted both."""
    path = ctypes.util.find_library("c")
    if path is None:
        return False
    libc = ctypes.CDLL(path)
    ok = libc.mallopt(_M_MMAP_MAX, 0) == 1
    return ok and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(TRIM_THRESHOLD)) == 1


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


def cases_for(collective: str, cases=None) -> list:
    """The (dtype, op) cases timed for ``collective``.

    Args:
        cases: None for DEFAULT_CASES, else (dtype, op) pairs: the reductions run
            each; all-gather and broadcast (copies) run once per dtype, op None.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"expected a collective in {COLLECTIVES}, got {collective!r}")
    if cases is None:
        return [check_case(dtype, op) for dtype, op in DEFAULT_CASES[collective]]
    checked = [check_case(dtype, op) for dtype, op in cases]
    if collective in REDUCING:
        return checked
    return [(dtype, None) for dtype in dict.fromkeys(dtype for dtype, _ in checked)]


class _Case:
    """Buffers, the two callables (mpievo, native) and the result check of one case.

    mpievo and native MPI write to separate outputs, so each timed result is checked.
    """

    def __init__(self, comm: Communicator, native: MPI.Intracomm, collective: str, nbytes: int,
                 dtype, op: str | None, algorithm: str | None):
        p, r = comm.size, comm.rank
        dtype = np.dtype(dtype)
        n = max(p, nbytes // dtype.itemsize)
        n -= n % p  # equal blocks, so the native calls need no counts
        block = n // p
        self.spec = Spec(collective, dtype, op, n, p)
        self.nbytes = n * dtype.itemsize
        self.offset = 0  # of this rank's output in the full result
        t, mpiop = NATIVE_TYPES[dtype], _NATIVE_OPS.get(op)
        if collective == "allreduce":
            send = rank_input(r, 0, n, dtype, op)
            self.outputs = ours, theirs = np.empty(n, dtype), np.empty(n, dtype)
            self.ours = lambda: comm.allreduce(send, ours, op, algorithm=algorithm)
            self.native = lambda: native.Allreduce([send, t], [theirs, t], mpiop)
        elif collective == "reduce_scatter":
            send = rank_input(r, 0, n, dtype, op)
            self.outputs = ours, theirs = np.empty(block, dtype), np.empty(block, dtype)
            self.offset = r * block
            self.ours = lambda: comm.reduce_scatter(send, ours, op, algorithm=algorithm)
            self.native = lambda: native.Reduce_scatter_block([send, t], [theirs, t], mpiop)
        elif collective == "allgather":
            send = rank_input(r, r * block, (r + 1) * block, dtype, None)
            self.outputs = ours, theirs = fill_unwritten(np.empty(n, dtype)), fill_unwritten(np.empty(n, dtype))
            counts = [block] * p
            self.ours = lambda: comm.allgather(send, ours, counts=counts, algorithm=algorithm)
            self.native = lambda: native.Allgather([send, t], [theirs, t])
        else:
            mine = rank_input(0, 0, n, dtype, None) if r == 0 else fill_unwritten(np.empty(n, dtype))
            self.outputs = ours, theirs = mine, mine.copy()
            self.ours = lambda: comm.broadcast(ours, 0, algorithm=algorithm)
            self.native = lambda: native.Bcast([theirs, t], 0)

    def problems(self, rank: int, with_native: bool = True) -> list[str]:
        """What is wrong with this rank's outputs (empty when both are right)."""
        found = []
        for who, got in zip(("mpievo", "native MPI"), self.outputs[:1 + with_native]):
            wrong = verify(self.spec, got, self.offset, native=who != "mpievo")
            if wrong:
                found.append(f"{who} result on rank {rank}: {wrong}")
        return found


def _check(native: MPI.Intracomm, case: _Case, where: str, with_native: bool = True) -> None:
    """Raise ``WrongResultError`` on every rank when any rank's result is wrong."""
    found = [p for per in native.allgather(case.problems(native.Get_rank(), with_native)) for p in per]
    if found:
        raise WrongResultError(f"{where}: " + "; ".join(found))


def _algorithm_used(comm: Communicator, collective: str, forced: str | None, nbytes: int,
                    dtype, op: str | None) -> str:
    """The algorithm mpievo runs: forced or from the table, then the communicator's fallback
    where the MPI library's reduction cannot give mpievo's result."""
    chosen = forced or selection.forced_algorithm(collective) or selection.choose(collective, nbytes, comm.size)
    if chosen == "native" and collective == "allreduce" and not native_supports(dtype, op):
        return "recursive_doubling"
    if chosen == "native" and collective == "reduce_scatter" and not native_reduce_scatter_supports(dtype, op):
        return "ring"
    return chosen


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
                    algorithm: str | None = None, target_s: float = 0.3, cases=None,
                    report=print) -> dict:
    """Benchmark mpievo vs native collectives; returns ``{"rows": [...], "memcpy_GBps": x}``.

    Args:
        sizes: message sizes in bytes (default 4 KiB .. 256 MiB, doubling).
        collectives: which collectives to run.
        malloc_modes: "default" and/or "tuned" (tuned runs after default).
        algorithm: force one mpievo algorithm (default: automatic selection).
        cases: (dtype, op) pairs (see ``cases_for``); None for DEFAULT_CASES.
        report: called with each formatted line on rank 0.

    Raises:
        WrongResultError: a timed result differs from the reference (every rank).
        RuntimeError: glibc refused the "tuned" malloc settings.
    """
    sizes = DEFAULT_SIZES if sizes is None else list(sizes)
    plan = [(collective, case) for collective in collectives for case in cases_for(collective, cases)]
    comm = Communicator()
    native = MPI.COMM_WORLD.Dup()
    try:
        return _run(comm, native, sizes, plan, malloc_modes, algorithm, target_s, report)
    finally:
        native.Free()
        comm.free()


def _run(comm, native, sizes, plan, malloc_modes, algorithm, target_s, report) -> dict:
    p, rank = comm.size, comm.rank
    out = {"nranks": p, "mpi": MPI.Get_library_version().strip("\x00 \n").splitlines()[0], "rows": []}
    memcpy = memcpy_bandwidth(min(max(sizes), 256 << 20)) if rank == 0 else 0.0
    out["memcpy_GBps"] = native.bcast(memcpy, root=0)
    say = report if rank == 0 else (lambda *_: None)
    say(f"# mpievo collectives benchmark: {p} ranks, {out['mpi']}")
    say(f"# single-core memcpy: {out['memcpy_GBps']:.2f} GB/s; every result checked against numpy")
    for mode in malloc_modes:
        if mode == "tuned":
            native.Barrier()
            if not tune_malloc():
                raise RuntimeError(f"expected glibc to accept mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD="
                                   f"{TRIM_THRESHOLD}) for malloc mode 'tuned', got a refusal")
        elif mode != "default":
            raise ValueError(f"expected malloc mode 'default' or 'tuned', got {mode!r}")
        say(f"# malloc: {mode}")
        say(f"{'collective':<15}{'dtype:op':<13}{'bytes':>11} {'algorithm':<19}{'mpievo ms':>11}"
            f"{'busbw GB/s':>11}{'native ms':>11}{'busbw GB/s':>11}{'ratio':>7}")
        for collective, (dtype, op) in plan:
            for nbytes in sizes:
                row = _measure(comm, native, collective, nbytes, dtype, op, algorithm, target_s, mode)
                out["rows"].append(row)
                say(_format_row(row))
    return out


def _format_row(row: dict) -> str:
    what = row["dtype"] if row["op"] is None else f"{row['dtype']}:{row['op']}"
    return (f"{row['collective']:<15}{what:<13}{row['bytes']:>11} {row['algorithm']:<19}"
            f"{row['time_s'] * 1e3:>11.3f}{row['busbw'] / 1e9:>11.2f}{row['native_time_s'] * 1e3:>11.3f}"
            f"{row['native_busbw'] / 1e9:>11.2f}{row['native_time_s'] / row['time_s']:>7.2f}")


def _measure(comm, native, collective, nbytes, dtype, op, algorithm, target_s, mode) -> dict:
    if algorithm not in selection.ALGORITHMS[collective]:
        algorithm = None  # a forced name this collective does not have (e.g. ring for broadcast)
    case = _Case(comm, native, collective, nbytes, dtype, op, algorithm)
    chosen = _algorithm_used(comm, collective, algorithm, case.nbytes, dtype, op)
    t_ours, t_native = time_pair(native, case.ours, case.native, target_s=target_s)
    _check(native, case, f"{case.spec.label()} ({chosen}, malloc {mode})")
    factor = busbw_factor(collective, comm.size)
    return {"collective": collective, "dtype": str(case.spec.dtype), "op": op, "algorithm": chosen,
            "nranks": comm.size, "bytes": case.nbytes, "malloc": mode,
            "time_s": t_ours, "busbw": case.nbytes / t_ours * factor,
            "native_time_s": t_native, "native_busbw": case.nbytes / t_native * factor}


def calibrate(sizes=None, target_s: float = 0.15, report=print) -> dict:
    """Time every algorithm of every collective over ``sizes`` (float32, sum for the
    reductions; every result checked); return selection rules.

    Returns:
        ``{"collectives": {name: {str(nranks): [[max_bytes, algorithm], ..., [None, alg]]}},
        "segment_bytes": .., "copy_segment_bytes": ..}`` for this rank count.

    Raises:
        WrongResultError: an algorithm returned a wrong result (every rank).
    """
    sizes = [256 << i for i in range(19)] if sizes is None else sorted(sizes)
    native = MPI.COMM_WORLD.Dup()
    try:
        return _calibrate(native, sizes, target_s, report)
    finally:
        native.Free()


def _calibrate(native, sizes, target_s, report) -> dict:
    say = report if native.Get_rank() == 0 else (lambda *_: None)
    segment = _calibrate_segment(native, target_s, say, "allreduce", "ring", "segment_bytes")
    copy_segment = _calibrate_segment(native, target_s, say, "allgather", "ring", "copy_segment_bytes")
    comm = Communicator(segment_bytes=segment, copy_segment_bytes=copy_segment)
    try:
        rules = {collective: {str(comm.size): _calibrate_rules(comm, native, collective, sizes, target_s, say)}
                 for collective in COLLECTIVES}
    finally:
        comm.free()
    return {"collectives": rules, "segment_bytes": segment, "copy_segment_bytes": copy_segment}


def _calibrate_rules(comm, native, collective, sizes, target_s, say) -> list:
    """The fastest algorithm of ``collective`` at each size, as selection rules."""
    winners = []
    for nbytes in sizes:
        times = {algorithm: _time_checked(comm, native, collective, nbytes, algorithm, target_s)
                 for algorithm in selection.ALGORITHMS[collective]}
        best = min(times, key=times.get)
        winners.append((nbytes, best))
        say(f"{collective:<15}{nbytes:>11} " + " ".join(f"{a}={t * 1e3:.4f}ms" for a, t in times.items())
            + f" -> {best}")
    return _merge_rules(winners)


def _time_checked(comm, native, collective: str, nbytes: int, algorithm: str, target_s: float) -> float:
    """Time mpievo's ``algorithm`` alone (float32; sum for reductions), then check its result."""
    dtype, op = cases_for(collective, [("float32", "sum")])[0]
    case = _Case(comm, native, collective, nbytes, dtype, op, algorithm)
    seconds = time_call(native, case.ours, target_s=target_s)
    _check(native, case, f"calibration {case.spec.label()} ({algorithm})", with_native=False)
    return seconds


def _calibrate_segment(native, target_s, say, collective: str, algorithm: str, option: str) -> int:
    """Fastest pipeline segment for ``collective`` at 64 MiB."""
    times = {}
    for seg in (128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20):
        comm = Communicator(**{option: seg})
        try:
            times[seg] = _time_checked(comm, native, collective, 64 << 20, algorithm, target_s)
        finally:
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
