"""OSU-style benchmarks of mpievo's collectives against the MPI library's own.

For each collective, (dtype, op) case and size: warm-up, then iterations each
started after a barrier, alternating mpievo's call and the native one; an
iteration's time is the maximum over ranks, and the reported time is the median
over iterations. Bandwidths follow nccl-tests: algbw = bytes / time, busbw = algbw
x factor (all-reduce 2(P-1)/P; reduce-scatter and all-gather (P-1)/P with bytes =
the full array; broadcast 1). After timing, both results (mpievo's and native's)
are checked against a numpy reference (``bench_verify``); a wrong one raises
``WrongResultError`` naming the case, on every rank. The single-core memcpy and the
shared-memory copy bandwidth (one rank copying another's window) are measured in the
same run, so busbw can be read against them (column ``x memcpy``).

Native MPI pays for large temporary allocations with glibc's default mmap
thresholds; ``malloc_modes=("default", "tuned")`` runs the sweep a second time
after ``mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=2**31 - 1)`` (mallopt takes an int:
2 GiB - 1 is its largest threshold), the same as
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``, so both are reported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

import numpy as np
from mpi4py import MPI

from ..comm import selection
from .checks import WrongResultError
from .collectives_verify import REDUCING, Spec, check_case, fill_unwritten, rank_input, verify
from ..comm.communicator import Communicator
from ..comm.native import NATIVE_TYPES

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


def shm_copy_bandwidth(comm: MPI.Intracomm, nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """GB/s of local rank 1 copying local rank 0's shared-window memory into its own
    (bytes / time, median of repeats; the slowest node), on every rank; 0.0 when no
    node has two ranks."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    seconds = 0.0
    if node.Get_size() > 1:
        win = MPI.Win.Allocate_shared(nbytes if node.Get_rank() == 0 else 0, 1, comm=node)
        win.Lock_all(MPI.MODE_NOCHECK)
        src = np.frombuffer(win.Shared_query(0)[0], np.uint8)
        if node.Get_rank() == 0:
            src.fill(1)
        win.Sync()
        node.Barrier()
        win.Sync()
        if node.Get_rank() == 1:
            dst = np.empty_like(src)
            np.copyto(dst, src)  # first touch of both, outside the timing
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                np.copyto(dst, src)
                times.append(time.perf_counter() - t0)
            seconds = float(np.median(times))
        win.Unlock_all()
        win.Free()
    node.Free()
    seconds = comm.allreduce(seconds, op=MPI.MAX)
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


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


class Case:
    """Buffers, the two callables (mpievo, native) and the result check of one case.

    mpievo and native MPI write to separate outputs, so each timed result is checked.
    """

    def __init__(self, comm: Communicator, native: MPI.Intracomm, collective: str, nbytes: int,
                 dtype, op: str | None, algorithm: str | None, shared=None, shared_outputs=None):
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
            send = _input(shared, rank_input(r, 0, n, dtype, op))
            if shared_outputs is None:
                self.outputs = ours, theirs = np.empty(n, dtype), np.empty(n, dtype)
            else:
                self.outputs = ours, theirs = _outputs(shared_outputs, n, dtype)
            self.ours = lambda: comm.allreduce(send, ours, op, algorithm=algorithm)
            self.native = lambda: native.Allreduce([send, t], [theirs, t], mpiop)
        elif collective == "reduce_scatter":
            send = _input(shared, rank_input(r, 0, n, dtype, op))
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


#: the collectives whose inputs ``shared`` puts in shared arrays (those that read peers' inputs)
SHARED_INPUTS = ("allreduce", "reduce_scatter")


def _input(shared, data: np.ndarray) -> np.ndarray:
    """``data`` where the collectives read it: as it is, or copied to the start of the
    ``shared`` array (``Communicator.shared_empty``), which both sides then read."""
    if shared is None:
        return data
    send = shared[:data.nbytes].view(data.dtype)
    send[:] = data
    return send


