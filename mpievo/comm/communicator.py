"""The mpievo communicator: custom collectives over a private duplicate of a user's
MPI communicator.

All library traffic goes over ``mpi_comm.Dup()`` with tags drawn from a per-call
sequence number, so it can never match the user's messages nor another in-flight
mpievo collective. Collective calls must be made in the same order on every rank
(as in MPI); ``validate=True`` checks that they match and reports a mismatch
instead of deadlocking.
"""

from __future__ import annotations

import contextlib
import os
import pickle

import numpy as np
from mpi4py import MPI

from mpievo.kernels import host

from . import select
from .buffers import (check_counts, check_dtype, check_root, check_same, flat_host,
                      is_device_array)
from .errors import CollectiveMismatchError, CollectiveTimeoutError, CommunicatorBrokenError
from .progress import (Pending, Request, ResultRequest, deadline_for, run_blocking, timeout_error,
                       wait_pending)
from .ring import (RingContext, allgather_steps, allreduce_steps, chain_broadcast_steps,
                   displacements, even_counts, reduce_scatter_steps)
from .small import (NATIVE_OPS, NATIVE_TYPES, native_allgatherv_steps, native_allreduce_steps, native_bcast_steps,
                    native_reduce_scatter_steps, native_reduce_scatter_supports,
                    native_supports, recursive_doubling_steps)
from .wire import HostWire, ScratchPool

_TAG_BASE, _TAG_SPAN = 100, 30000  # collective tags: _TAG_BASE + seq % _TAG_SPAN
_EXCHANGE_TAG = 31000              # point-to-point buffers (exchange)
_MAX_MESSAGE_BYTES = 1 << 30       # exchange chunks larger arrays (MPI int counts)
_KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "barrier")
_OPS = (None, "sum", "prod", "max", "min", "mean")
DEFAULT_BUCKET_BYTES = 25 << 20    # like PyTorch DDP's bucket cap


def _segment_option(name: str, value, kind: str) -> int:
    if value is None:
        return select.segment_bytes(kind)
    if int(value) < 1:
        raise ValueError(f"expected {name} >= 1, got {value}")
    return int(value)


def default_timeout() -> float | None:
    """Seconds from MPIEVO_COMM_TIMEOUT, or None (wait forever)."""
    value = os.environ.get("MPIEVO_COMM_TIMEOUT")
    if not value:
        return None
    timeout = float(value)
    if timeout <= 0:
        raise ValueError(f"expected MPIEVO_COMM_TIMEOUT > 0 seconds, got {value!r}")
    return timeout


