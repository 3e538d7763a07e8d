"""The engine's view of communication: :class:`EngineComm`, and :class:`SelfComm` (one rank).

``mpievo.parallel`` and ``mpievo.io`` need only these members, which
:class:`mpievo.comm.Communicator` provides over MPI and :class:`SelfComm` provides
for a single process without MPI (serial runs, tools, tests). Importing this module
does not import mpi4py.
"""

from __future__ import annotations

import contextlib
import pickle
from collections import deque
from typing import Any, Iterable, Protocol, runtime_checkable

import numpy as np

from mpievo.kernels import host

from .buffers import check_root, flat_host, host_output
from .pickles import message_bytes


@runtime_checkable
class EngineRequest(Protocol):
    """A non-blocking operation: advance with ``test()``, finish with ``wait()``."""

    @property
    def done(self) -> bool: ...

    def test(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Any: ...


@runtime_checkable
class EngineComm(Protocol):
    """What the layers above ``mpievo.comm`` use of a communicator."""

    rank: int
    size: int
    traffic: dict[str, int]  # bytes this rank sent, by purpose

    def purpose(self, name: str) -> contextlib.AbstractContextManager:
        """Attribute the bytes sent inside the block to ``name`` in ``traffic``."""

    def exchange(self, sends: Iterable = (), recvs: Iterable = (), *, timeout: float | None = None) -> None:
        """Send ``(dest, array)`` pairs and receive into ``(source, array)`` pairs, all at once."""

    def barrier(self, *, timeout: float | None = None) -> None:
        """Wait until every rank arrived."""

    def bcast_object(self, obj: Any = None, root: int = 0) -> Any:
        """``root``'s picklable object on every rank."""

    def gather_object(self, obj: Any, root: int = 0) -> list | None:
        """Every rank's object on ``root`` (rank order), None elsewhere."""

    def allgather_object(self, obj: Any) -> list:
        """Every rank's object on every rank (rank order)."""

    def iallreduce(self, sendbuf, recvbuf=None, op: str = "sum") -> EngineRequest:
        """Start an element-wise reduction over all ranks; ``wait()`` returns the result."""

    def send_object(self, obj: Any, dest: int) -> None:
        """Send a picklable object to rank ``dest`` (point to point)."""

    def isend_object(self, obj: Any, dest: int) -> EngineRequest:
        """Start sending a picklable object to rank ``dest``; done when it left this rank."""

    def recv_object(self, source: int | None = None) -> tuple[int, Any]:
        """``(sender, object)`` of the next :meth:`send_object` to this rank from
        ``source`` (None: from any rank)."""


#: the member names of EngineComm (what a duck-typed communicator must have)
ENGINE_COMM_MEMBERS = tuple(EngineComm.__annotations__) + tuple(
    name for name, value in vars(EngineComm).items() if callable(value) and not name.startswith("_"))


def missing_members(comm) -> list[str]:
    """The EngineComm members ``comm`` lacks (empty for a conforming object)."""
    return [name for name in ENGINE_COMM_MEMBERS if not hasattr(comm, name)]


class FinishedRequest:
    """A request that completed when it was made; ``wait()`` returns ``result``."""

    done = True

    def __init__(self, result):
        self._result = result

    def test(self) -> bool:
        return True

    def wait(self, timeout: float | None = None):
        return self._result


class SelfComm:
    """Rank 0 of 1, without MPI: every call returns what a single rank gets.

    Bytes "sent" to itself by :meth:`exchange` and the object calls are counted in
    ``traffic`` as a one-rank :class:`mpievo.comm.Communicator` counts them.

    Example::

        comm = SelfComm()
        comm.rank, comm.size, comm.bcast_object({"x": 1})     # (0, 1, {'x': 1})
    """

    rank = 0
    size = 1

    def __init__(self):
        self.traffic: dict[str, int] = {}
        self._purpose = "collective"
        self._messages: deque[bytes] = deque()   # pickles sent to itself, not yet received

    @contextlib.contextmanager
    def purpose(self, name: str):
        previous, self._purpose = self._purpose, str(name)
        try:
            yield self
        finally:
            self._purpose = previous

    def _count(self, nbytes: int) -> None:
        self.traffic[self._purpose] = self.traffic.get(self._purpose, 0) + int(nbytes)

    def exchange(self, sends=(), recvs=(), *, timeout: float | None = None) -> None:
        """Copy the i-th send to rank 0 into the i-th receive from rank 0 (bytes).

        Raises:
            ValueError: a peer other than 0, unmatched sends and receives, or a
                receive smaller than its send.
            TypeError: an array that is not a C-contiguous numpy array.
        """
        sends = [(check_root(dest, 1), flat_host(a, "send array").view(np.uint8)) for dest, a in sends]
        recvs = [(check_root(src, 1), flat_host(a, "receive array", writable=True).view(np.uint8))
                 for src, a in recvs]
        if len(sends) != len(recvs):
            raise ValueError(f"expected as many receives from rank 0 as sends to it, "
                             f"got {len(sends)} sends and {len(recvs)} receives")
        for (_, out), (_, into) in zip(sends, recvs):
            if into.size < out.size:
                raise ValueError(f"expected a receive array of at least {out.size} bytes, got {into.size}")
            into[:out.size] = out
            self._count(out.size)

    def barrier(self, *, timeout: float | None = None) -> None:
        """Nothing to wait for."""

    def bcast_object(self, obj: Any = None, root: int = 0) -> Any:
        check_root(root, 1)
        self._count(0)
        return obj

    def gather_object(self, obj: Any, root: int = 0) -> list:
        check_root(root, 1)
        self._count(0)
        return [obj]

    def allgather_object(self, obj: Any) -> list:
        self._count(0)
        return [obj]

    def iallreduce(self, sendbuf, recvbuf=None, op: str = "sum") -> FinishedRequest:
        """The reduction over one rank: ``recvbuf`` (or a new array) holds ``sendbuf``."""
        src = flat_host(sendbuf, "sendbuf")
        host.check_reducible(src.dtype, op)
        result, dst = host_output(sendbuf, recvbuf, src)
        if dst is not src:
            np.copyto(dst, src)
        return FinishedRequest(result)

    def send_object(self, obj: Any, dest: int) -> None:
        """Queue a copy of ``obj`` (its pickle) for :meth:`recv_object`; counted as a
        Communicator counts it (:func:`~.pickles.message_bytes`)."""
        check_root(dest, 1)
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self._count(message_bytes(obj))
        self._messages.append(data)

    def isend_object(self, obj: Any, dest: int) -> FinishedRequest:
        """:meth:`send_object`, done when it returns (the pickle is queued)."""
        self.send_object(obj, dest)
        return FinishedRequest(None)

    def recv_object(self, source: int | None = None) -> tuple[int, Any]:
        """``(0, object)`` of the oldest object sent to itself.

        Raises:
            ValueError: nothing was sent (one rank alone would wait forever).
        """
        if source is not None:
            check_root(source, 1)
        if not self._messages:
            raise ValueError("expected an object sent to rank 0 before recv_object, got none")
        return 0, pickle.loads(self._messages.popleft())
