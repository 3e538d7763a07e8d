"""What every collective driver shares: one communicator's private state and services.

All library traffic goes over ``mpi_comm.Dup()`` with tags drawn from a per-call
sequence number, so it can never match the user's messages nor another in-flight
mpievo collective. The core hands out ring contexts (tag, segment), counts traffic
by purpose, runs collective generators blocking or as requests under a timeout
(a timeout leaves messages in flight, so it breaks the communicator), checks call
signatures in validate mode, picks algorithms and builds wires over pools kept
between calls. It knows the node layout (mpievo.comm.nodes) and keeps the node's
shared window (mpievo.comm.shm.window), made on the first call that needs it.
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from . import selection
from .wire.device import make_wire
from .errors import CollectiveTimeoutError, CommunicatorBrokenError
from .native import FastPath
from .nodes import NodeLayout
from .progress import Pending, Request, ResultRequest, deadline_for, run_blocking, timeout_error, wait_pending
from .ring import RingContext
from .shm.buffers import SharedBuffers
from .shm.window import Arena, piece_bytes
from .staging import DeviceResources, StagingPool
from .validation import signature_steps
from .wire.host import HostWire, ScratchPool

_TAG_BASE, _TAG_SPAN = 100, 30000  # collective tags: _TAG_BASE + seq % _TAG_SPAN


def default_timeout() -> float | None:
    """Seconds from MPIEVO_COMM_TIMEOUT, or None (wait forever)."""
    value = os.environ.get("MPIEVO_COMM_TIMEOUT")
    if not value:
        return None
    timeout = float(value)
    if timeout <= 0:
        raise ValueError(f"expected MPIEVO_COMM_TIMEOUT > 0 seconds, got {value!r}")
    return timeout


def _segment_option(name: str, value, kind: str) -> int:
    if value is None:
        return selection.segment_bytes(kind)
    if int(value) < 1:
        raise ValueError(f"expected {name} >= 1, got {value}")
    return int(value)


class CommCore:
    """One communicator's state, shared by the facade, the drivers and the fast path.

    Args: as :class:`mpievo.comm.Communicator` (``mpi_comm`` is duplicated here).

    Attributes:
        comm: the private duplicate. rank, size: this rank and the rank count.
        traffic: bytes sent by purpose; ``purpose`` names the current one.
        seq: collectives started so far (their tags derive from it).
        broken: why the communicator became unusable, or None.
        pool: receive scratch of host wires and recursive doubling (slots 0-2).
        workspace: reduce-scatter work arrays (slot 0) and packed buckets (slot 1).
        forced: the algorithm forced by environment per collective, or None.
        layout: the node layout (which ranks share memory).
        fast: the direct native calls for small messages.
    """

    def __init__(self, mpi_comm: MPI.Intracomm, *, timeout: float | None, validate: bool,
                 segment_bytes: int | None, copy_segment_bytes: int | None, cuda_aware: bool | None,
                 shm_piece_bytes: int | None = None):
        self.comm = mpi_comm.Dup()
        self.comm.Set_name("mpievo")
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.validate = bool(validate)
        self.cuda_aware = cuda_aware
        self.traffic: dict[str, int] = {}
        self.purpose = "collective"
        self.seq = 0
        self.broken: str | None = None
        self.pool = ScratchPool()
        self.workspace = ScratchPool()
        self._staging: StagingPool | None = None      # compressed wires' slots, made on first use
        self._device: DeviceResources | None = None  # streams and pinned slots, made on first use
        # environment and tuning table are read once, here, not on every call
        self.forced = {name: selection.forced_algorithm(name) for name in selection.ALGORITHMS}
        self.segment_bytes = _segment_option("segment_bytes", segment_bytes, "reduce")
        self.copy_segment_bytes = _segment_option("copy_segment_bytes", copy_segment_bytes, "copy")
        self.shm_piece_bytes = _segment_option("shm_piece_bytes", shm_piece_bytes, "shm")
        self.layout = NodeLayout(self.comm)
        self._arena: Arena | None = None  # the node's shared window, made on first use
        self.shared = SharedBuffers()     # arrays made by shared_empty
        self.fast = FastPath(self)

    def free(self) -> None:
        """Release the private communicator, the node's window and every pool.

        A broken communicator keeps its window: freeing it synchronises the node, and
        a peer may never get there.
        """
        if self._arena is not None and self.broken is None:
            self._arena.free()
        if self.broken is None:
            self.shared.free()
        self._arena = None
        self.layout.free()
        if self.comm != MPI.COMM_NULL:
            self.comm.Free()
        self.pool.clear()
        self.workspace.clear()
        for keeper in (self._device, self._staging):
            if keeper is not None:
                keeper.clear()

    def set_timeout(self, timeout: float | None) -> None:
        """Change the default timeout (None: wait forever)."""
        self.timeout = None if timeout is None else float(timeout)
        self.fast.refresh()

    # ------------------------------------------------------------ bookkeeping
    def count(self, nbytes: int) -> None:
        """Add ``nbytes`` sent to the current purpose."""
        self.traffic[self.purpose] = self.traffic.get(self.purpose, 0) + int(nbytes)

    def check_usable(self) -> None:
        if self.broken is not None:
            raise CommunicatorBrokenError(
                f"communicator unusable: {self.broken}; create a new Communicator")

    def context(self, itemsize: int, copy_only: bool = False) -> RingContext:
        """A new collective's ring context: the next tag, and segments of ``itemsize``
        elements (copy-only collectives use the copy segment)."""
        self.seq += 1
        seg_bytes = self.copy_segment_bytes if copy_only else self.segment_bytes
        seg = max(1, seg_bytes // max(1, itemsize))
        return RingContext(self.comm, self.rank, self.size, _TAG_BASE + self.seq % _TAG_SPAN, seg, self.count)

    def fail(self, err: BaseException) -> None:
        """A collective raised ``err``: a timeout leaves messages in flight, so it breaks the core."""
        if isinstance(err, CollectiveTimeoutError):
            self.broken = str(err)
            self.fast.refresh()

    def select(self, collective: str, algorithm: str | None, nbytes: int, *,
               variant: str | None = None, blocking: bool = True) -> str:
        """The host algorithm to run: per call, else forced by environment, else the table's.

        Raises:
            ValueError: an unknown algorithm; one that needs the shared window asked
                for a non-blocking call, or ``shm`` on several nodes.
        """
        requested = algorithm
        algorithm = algorithm or self.forced[collective] or "auto"
        selection.check_algorithm(collective, algorithm)
        if algorithm == "auto":
            algorithm = selection.choose(collective, nbytes, self.layout.key, variant=variant)
        elif algorithm == "shm" and not self.layout.single:
            raise ValueError(f"expected {collective} algorithm 'shm' only with every rank on one node, "
                             f"got {len(self.layout.nodes)} nodes (use 'hierarchical')")
        elif algorithm in selection.SHARED_WINDOW and not blocking and requested is not None:
            raise ValueError(f"expected a non-blocking {collective} algorithm other than "
                             f"{sorted(selection.SHARED_WINDOW)} (they are blocking only), got {algorithm!r}")
        if algorithm in selection.SHARED_WINDOW and not blocking:
            algorithm = selection.FALLBACK[collective]
        return algorithm

    def arena_steps(self):
        """(collective generator) The node's shared window. The first call makes it:
        a node barrier first, waited for under the call's timeout, so that a rank
        whose peers never come times out instead of hanging in the allocation."""
        if self._arena is None:
            layout = self.layout
            yield [Pending(layout.node.Ibarrier(), -1, "from")]
            self._arena = Arena(layout.node, layout.nodes[layout.node_index],
                                piece_bytes(self.shm_piece_bytes, layout.local_size))
        return self._arena

    def shared_empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised array in the node's shared memory (collective over the node;
        each rank its own shape)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        part = self.shared.allocate(self.layout.node, count * dtype.itemsize)
        return part.view(dtype).reshape(shape)

    def shared_sources_steps(self, src: np.ndarray):
        """(collective generator over the node) Every local rank's ``src`` as this rank
        sees it (read-only), when each is an array of one window made by
        :meth:`shared_empty`; None otherwise (then the collective copies inputs into its
        scratch window). Nothing is exchanged while no rank made a shared array."""
        views = yield from self.shared_views_steps([(src, False)])
        return views[0]

    def shared_views_steps(self, arrays):
        """(collective generator over the node) For each ``(array, writable)``: every
        local rank's array as this rank sees it, when each is an array of one window made
        by :meth:`shared_empty`, else None. One exchange for all of them; none while no
        rank made a shared array."""
        if not self.shared.count:      # equal on every rank: each allocation is collective
            return [None] * len(arrays)
        node = self.layout.node
        where = np.array([[*self.shared.locate(a, node.Get_rank()), a.size] for a, _ in arrays], np.int64)
        everyone = np.empty((node.Get_size(),) + where.shape, np.int64)
        yield [Pending(node.Iallgather([where, MPI.INT64_T], [everyone, MPI.INT64_T]), -1, "from")]
        found = []
        for i, (arr, writable) in enumerate(arrays):
            windows = set(everyone[:, i, 0].tolist())
            if len(windows) != 1 or -1 in windows:
                found.append(None)
                continue
            found.append([self.shared.view(int(w), q, int(offset), arr.dtype, int(n), writable=writable)
                          for q, (w, offset, n) in enumerate(everyone[:, i])])
        return found

    def signature_steps(self, kind: str, count: int, dtype, op, root: int, counts):
        """In validate mode, compare the call with every rank's (a collective generator)."""
        if self.validate:
            yield from signature_steps(self.comm, kind, count, dtype, op, root, counts)

    # ------------------------------------------------------------ running
    def execute(self, name: str, steps, timeout: float | None, blocking: bool, result):
        """Drive ``steps``: blocking returns ``result``; otherwise a request whose
        ``wait()`` returns it."""
        timeout = self.timeout if timeout is None else float(timeout)
        if not blocking:
            return ResultRequest(Request(steps, name, self.rank, timeout, self.fail), result)
        try:
            run_blocking(steps, deadline_for(timeout), timeout_error(name, timeout or 0.0, self.rank))
        except CollectiveTimeoutError as err:
            self.fail(err)
            raise
        return result

    def wait(self, name: str, pending: list, timeout: float | None) -> None:
        """Wait for posted requests (point-to-point, barrier) under a timeout."""
        timeout = self.timeout if timeout is None else float(timeout)
        try:
            wait_pending(pending, deadline_for(timeout), timeout_error(name, timeout or 0.0, self.rank))
        except CollectiveTimeoutError as err:
            self.fail(err)
            raise

    # ------------------------------------------------------------ wires
    def host_wire(self, dtype) -> HostWire:
        return HostWire(dtype, self.pool, self.workspace)

    def cast_wire(self, compression: str, dtype):
        """The fp16/bf16 wire for float32 ``dtype`` data (slots kept between calls)."""
        from .wire.cast import compression_wire  # lazy: its kernels import numba

        if self._staging is None:
            self._staging = StagingPool()
        return compression_wire(compression, dtype, self._staging)

    def device_wire(self, dtype):
        """DeviceWire or StagedWire by the ``cuda_aware`` option, else by detection."""
        if self._device is None:
            self._device = DeviceResources()
        return make_wire(dtype, self._device, aware=self.cuda_aware)