def _outputs(shared, n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Two outputs of ``n`` elements in the ``shared`` array (mpievo's, native's)."""
    half = shared.nbytes // 2
    return tuple(shared[k * half:k * half + n * dtype.itemsize].view(dtype) for k in range(2))


def check_outputs(native: MPI.Intracomm, case: Case, where: str, with_native: bool = True) -> None:
    """Raise ``WrongResultError`` on every rank when any rank's result is wrong."""
    found = [p for per in native.allgather(case.problems(native.Get_rank(), with_native)) for p in per]
    if found:
        raise WrongResultError(f"{where}: " + "; ".join(found))


def time_pair(comm: MPI.Intracomm, fn_a, fn_b, *, min_iters: int = 5, max_iters: int = 1000,
              target_s: float = 0.3, warmup: int = 3) -> tuple[float, float]:
    """Time ``fn_a`` and ``fn_b`` alternately (see :func:`time_alternating`)."""
    t_a, t_b = time_alternating(comm, [fn_a, fn_b], min_iters=min_iters, max_iters=max_iters,
                                target_s=target_s, warmup=warmup)
    return t_a, t_b


def time_alternating(comm: MPI.Intracomm, fns, *, min_iters: int = 5, max_iters: int = 1000,
                     target_s: float = 0.3, warmup: int = 3, quantile: float = 0.5) -> list[float]:
    """Time ``fns`` in interleaved rounds (so that drift in machine load affects all
    alike; each round starts at the next one, so none is always first); each: the
    ``quantile`` (default the median) over rounds of the maximum over ranks, in seconds."""
    best = [float("inf")] * len(fns)
    for _ in range(max(1, warmup)):
        for j, fn in enumerate(fns):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            best[j] = min(best[j], time.perf_counter() - t0)  # min: a descheduled warm-up must not shrink the sample
    one = comm.allreduce(sum(best), op=MPI.MAX)
    iters = int(min(max_iters, max(min_iters, target_s / max(one, 1e-7))))
    times = np.empty((iters, len(fns)))
    for i in range(iters):
        for j in [(i + k) % len(fns) for k in range(len(fns))]:
            comm.Barrier()
            t0 = time.perf_counter()
            fns[j]()
            times[i, j] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    return [float(t) for t in np.quantile(times, quantile, axis=0)]


def run_collectives(sizes=None, collectives=COLLECTIVES, malloc_modes=("default", "tuned"),
                    algorithm: str | None = None, target_s: float = 0.3, cases=None,
                    shared: bool = False, report=print) -> dict:
    """Benchmark mpievo vs native collectives; returns ``{"rows": [...], "memcpy_GBps": x}``.

    Args:
        sizes: message sizes in bytes (default 4 KiB .. 256 MiB, doubling).
        collectives: which collectives to run.
        malloc_modes: "default" and/or "tuned" (tuned runs after default).
        algorithm: force one mpievo algorithm (default: automatic selection).
        cases: (dtype, op) pairs (see ``cases_for``); None for DEFAULT_CASES.
        shared: all-reduce and reduce-scatter inputs in the node's shared memory
            (``Communicator.shared_empty``; the native call reads the same arrays);
            all-reduce then runs twice: outputs private, then outputs in shared
            arrays too (both sides), which the ``shm`` path writes directly (fused).
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
        pool = outputs = None
        if shared:
            pool = comm.shared_empty(max(sizes) + 64, np.uint8)
            outputs = comm.shared_empty(2 * (max(sizes) + 64), np.uint8)
        return _run(comm, native, sizes, plan, malloc_modes, algorithm, target_s, report, pool, outputs)
    finally:
        native.Free()
        comm.free()


def _run(comm, native, sizes, plan, malloc_modes, algorithm, target_s, report, pool, outputs) -> dict:
    p, rank = comm.size, comm.rank
    out = {"nranks": p, "mpi": MPI.Get_library_version().strip("\x00 \n").splitlines()[0], "rows": []}
    probe = min(max(sizes), 256 << 20)
    memcpy = memcpy_bandwidth(probe) if rank == 0 else 0.0
    out["memcpy_GBps"] = native.bcast(memcpy, root=0)
    out["shm_copy_GBps"] = shm_copy_bandwidth(native, probe)
    say = report if rank == 0 else (lambda *_: None)
    say(f"# mpievo collectives benchmark: {p} ranks on {len(comm.nodes)} node(s), {out['mpi']}"
        + ("; all-reduce and reduce-scatter inputs in shared arrays (both sides); all-reduce "
           "again with outputs in shared arrays too ('shared out')" if pool is not None else ""))
    say(f"# single-core memcpy: {out['memcpy_GBps']:.2f} GB/s; shared-memory copy (rank 1 from "
        f"rank 0's window): {out['shm_copy_GBps']:.2f} GB/s; every result checked against numpy")
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
            f"{'busbw GB/s':>11}{'native ms':>11}{'busbw GB/s':>11}{'ratio':>7}{'x memcpy':>9}")
        for collective, (dtype, op) in plan:
            for where in ([None, outputs] if outputs is not None and collective == "allreduce" else [None]):
                for nbytes in sizes:
                    row = _measure(comm, native, collective, nbytes, dtype, op, algorithm, target_s,
                                   mode, pool, where)
                    out["rows"].append(row)
                    say(_format_row(row, out["memcpy_GBps"]))
    return out


def _format_row(row: dict, memcpy_gbps: float) -> str:
    what = row["dtype"] if row["op"] is None else f"{row['dtype']}:{row['op']}"
    algorithm = row["algorithm"] + (" (shared out)" if row["outputs"] == "shared" else "")
    return (f"{row['collective']:<15}{what:<13}{row['bytes']:>11} {algorithm:<19}"
            f"{row['time_s'] * 1e3:>11.3f}{row['busbw'] / 1e9:>11.2f}{row['native_time_s'] * 1e3:>11.3f}"
            f"{row['native_busbw'] / 1e9:>11.2f}{row['native_time_s'] / row['time_s']:>7.2f}"
            f"{row['busbw'] / 1e9 / memcpy_gbps:>9.2f}")


def _measure(comm, native, collective, nbytes, dtype, op, algorithm, target_s, mode, pool=None,
             outputs=None) -> dict:
    if algorithm not in selection.ALGORITHMS[collective]:
        algorithm = None  # a forced name this collective does not have (e.g. ring for broadcast)
    case = Case(comm, native, collective, nbytes, dtype, op, algorithm, pool, outputs)
    chosen = comm.algorithm_for(collective, case.nbytes, dtype, op, algorithm=algorithm)
    t_ours, t_native = time_pair(native, case.ours, case.native, target_s=target_s)
    check_outputs(native, case, f"{case.spec.label()} ({chosen}, malloc {mode})")
    factor = busbw_factor(collective, comm.size)
    return {"collective": collective, "dtype": str(case.spec.dtype), "op": op, "algorithm": chosen,
            "nranks": comm.size, "bytes": case.nbytes, "malloc": mode,
            "inputs": "shared" if pool is not None and collective in SHARED_INPUTS else "private",
            "outputs": "private" if outputs is None else "shared",
            "time_s": t_ours, "busbw": case.nbytes / t_ours * factor,
            "native_time_s": t_native, "native_busbw": case.nbytes / t_native * factor}
