"""The mpievo communicator: custom collectives over a private duplicate of a user's
MPI communicator.

A thin facade: each public method checks its call and hands it to the driver of its
collective (mpievo.comm.allreduce, .reduce_scatter, .allgather, .broadcast,
.buckets, .exchange, .objects) with the communicator's shared state
(:class:`mpievo.comm.core.CommCore`); the smallest host calls first try the direct
native path (:class:`mpievo.comm.native.FastPath`). Collective calls must be made in
the same order on every rank (as in MPI); ``validate=True`` checks that they match
and reports a mismatch instead of deadlocking.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from mpi4py import MPI

from . import allgather as allgather_driver
from . import allreduce as allreduce_driver
from . import broadcast as broadcast_driver
from . import buckets as buckets_driver
from . import exchange as exchange_driver
from . import objects
from . import reduce_scatter as reduce_scatter_driver
from .buckets import DEFAULT_BUCKET_BYTES
from .core import CommCore
from .progress import Request, ResultRequest
from .selection import ALGORITHMS


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
        cuda_aware: whether device buffers go to MPI directly (True) or are staged
            through pinned host memory (False); None: detected (``MPIEVO_CUDA_AWARE``,
            else ``MPIX_Query_cuda_support``).
        shm_piece_bytes: piece of the shared-memory algorithms (default:
            ``MPIEVO_SHM_PIECE_BYTES``, else the tuning table's).

    Buffers are C-contiguous numpy arrays (any shape; reduced element-wise) or
    device arrays. Pass ``recvbuf=sendbuf`` for in-place operation.
    """

    def __init__(self, mpi_comm: MPI.Intracomm | None = None, *, timeout: float | None = None,
                 validate: bool = False, segment_bytes: int | None = None,
                 copy_segment_bytes: int | None = None, cuda_aware: bool | None = None,
                 shm_piece_bytes: int | None = None):
        self.mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        if not isinstance(self.mpi_comm, MPI.Intracomm):
            raise TypeError(f"expected an mpi4py Intracomm, got {type(self.mpi_comm).__name__}")
        self._core = CommCore(self.mpi_comm, timeout=timeout, validate=validate,
                              segment_bytes=segment_bytes, copy_segment_bytes=copy_segment_bytes,
                              cuda_aware=cuda_aware, shm_piece_bytes=shm_piece_bytes)
        # the direct native calls, bound once: tiny calls are timed in fractions of a microsecond
        self._direct_allreduce = self._core.fast.allreduce
        self._direct_allgather = self._core.fast.allgather
        self._direct_reduce_scatter = self._core.fast.reduce_scatter
        self._direct_broadcast = self._core.fast.broadcast
        self.rank = self._core.rank
        self.size = self._core.size
        self.traffic: dict[str, int] = self._core.traffic

    # ------------------------------------------------------------------ basics
    @property
    def timeout(self) -> float | None:
        """Default timeout in seconds of every operation (None: wait forever)."""
        return self._core.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._core.set_timeout(value)

    @property
    def nodes(self) -> tuple[tuple[int, ...], ...]:
        """The ranks of each node (nodes ordered by their lowest rank), as the MPI
        library groups ranks that share memory (split further by ``MPIEVO_FAKE_NODES``)."""
        return self._core.layout.nodes

    def algorithm_for(self, collective: str, nbytes: int, dtype="float32", op: str | None = "sum", *,
                      algorithm: str | None = None, blocking: bool = True) -> str:
        """The host algorithm a call would run: ``algorithm`` if given, else forced by
        environment, else the tuning table's for this size, op and node layout; then
        the fallbacks the call applies (e.g. recursive doubling where the MPI library
        cannot reduce the dtype exactly).

        Args:
            collective: "allreduce", "reduce_scatter", "allgather" or "broadcast".
            nbytes: message bytes (all-gather: of the result).
            dtype, op: the call's (op is ignored by all-gather and broadcast).

        Raises:
            ValueError: unknown collective, or an algorithm the call would refuse.
        """
        core = self._core
        if collective == "allreduce":
            return allreduce_driver.resolve(core, nbytes, dtype, op, algorithm, blocking)
        if collective == "reduce_scatter":
            return reduce_scatter_driver.resolve(core, nbytes, dtype, op, algorithm, blocking)
        if collective not in ALGORITHMS:
            raise ValueError(f"expected a collective in {tuple(ALGORITHMS)}, got {collective!r}")
        return core.select(collective, algorithm, nbytes, blocking=blocking)

    @property
    def validate(self) -> bool:
        """Whether every collective first checks that all ranks called the same one."""
        return self._core.validate

    @property
    def broken(self) -> str | None:
        """Why the communicator became unusable (a timeout left messages in flight), or None."""
        return self._core.broken

    def shared_empty(self, shape, dtype="float32") -> np.ndarray:
        """An uninitialised array in the node's shared memory (collective: every rank
        calls it, each with its own shape). Pass such arrays (each rank its own) to the
        ``shm`` all-reduce and reduce-scatter and the peers reduce straight from them:
        no input is copied into the scratch window first. Valid until :meth:`free`."""
        return self._core.shared_empty(shape, dtype)

    def free(self) -> None:
        """Release the private communicator (the object is unusable afterwards).

        Collective: call it on every rank, in the same order as other collectives
        (releasing the node's shared window, once used, waits for the whole node).
        """
        self._core.free()

    @contextlib.contextmanager
    def purpose(self, name: str):
        """Attribute the bytes sent inside the block to ``name`` in ``traffic``."""
        core = self._core
        previous, core.purpose = core.purpose, str(name)
        try:
            yield self
        finally:
            core.purpose = previous

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
        if (recvbuf is not None and algorithm is None and timeout is None and compression is None
                and self._direct_allreduce(sendbuf, recvbuf, op)):
            return recvbuf
        return allreduce_driver.run(self._core, sendbuf, recvbuf, op, algorithm, timeout, compression, True)

    def iallreduce(self, sendbuf, recvbuf=None, op: str = "sum", *, algorithm: str | None = None,
                   timeout: float | None = None, compression: str | None = None) -> Request:
        """Non-blocking :meth:`allreduce`; ``wait()`` returns the result array."""
        return allreduce_driver.run(self._core, sendbuf, recvbuf, op, algorithm, timeout, compression, False)

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
        if (recvbuf is not None and counts is None and algorithm is None and timeout is None
                and self._direct_reduce_scatter(sendbuf, recvbuf, op)):
            return recvbuf
        return reduce_scatter_driver.run(self._core, sendbuf, recvbuf, op, counts, algorithm, timeout, True)

    def ireduce_scatter(self, sendbuf, recvbuf=None, op: str = "sum", *, counts=None,
                        algorithm: str | None = None, timeout: float | None = None) -> Request:
        """Non-blocking :meth:`reduce_scatter`."""
        return reduce_scatter_driver.run(self._core, sendbuf, recvbuf, op, counts, algorithm, timeout, False)

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
        if (algorithm is None and timeout is None and counts is not None
                and self._direct_allgather(sendbuf, recvbuf, counts)):
            return recvbuf
        return allgather_driver.run(self._core, sendbuf, recvbuf, counts, algorithm, timeout, True)

    def iallgather(self, sendbuf, recvbuf=None, *, counts=None, algorithm: str | None = None,
                   timeout: float | None = None) -> Request:
        """Non-blocking :meth:`allgather` (``counts`` required)."""
        if counts is None:
            raise ValueError("expected counts for iallgather (one per rank), got None")
        return allgather_driver.run(self._core, sendbuf, recvbuf, counts, algorithm, timeout, False)

    # ------------------------------------------------------------- broadcast
    def broadcast(self, buf, root: int = 0, *, algorithm: str | None = None,
                  timeout: float | None = None):
        """Copy ``buf`` from ``root`` to every rank, in place.

        Returns:
            ``buf``.
        """
        if algorithm is None and timeout is None and self._direct_broadcast(buf, root):
            return buf
        return broadcast_driver.run(self._core, buf, root, algorithm, timeout, True)

    def ibroadcast(self, buf, root: int = 0, *, algorithm: str | None = None,
                   timeout: float | None = None) -> Request:
        """Non-blocking :meth:`broadcast`."""
        return broadcast_driver.run(self._core, buf, root, algorithm, timeout, False)

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
        allreduce = functools.partial(self.allreduce, algorithm=algorithm, timeout=timeout,
                                      compression=compression)
        return buckets_driver.run(self._core, arrays, op, bucket_bytes, allreduce)

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
        exchange_driver.run(self._core, sends, recvs, timeout)

    # ---------------------------------------------------- control plane
    def barrier(self, *, timeout: float | None = None) -> None:
        """Wait until every rank reached the barrier (or time out)."""
        objects.barrier(self._core, timeout)

    def bcast_object(self, obj=None, root: int = 0):
        """Broadcast a picklable object from ``root`` (small control messages)."""
        return objects.bcast_object(self._core, obj, root)

    def allgather_object(self, obj) -> list:
        """Gather a picklable object from every rank on every rank (rank order)."""
        return objects.allgather_object(self._core, obj)

    def gather_object(self, obj, root: int = 0):
        """Gather a picklable object from every rank on ``root`` (None elsewhere)."""
        return objects.gather_object(self._core, obj, root)

    def send_object(self, obj, dest: int, *, timeout: float | None = None) -> None:
        """Send a picklable object to rank ``dest`` (point to point; see :meth:`recv_object`)."""
        objects.send_object(self._core, obj, dest, timeout)

    def isend_object(self, obj, dest: int, *, timeout: float | None = None) -> ResultRequest:
        """:meth:`send_object` without waiting: ``wait()`` (or ``test()``) the returned
        request; leave ``obj``'s arrays unchanged until it is done (their data is sent
        from their memory). A sender that must not stall on a busy receiver (a master
        feeding several workers) posts its message and goes on."""
        return objects.isend_object(self._core, obj, dest, timeout)

    def recv_object(self, source: int | None = None, *, timeout: float | None = None):
        """Receive the next object sent to this rank with :meth:`send_object` from
        ``source``, or from any rank when None; returns ``(sender, object)``."""
        return objects.recv_object(self._core, source, timeout)