class Communicator:
    """Custom collectives on host (and device) buffers.

    Args:
        mpi_comm: an mpi4py intracommunicator (default ``MPI.COMM_WORLD``); it is
            duplicated, never used directly.
        timeout: default timeout in seconds for every operation (None: from
            ``MPIEVO_COMM_TIMEOUT``, else no timeout).
        validate: check before each collective that all ranks called the same
            operation with the same count, dtype, op and root.
        segment_bytes: pipeline segment of the reducing ring algorithms (default:
            ``MPIEVO_SEGMENT_BYTES``, else the tuning table's).
        copy_segment_bytes: segment of all-gather and chain broadcast (default:
            ``MPIEVO_COPY_SEGMENT_BYTES``, else the tuning table's).

    Buffers are C-contiguous numpy arrays (any shape; reduced element-wise) or
    device arrays. Pass ``recvbuf=sendbuf`` for in-place operation.
    """

    def __init__(self, mpi_comm: MPI.Intracomm | None = None, *, timeout: float | None = None,
                 validate: bool = False, segment_bytes: int | None = None,
                 copy_segment_bytes: int | None = None):
        self.mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if not isinstance(self.mpi_comm, MPI.Intracomm):
            raise TypeError(f"expected an mpi4py Intracomm, got {type(self.mpi_comm).__name__}")
        self._comm = self.mpi_comm.Dup()
        self._comm.Set_name("mpievo")
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.validate = bool(validate)
        self.traffic: dict[str, int] = {}
        self._purpose = "collective"
        self._seq = 0
        self._broken: str | None = None
        self._pool = ScratchPool()
        self._workspace = ScratchPool()
        self._device_resources = None  # streams and pinned slots, made on first device call
        self._staging = None           # compression staging slots, made on first use
        # environment and tuning table are read once, here, not on every call
        self._forced = {name: select.forced_algorithm(name) for name in select.ALGORITHMS}
        self._segment_bytes = _segment_option("segment_bytes", segment_bytes, "reduce")
        self._copy_segment_bytes = _segment_option("copy_segment_bytes", copy_segment_bytes, "copy")
        # direct native calls for small messages; all -1 once the communicator breaks
        self._fast_native_max = self._native_fast_limit("allreduce")
        self._fast_allgather_max = self._native_fast_limit("allgather")
        self._fast_broadcast_max = self._native_fast_limit("broadcast")
        self._ring_factor = 2 * (self.size - 1)  # bytes sent per byte reduced, times size

    # ------------------------------------------------------------------ basics
    def free(self) -> None:
        """Release the private communicator (the object is unusable afterwards)."""
        if self._comm != MPI.COMM_NULL:
            self._comm.Free()
        self._pool.clear()
        self._workspace.clear()
        for keeper in (self._device_resources, self._staging):
            if keeper is not None:
                keeper.clear()

    @contextlib.contextmanager
    def purpose(self, name: str):
        """Attribute the bytes sent inside the block to ``name`` in ``traffic``."""
        previous, self._purpose = self._purpose, str(name)
        try:
            yield self
        finally:
            self._purpose = previous

    def _count(self, nbytes: int) -> None:
        self.traffic[self._purpose] = self.traffic.get(self._purpose, 0) + int(nbytes)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise CommunicatorBrokenError(
                f"communicator unusable: {self._broken}; create a new Communicator")

    def _timeout_for(self, timeout):
        return self.timeout if timeout is None else float(timeout)

    def _context(self, itemsize: int, copy_only: bool = False) -> RingContext:
        self._seq += 1
        seg_bytes = self._copy_segment_bytes if copy_only else self._segment_bytes
        seg = max(1, seg_bytes // max(1, itemsize))
        return RingContext(self._comm, self.rank, self.size,
                           _TAG_BASE + self._seq % _TAG_SPAN, seg, self._count)

    def _on_error(self, err: BaseException) -> None:
        if isinstance(err, CollectiveTimeoutError):
            self._broken = str(err)
            self._fast_native_max = self._fast_allgather_max = self._fast_broadcast_max = -1

    def _execute(self, name: str, steps, timeout, blocking: bool, result):
        """Drive ``steps``: blocking returns ``result``; otherwise a request whose
        ``wait()`` returns it."""
        timeout = self._timeout_for(timeout)
        if not blocking:
            return ResultRequest(Request(steps, name, self.rank, timeout, self._on_error), result)
        try:
            run_blocking(steps, deadline_for(timeout), timeout_error(name, timeout or 0.0, self.rank))
        except CollectiveTimeoutError as err:
            self._on_error(err)
            raise
        return result

    def _native_fast_limit(self, collective: str) -> int:
        """Largest message (bytes) of ``collective`` that takes the direct native call, or -1.

        Small calls cost a few microseconds in the MPI library; the general path's
        Python bookkeeping would double or triple that, so calls the table sends to
        ``native`` (and that need neither timeout nor validation) go straight to MPI.
        """
        if self.size == 1 or self.validate or self.timeout is not None:
            return -1
        forced = self._forced[collective]
        if forced not in (None, "native"):
            return -1
        limit = -1
        for max_bytes, algorithm in select._rules(select.load_table(), collective, self.size):
            if algorithm != "native" and forced is None:
                break
            limit = (1 << 62) if max_bytes is None else max_bytes
        return limit

    def _select(self, collective: str, algorithm, nbytes: int) -> str:
        algorithm = algorithm or self._forced[collective] or "auto"
        select.check_algorithm(collective, algorithm)
        if algorithm == "auto":
            algorithm = select.choose(collective, nbytes, self.size)
        return algorithm

    # ---------------------------------------------------------- validate mode
    def _signature_steps(self, kind: str, count: int, dtype, op, root: int, counts):
        """Compare call signatures across ranks (validate mode)."""
        if not self.validate:
            return
        dtype_code = -1 if dtype is None else int.from_bytes(np.dtype(dtype).str.encode()[:8], "little")
        counts_code = -1 if counts is None else hash(tuple(counts)) & 0x7FFFFFFFFFFFFFFF
        mine = np.array([_KINDS.index(kind), count, dtype_code, _OPS.index(op), root, counts_code],
                        dtype=np.int64)
        table = np.empty((self.size, mine.size), dtype=np.int64)
        req = self._comm.Iallgather([mine, MPI.INT64_T], [table, MPI.INT64_T])
        yield [Pending(req, -1, "from")]
        ignore_count = kind == "allgather"  # each rank contributes its own count
        cols = [0, 2, 3, 4, 5] if ignore_count else list(range(mine.size))
        if not (table[:, cols] == table[0, cols]).all():
            rows = "; ".join(self._describe_signature(r, row) for r, row in enumerate(table))
            raise CollectiveMismatchError(f"expected every rank to call the same collective, got {rows}")

    @staticmethod
    def _describe_signature(rank: int, row) -> str:
        kind = _KINDS[row[0]] if 0 <= row[0] < len(_KINDS) else "?"
        dtype = "-" if row[2] == -1 else int(row[2]).to_bytes(8, "little").rstrip(b"\0").decode(errors="replace")
        op = _OPS[row[3]] if 0 <= row[3] < len(_OPS) else "?"
        return f"rank {rank}: {kind}(count={row[1]}, dtype={dtype}, op={op}, root={row[4]})"

    # --------------------------------------------------------------- wires
    def _host_wire(self, dtype) -> HostWire:
        return HostWire(dtype, self._pool)

    def _device(self):
        from . import device  # lazy: importing mpievo.comm never touches CUDA

        if self._device_resources is None:
            self._device_resources = device.DeviceResources()
        return device

    def _compressed_allreduce(self, sendbuf, recvbuf, op, compression, timeout, blocking):
        from . import compress

        if self._staging is None:
            self._staging = compress.StagingPool()
        return compress.allreduce(self, sendbuf, recvbuf, op, compression=compression,
                                  timeout=timeout, blocking=blocking, pool=self._staging)

    def _compression_applies(self, sendbuf, compression) -> bool:
        if compression is None:
            return False
        from . import compress

        if is_device_array(sendbuf):
            raise ValueError(f"expected compression=None for device buffers, got {compression!r} "
                             "(compressed wires are host-only)")
        return compress.applies_to(compression, getattr(sendbuf, "dtype", None))

    # ------------------------------------------------------------- allreduce
    def allreduce(self, sendbuf, recvbuf=None, op: str = "sum", *, algorithm: str | None = None,
                  timeout: float | None = None, compression: str | None = None):
        """Reduce ``sendbuf`` element-wise over all ranks; every rank gets the result.

        Args:
            sendbuf: this rank's contribution (C-contiguous array).
            recvbuf: where the result goes (same size and dtype); ``sendbuf`` itself
                for in place; None allocates one.
            op: "sum", "prod", "max", "min" or "mean" (mean: floating dtypes only).
            algorithm: "ring", "recursive_doubling", "native" or None/"auto" (by size).
            timeout: seconds (default: the communicator's).
            compression: None, "fp16" or "bf16": float32 data travels in 16 bits and
                is accumulated in float32 (ring only; other dtypes go uncompressed).

        Returns:
            The result array (``recvbuf``, or a new array shaped like ``sendbuf``).

        Raises:
            TypeError / ValueError: bad buffer, dtype, op, algorithm or sizes.
            CollectiveTimeoutError: not completed in time.
            CollectiveMismatchError: (validate mode) ranks called different collectives.
        """
        if self._compression_applies(sendbuf, compression):
            return self._compressed_allreduce(sendbuf, recvbuf, op, compression, timeout, True)
        if recvbuf is not None and algorithm is None and timeout is None and type(sendbuf) is np.ndarray:
            plan = _FAST_PLANS.get((sendbuf.dtype, op))
            nbytes = sendbuf.nbytes
            if (plan is not None and nbytes <= self._fast_native_max
                    and type(recvbuf) is np.ndarray and recvbuf.dtype is sendbuf.dtype):
                try:
                    self._comm.Allreduce(MPI.IN_PLACE if recvbuf is sendbuf else [sendbuf, plan[0]],
                                         [recvbuf, plan[0]], plan[1])
                except (BufferError, ValueError):
                    pass  # the general path below explains what is wrong with the buffers
                else:
                    self._seq += 1
                    traffic, purpose = self.traffic, self._purpose
                    traffic[purpose] = traffic.get(purpose, 0) + (nbytes * self._ring_factor) // self.size
                    return recvbuf
        return self._allreduce(sendbuf, recvbuf, op, algorithm, timeout, blocking=True)

    def iallreduce(self, sendbuf, recvbuf=None, op: str = "sum", *, algorithm: str | None = None,
                   timeout: float | None = None, compression: str | None = None) -> Request:
        """Non-blocking :meth:`allreduce`; ``wait()`` returns the result array."""
        if self._compression_applies(sendbuf, compression):
            return self._compressed_allreduce(sendbuf, recvbuf, op, compression, timeout, False)
        return self._allreduce(sendbuf, recvbuf, op, algorithm, timeout, blocking=False)

    def _allreduce(self, sendbuf, recvbuf, op, algorithm, timeout, blocking):
        self._check_usable()
        if is_device_array(sendbuf):
            return self._device().allreduce(self, sendbuf, recvbuf, op, algorithm, timeout, blocking)
        src = flat_host(sendbuf, "sendbuf")
        check_dtype(src.dtype, op)
        result, dst = self._output(sendbuf, recvbuf, src)
        algorithm = self._select("allreduce", algorithm, src.nbytes)
        if algorithm == "native" and not native_supports(src.dtype, op):
            algorithm = "recursive_doubling"
        steps = self._allreduce_steps(src, dst, op, algorithm, self._host_wire(src.dtype), blocking)
        return self._execute("allreduce", steps, timeout, blocking, result)

    def _output(self, sendbuf, recvbuf, src):
        if recvbuf is None:
            result = np.empty_like(sendbuf)
            return result, result.reshape(-1)
        if recvbuf is sendbuf:
            return sendbuf, src
        dst = flat_host(recvbuf, "recvbuf", writable=True)
        check_same("recvbuf", dst, src.size, src.dtype)
        return recvbuf, dst

    def _allreduce_steps(self, src, dst, op, algorithm, wire, blocking):
        yield from self._signature_steps("allreduce", src.size, src.dtype, op, 0, None)
        mean = op == "mean"
        if self.size == 1:
            if dst is not src:
                wire.store(dst, src)
            return dst
        ctx = self._context(wire.wire_dtype.itemsize)
        if algorithm == "native":
            self._count(2 * src.nbytes * (self.size - 1) // self.size)
            yield from native_allreduce_steps(self._comm, src, dst, op, mean=mean, blocking=blocking)
        elif algorithm == "recursive_doubling":
            scratch = self._pool.get(src.dtype, src.size, 2)
            self._count(src.nbytes * max(1, (self.size - 1).bit_length()))
            yield from recursive_doubling_steps(ctx, src, dst, op, scratch, mean=mean)
        else:
            counts = even_counts(src.size, self.size)
            yield from allreduce_steps(ctx, src, dst, counts, displacements(counts), op, wire, mean=mean)
        return dst

    # ------------------------------------------------------ count checking
    def _scatter_counts(self, total: int, counts) -> list[int]:
        """Per-rank block sizes of a reduce-scatter of ``total`` elements (host or device).

        Raises:
            ValueError: not one non-negative count per rank, or not summing to ``total``.
        """
        counts = even_counts(total, self.size) if counts is None else check_counts(counts, self.size)
        if sum(counts) != total:
            raise ValueError(f"expected counts summing to sendbuf's {total} elements, "
                             f"got {counts} (sum {sum(counts)})")
        return counts

    def _gather_counts(self, own: int, counts) -> list[int]:
        """Per-rank block sizes of an all-gather where this rank sends ``own`` elements.

        With ``counts`` None they are learned from every rank (one small exchange).

        Raises:
            ValueError: not one non-negative count per rank, or ``counts[rank] != own``.
        """
        if counts is None:
            counts = self.allgather_object(own) if self.size > 1 else [own]
        counts = check_counts(counts, self.size)
        if counts[self.rank] != own:
            raise ValueError(f"expected sendbuf with counts[{self.rank}] = {counts[self.rank]} "
                             f"elements, got {own}")
        return counts

    # -------------------------------------------------------- reduce_scatter
    def reduce_scatter(self, sendbuf, recvbuf=None, op: str = "sum", *, counts=None,
                       algorithm: str | None = None, timeout: float | None = None):
        """Reduce ``sendbuf`` over all ranks; rank r gets block r of the result.

        Args:
            sendbuf: full-length contribution (1-D view of a C-contiguous array).
            recvbuf: output of ``counts[rank]`` elements, or None to allocate.
            counts: elements per rank (default: split evenly, first ranks larger).

        Returns:
            This rank's block of the reduced array (1-D).
        """
        return self._reduce_scatter(sendbuf, recvbuf, op, counts, algorithm, timeout, True)

    def ireduce_scatter(self, sendbuf, recvbuf=None, op: str = "sum", *, counts=None,
                        algorithm: str | None = None, timeout: float | None = None) -> Request:
        """Non-blocking :meth:`reduce_scatter`."""
        return self._reduce_scatter(sendbuf, recvbuf, op, counts, algorithm, timeout, False)

    def _reduce_scatter(self, sendbuf, recvbuf, op, counts, algorithm, timeout, blocking):
        self._check_usable()
        if is_device_array(sendbuf):
            return self._device().reduce_scatter(self, sendbuf, recvbuf, op, counts, algorithm,
                                                 timeout, blocking)
        src = flat_host(sendbuf, "sendbuf")
        check_dtype(src.dtype, op)
        counts = self._scatter_counts(src.size, counts)
        mine = counts[self.rank]
        if recvbuf is None:
            recvbuf = np.empty(mine, dtype=src.dtype)
        dst = flat_host(recvbuf, "recvbuf", writable=True)
        check_same("recvbuf", dst, mine, src.dtype)
        algorithm = self._select("reduce_scatter", algorithm, src.nbytes)
        if algorithm == "native" and not native_reduce_scatter_supports(src.dtype, op):
            algorithm = "ring"
        steps = self._reduce_scatter_steps(src, dst, op, counts, algorithm, blocking)
        return self._execute("reduce_scatter", steps, timeout, blocking, recvbuf)

    def _reduce_scatter_steps(self, src, dst, op, counts, algorithm, blocking):
        yield from self._signature_steps("reduce_scatter", src.size, src.dtype, op, 0, counts)
        mean = op == "mean"
        if self.size == 1:
            np.copyto(dst, src)
            return dst
        ctx = self._context(src.dtype.itemsize)
        displs = displacements(counts)
        if algorithm == "native":
            self._count(src.nbytes - dst.nbytes)
            yield from native_reduce_scatter_steps(self._comm, src, dst, counts, op,
                                                   mean=mean, blocking=blocking)
            return dst
        work = self._workspace.get(src.dtype, src.size, 0)
        chunk = lambda c: dst if c == self.rank else work[displs[c]:displs[c] + counts[c]]  # noqa: E731
        yield from reduce_scatter_steps(ctx, src, chunk, counts, displs, op,
                                        self._host_wire(src.dtype), mean=mean)
        return dst

    # ------------------------------------------------------------- allgather
    def allgather(self, sendbuf, recvbuf=None, *, counts=None, algorithm: str | None = None,
                  timeout: float | None = None):
        """Concatenate every rank's ``sendbuf`` (in rank order) on every rank.

        Args:
            sendbuf: this rank's block (any length when ``counts`` is None).
            recvbuf: output of ``sum(counts)`` elements, or None to allocate (1-D).
            counts: elements per rank; None learns them with one small exchange.

        Returns:
            The gathered 1-D array.
        """
        if (algorithm is None and timeout is None and counts is not None and type(sendbuf) is np.ndarray
                and type(recvbuf) is np.ndarray and recvbuf.nbytes <= self._fast_allgather_max
                and recvbuf.dtype is sendbuf.dtype and len(counts) == self.size
                and counts.count(sendbuf.size) == self.size and recvbuf.size == sendbuf.size * self.size):
            try:
                self._comm.Allgather([sendbuf, MPI.BYTE], [recvbuf, MPI.BYTE])
            except (BufferError, ValueError):
                pass  # the general path below explains what is wrong with the buffers
            else:
                self._seq += 1
                self._count(sendbuf.nbytes * (self.size - 1))
                return recvbuf
        return self._allgather(sendbuf, recvbuf, counts, algorithm, timeout, True)

    def iallgather(self, sendbuf, recvbuf=None, *, counts=None, algorithm: str | None = None,
                   timeout: float | None = None) -> Request:
        """Non-blocking :meth:`allgather` (``counts`` required)."""
        if counts is None:
            raise ValueError("expected counts for iallgather (one per rank), got None")
        return self._allgather(sendbuf, recvbuf, counts, algorithm, timeout, False)

    def _allgather(self, sendbuf, recvbuf, counts, algorithm, timeout, blocking):
        self._check_usable()
        if is_device_array(sendbuf):
            return self._device().allgather(self, sendbuf, recvbuf, counts, algorithm, timeout, blocking)
        src = flat_host(sendbuf, "sendbuf")
        check_dtype(src.dtype, None)
        counts = self._gather_counts(src.size, counts)
        if recvbuf is None:
            recvbuf = np.empty(sum(counts), dtype=src.dtype)
        dst = flat_host(recvbuf, "recvbuf", writable=True)
        check_same("recvbuf", dst, sum(counts), src.dtype)
        algorithm = self._select("allgather", algorithm, dst.nbytes)
        steps = self._allgather_steps(src, dst, counts, algorithm, blocking)
        return self._execute("allgather", steps, timeout, blocking, recvbuf)

    def _allgather_steps(self, src, dst, counts, algorithm, blocking):
        yield from self._signature_steps("allgather", src.size, src.dtype, None, 0, counts)
        displs = displacements(counts)
        own = dst[displs[self.rank]:displs[self.rank] + counts[self.rank]]
        in_place = own.ctypes.data == src.ctypes.data and own.size == src.size
        if self.size == 1:
            if not in_place:
                np.copyto(own, src)
            return dst
        ctx = self._context(src.dtype.itemsize, copy_only=True)
        if algorithm == "native":
            self._count(src.nbytes * (self.size - 1))
            yield from native_allgatherv_steps(self._comm, None if in_place else src, dst,
                                               counts, displs, blocking=blocking)
            return dst
        chunk = lambda c: dst[displs[c]:displs[c] + counts[c]]  # noqa: E731
        steps = allgather_steps(ctx, chunk, counts, displs, self._host_wire(src.dtype),
                                first_src=None if in_place else src)
        pending = next(steps)  # first sends and receives are posted: copy our own block meanwhile
        if not in_place:
            np.copyto(own, src)
        while True:
            yield pending
            try:
                pending = steps.send(None)
            except StopIteration:
                return dst

    # ------------------------------------------------------------- broadcast
    def broadcast(self, buf, root: int = 0, *, algorithm: str | None = None,
                  timeout: float | None = None):
        """Copy ``buf`` from ``root`` to every rank, in place.

        Returns:
            ``buf``.
        """
        if (algorithm is None and timeout is None and type(buf) is np.ndarray
                and buf.nbytes <= self._fast_broadcast_max and type(root) is int and 0 <= root < self.size
                and buf.dtype in _BROADCAST_DTYPES):
            try:
                self._comm.Bcast([buf, MPI.BYTE], root)
            except (BufferError, ValueError):
                pass  # the general path below explains what is wrong with the buffer
            else:
                self._seq += 1
                if self.rank == root:
                    self._count(buf.nbytes * (self.size - 1))
                return buf
        return self._broadcast(buf, root, algorithm, timeout, True)

    def ibroadcast(self, buf, root: int = 0, *, algorithm: str | None = None,
                   timeout: float | None = None) -> Request:
        """Non-blocking :meth:`broadcast`."""
        return self._broadcast(buf, root, algorithm, timeout, False)

    def _broadcast(self, buf, root, algorithm, timeout, blocking):
        self._check_usable()
        root = check_root(root, self.size)
        if is_device_array(buf):
            return self._device().broadcast(self, buf, root, algorithm, timeout, blocking)
        flat = flat_host(buf, "buf", writable=self.rank != root)
        check_dtype(flat.dtype, None)
        algorithm = self._select("broadcast", algorithm, flat.nbytes)
        steps = self._broadcast_steps(flat, root, algorithm, self._host_wire(flat.dtype), blocking)
        return self._execute("broadcast", steps, timeout, blocking, buf)

    def _broadcast_steps(self, flat, root, algorithm, wire, blocking):
        yield from self._signature_steps("broadcast", flat.size, flat.dtype, None, root, None)
        if self.size == 1:
            return flat
        ctx = self._context(wire.wire_dtype.itemsize, copy_only=True)
        if algorithm == "native":
            if self.rank == root:
                self._count(flat.nbytes)
            yield from native_bcast_steps(self._comm, flat, root, blocking=blocking)
        else:
            yield from chain_broadcast_steps(ctx, flat, root, wire)
        return flat

    # ------------------------------------------------------------ bucketing
    def allreduce_buckets(self, arrays, op: str = "sum", *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                          algorithm: str | None = None, timeout: float | None = None,
                          compression: str | None = None) -> list:
        """All-reduce many arrays with one collective per dtype bucket, in place.

        Arrays of the same dtype are packed (in order) into buckets of at most
        ``bucket_bytes`` (an array larger than that gets its own), each bucket is
        reduced with one all-reduce, and the results are written back into the
        original arrays. Every rank must pass the same shapes and dtypes. With
        ``compression`` the float32 buckets travel compressed, the others as they are.

        Returns:
            ``arrays`` (reduced in place).
        """
        if bucket_bytes < 1:
            raise ValueError(f"expected bucket_bytes >= 1, got {bucket_bytes}")
        flats = [flat_host(a, f"arrays[{i}]", writable=True) for i, a in enumerate(arrays)]
        for flat in flats:
            check_dtype(flat.dtype, op)
        for members in _group_by_dtype(flats).values():
            for bucket in _buckets(members, flats, bucket_bytes):
                self._reduce_bucket([flats[i] for i in bucket], op, algorithm, timeout, compression)
        return arrays

    def _reduce_bucket(self, flats, op, algorithm, timeout, compression) -> None:
        options = dict(algorithm=algorithm, timeout=timeout, compression=compression)
        if len(flats) == 1:
            self.allreduce(flats[0], flats[0], op, **options)
            return
        total = sum(f.size for f in flats)
        packed = self._workspace.get(flats[0].dtype, total, 1)
        offset = 0
        for f in flats:
            packed[offset:offset + f.size] = f
            offset += f.size
        self.allreduce(packed, packed, op, **options)
        offset = 0
        for f in flats:
            f[...] = packed[offset:offset + f.size]
            offset += f.size

    # ---------------------------------------------------- point-to-point
    def exchange(self, sends=(), recvs=(), *, timeout: float | None = None) -> None:
        """Send and receive buffers with chosen peers, all at once, without pickling.

        Every send and receive is posted non-blocking before any wait, so ranks that
        all send large messages at the same time cannot deadlock. Messages between
        the same pair of ranks match in the order given. Arrays over 1 GiB travel in
        1 GiB pieces.

        Args:
            sends: ``(dest_rank, array)`` pairs.
            recvs: ``(source_rank, array)`` pairs; arrays preallocated with the size
                and dtype the sender sends.

        Raises:
            ValueError: a peer out of range. CollectiveTimeoutError: not done in time.
        """
        self._check_usable()
        pending = []
        for dest, arr in sends:
            flat = flat_host(arr, "send array").view(np.uint8)
            for piece in _pieces(flat):
                pending.append(Pending(self._comm.Isend([piece, MPI.BYTE], check_root(dest, self.size),
                                                        _EXCHANGE_TAG), dest, "to"))
            self._count(flat.nbytes)
        for source, arr in recvs:
            flat = flat_host(arr, "receive array", writable=True).view(np.uint8)
            for piece in _pieces(flat):
                pending.append(Pending(self._comm.Irecv([piece, MPI.BYTE], check_root(source, self.size),
                                                        _EXCHANGE_TAG), source, "from"))
        timeout = self._timeout_for(timeout)
        try:
            wait_pending(pending, deadline_for(timeout), timeout_error("exchange", timeout or 0.0, self.rank))
        except CollectiveTimeoutError as err:
            self._on_error(err)
            raise

    # ---------------------------------------------------- control plane
    def barrier(self, *, timeout: float | None = None) -> None:
        """Wait until every rank reached the barrier (or time out)."""
        self._check_usable()
        timeout = self._timeout_for(timeout)
        req = self._comm.Ibarrier()
        try:
            wait_pending([Pending(req, -1, "from")], deadline_for(timeout),
                         timeout_error("barrier", timeout or 0.0, self.rank))
        except CollectiveTimeoutError as err:
            self._on_error(err)
            raise

    def bcast_object(self, obj=None, root: int = 0):
        """Broadcast a picklable object from ``root`` (small control messages)."""
        root = check_root(root, self.size)
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self.rank == root else b""
        length = np.array([len(data)], dtype=np.int64)
        self._comm.Bcast([length, MPI.INT64_T], root)
        buf = np.frombuffer(data, dtype=np.uint8).copy() if self.rank == root else np.empty(int(length[0]), np.uint8)
        self._comm.Bcast([buf, MPI.BYTE], root)
        if self.rank == root:
            self._count(len(data) * (self.size - 1))
            return obj
        return pickle.loads(buf.tobytes())

    def allgather_object(self, obj) -> list:
        """Gather a picklable object from every rank on every rank (rank order)."""
        parts = self._gather_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), root=None)
        return [pickle.loads(p) for p in parts]

    def gather_object(self, obj, root: int = 0):
        """Gather a picklable object from every rank on ``root`` (None elsewhere)."""
        root = check_root(root, self.size)
        parts = self._gather_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), root=root)
        return None if parts is None else [pickle.loads(p) for p in parts]

    def _gather_bytes(self, data: bytes, root):
        lengths = np.empty(self.size, dtype=np.int64)
        self._comm.Allgather([np.array([len(data)], dtype=np.int64), MPI.INT64_T], [lengths, MPI.INT64_T])
        displs = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        mine = np.frombuffer(data, dtype=np.uint8)
        if root is None or self.rank == root:
            out = np.empty(int(lengths.sum()), dtype=np.uint8)
            spec = [out, (lengths.tolist(), displs), MPI.BYTE]
        else:
            out, spec = None, None
        if root is None:
            self._comm.Allgatherv([mine, MPI.BYTE], spec)
            self._count(len(data) * (self.size - 1))
        else:
            self._comm.Gatherv([mine, MPI.BYTE], spec, root)
            self._count(len(data) if self.rank != root else 0)
        if out is None:
            return None
        return [out[d:d + n].tobytes() for d, n in zip(displs, lengths.tolist())]


