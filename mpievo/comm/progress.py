"""Driving collectives: waits with timeouts, and non-blocking requests.

Each collective is a generator that posts MPI requests and yields a list of
:class:`Pending` requests whenever it must wait for all of them; it returns its
result through ``StopIteration``. :func:`run_blocking` drives one to completion;
:class:`Request` drives it step by step from ``test()``/``wait()`` (progress happens
inside those calls, as with MPI's own non-blocking collectives without a progress
thread).

Besides MPI requests, a blocking step may wait for a :class:`Poll`: a condition MPI
knows nothing of (a flag in a shared-memory window, mpievo.comm.shm.window). Polls are
tested in turn, spinning briefly and then yielding the core, so ranks that outnumber
the cores still let the rank they wait for run. (Non-blocking requests never wait
for polls: the shared-window algorithms serve blocking calls only.)
"""

from __future__ import annotations

import os
import time
from typing import Callable, Generator, NamedTuple

from mpi4py import MPI

from .errors import CollectiveTimeoutError

#: Busy-poll this many times before yielding the core: a tight poll is what MPI's own
#: Waitall does and is fastest with one rank per core; yielding keeps oversubscribed
#: runs (more ranks than cores) from starving the rank everyone is waiting for.
_SPIN_TESTS = 200


class Poll:
    """A condition to wait for that is not an MPI request; subclasses define ``Test()``.

    Attributes:
        spin: tests in a tight loop before the waiting rank starts yielding its core
            (0 where ranks outnumber cores: the rank being waited for needs the core).
    """

    spin = _SPIN_TESTS

    def Test(self) -> bool:  # noqa: N802 - the name MPI.Request uses, so both wait alike
        raise NotImplementedError


class Pending(NamedTuple):
    """An outstanding MPI request (or :class:`Poll`) and the peer it involves (for
    timeout messages)."""

    request: MPI.Request | Poll
    peer: int
    direction: str  # "from" (receive) or "to" (send)


Step = Generator[list, None, object]


def _pending_peers(pending: list[Pending]) -> list[tuple[str, int]]:
    peers = []
    for p in pending:
        if not p.request.Test():
            peers.append((p.direction, p.peer))
    return sorted(set(peers))


def wait_pending(pending: list[Pending], deadline: float | None, describe: Callable) -> None:
    """Wait for every request in ``pending``.

    Args:
        pending: requests to complete.
        deadline: ``time.monotonic()`` value after which to give up, or None.
        describe: ``describe(peers) -> Exception`` building the timeout error.

    Raises:
        CollectiveTimeoutError: (from ``describe``) when the deadline passes.
    """
    if isinstance(pending[0].request, Poll):
        _wait_polls(pending, deadline, describe)
        return
    requests = [p.request for p in pending]
    if deadline is None:
        MPI.Request.Waitall(requests)
        return
    tests = 0
    while not MPI.Request.Testall(requests):
        tests += 1
        if tests > _SPIN_TESTS:
            if time.monotonic() > deadline:
                raise describe(_pending_peers(pending))
            time.sleep(0 if tests < 10 * _SPIN_TESTS else 1e-4)


#: after spinning, yield the core this many times before sleeping between tests
_YIELDS = 2000
_SLEEP_S = 5e-5


def _wait_polls(pending: list[Pending], deadline: float | None, describe: Callable) -> None:
    """Wait for polls: spin ``spin`` tests, then yield the core, then sleep briefly."""
    left = [p for p in pending if not p.request.Test()]
    spin = left[0].request.spin if left else 0
    tests = 0
    while left:
        tests += 1
        if tests > spin:
            if deadline is not None and time.monotonic() > deadline:
                raise describe(sorted({(p.direction, p.peer) for p in left}))
            if tests < spin + _YIELDS:
                os.sched_yield()
            else:
                time.sleep(_SLEEP_S)
        left = [p for p in left if not p.request.Test()]


def deadline_for(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def timeout_error(operation: str, timeout: float, rank: int) -> Callable:
    return lambda peers: CollectiveTimeoutError(operation, timeout, rank, peers)


def run_blocking(step: Step, deadline: float | None, describe: Callable):
    """Drive the collective generator ``step`` to completion and return its result."""
    try:
        pending = next(step)
        while True:
            if pending:
                wait_pending(pending, deadline, describe)
            pending = step.send(None)
    except StopIteration as stop:
        return stop.value


class Request:
    """Handle of a non-blocking collective.

    ``test()`` advances it as far as possible without blocking and says whether it is
    done; ``wait()`` blocks until done and returns the result. Call one of them
    regularly: the collective makes progress only inside these calls.
    """

    def __init__(self, step: Step, operation: str, rank: int, timeout: float | None,
                 on_error: Callable[[BaseException], None]):
        self._step = step
        self._operation = operation
        self._rank = rank
        self._timeout = timeout
        self._deadline = deadline_for(timeout)
        self._on_error = on_error
        self._pending: list[Pending] | None = None
        self._done = False
        self._result = None
        self._advance(first=True)

    def _advance(self, first: bool = False) -> None:
        try:
            self._pending = next(self._step) if first else self._step.send(None)
            while not self._pending:
                self._pending = self._step.send(None)
        except StopIteration as stop:
            self._done, self._result, self._pending = True, stop.value, None

    def test(self) -> bool:
        """Make progress without blocking; return True once the collective completed."""
        while not self._done:
            if not MPI.Request.Testall([p.request for p in self._pending]):
                if self._deadline is not None and time.monotonic() > self._deadline:
                    self._fail(_pending_peers(self._pending))
                return False
            self._advance()
        return True

    def wait(self, timeout: float | None = None):
        """Block until the collective completes and return its result.

        Args:
            timeout: seconds from now; default: the timeout given when it started.

        Raises:
            CollectiveTimeoutError: the collective did not complete in time.
        """
        deadline = self._deadline if timeout is None else deadline_for(timeout)
        limit = self._timeout if timeout is None else timeout
        describe = timeout_error(self._operation, limit or 0.0, self._rank)
        while not self._done:
            try:
                wait_pending(self._pending, deadline, describe)
            except BaseException as err:
                self._on_error(err)
                raise
            self._advance()
        return self._result

    @property
    def done(self) -> bool:
        return self._done

    def _fail(self, peers) -> None:
        err = CollectiveTimeoutError(self._operation, self._timeout or 0.0, self._rank, peers)
        self._on_error(err)
        raise err


class ResultRequest:
    """A :class:`Request` whose ``wait()`` returns the user-facing result (e.g. the
    caller's array in its own shape) instead of the generator's value."""

    def __init__(self, request: Request, result):
        self._request, self._result = request, result

    def test(self) -> bool:
        return self._request.test()

    def wait(self, timeout: float | None = None):
        self._request.wait(timeout)
        return self._result

    @property
    def done(self) -> bool:
        return self._request.done