#: (dtype, op) pairs whose native all-reduce needs no NaN guard and no final division
_FAST_PLANS = {(dtype, op): (mpitype, NATIVE_OPS[op])
               for dtype, mpitype in NATIVE_TYPES.items()
               for op in ("sum", "prod", "max", "min")
               if (dtype.kind in "iu" or op in ("sum", "prod")) and native_supports(dtype, op)}


#: dtypes broadcast as raw bytes on the fast path (the general path checks the rest)
_BROADCAST_DTYPES = frozenset(host.SUPPORTED_DTYPES)


def _group_by_dtype(flats) -> dict:
    groups: dict = {}
    for i, flat in enumerate(flats):
        groups.setdefault(flat.dtype.str, []).append(i)
    return groups


def _buckets(members: list[int], flats, cap: int) -> list[list[int]]:
    """Split ``members`` (indices into ``flats``, in order) into buckets of <= ``cap`` bytes.

    An array larger than ``cap`` forms a bucket of its own.
    """
    buckets, current, size = [], [], 0
    for i in members:
        nbytes = flats[i].nbytes
        if current and size + nbytes > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def _pieces(flat: np.ndarray):
    if flat.nbytes <= _MAX_MESSAGE_BYTES:
        return [flat]
    return [flat[a:a + _MAX_MESSAGE_BYTES] for a in range(0, flat.nbytes, _MAX_MESSAGE_BYTES)]
