"""Fault handling: stop requests by signal.

Stop requests
-------------
``install_stop_handlers()`` makes SIGTERM and SIGUSR1 set a flag (nothing else happens in
the handler); ``mpievo run`` adds SIGINT, and gives SIGINT and SIGTERM their default
action back once a stop was requested, so that a second one ends the rank at once.
The run loop (``mpievo.parallel.runner.RunLoop``) reads the flag after every generation
and ORs it over all ranks with a non-blocking all-reduce that it completes after the
next generation: a signal may reach only some ranks, yet every rank
stops after the same generation, the one after the flag was read (a one-rank run stops
after the generation that read it). The ranks then write a checkpoint and ``mpievo run``
exits with ``EXIT_CHECKPOINTED_REQUEUE`` (85), which the Slurm requeue template turns
into a requeue. Which signal reaches the ranks depends on the launcher (measured with
Open MPI 5.0.11's ``mpiexec``): SIGUSR1 sent to ``mpiexec`` is forwarded to every rank,
the ranks checkpoint and ``mpiexec`` exits with 85; SIGTERM sent to ``mpiexec`` ends it
at once (exit 143, no checkpoint) and kills the ranks (in one trial it left them
running, orphaned). So signal ``mpiexec`` with SIGUSR1 (under Slurm:
``#SBATCH --signal=B:USR1@<seconds>`` and forward it from the batch script); SIGTERM
is for launchers that deliver it to the ranks themselves (``srun``, Slurm's own
end-of-time-limit SIGTERM to the tasks). ``mpievo launch`` does this translation
itself: SIGINT or SIGTERM to it becomes SIGUSR1 to ``mpiexec`` (see mpievo.launcher).

Wall-clock limits on fitness evaluations are a problem wrapper:
:class:`mpievo.evo.problem_wrappers.TimeLimitedFitness`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import Any, Iterable, Iterator

from . import early_signals

#: exit status of a run that checkpointed because a stop was requested (Slurm requeues it)
EXIT_CHECKPOINTED_REQUEUE = 85
#: signals that request a checkpoint-and-stop by default
DEFAULT_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: ``mpievo run``'s: Ctrl-C too; a second SIGINT or SIGTERM aborts at once
RUN_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
RUN_ABORT_SIGNALS = (signal.SIGINT, signal.SIGTERM)

LOGGER = logging.getLogger("mpievo.faults")


class StopRequest:
    """A flag set by a signal handler (or by ``request``), read by the run loop after every generation."""

    def __init__(self) -> None:
        self._signal: int | None = None
        self._requested = False
        self._previous: dict[int, Any] = {}
        self._abort_on_repeat: tuple[int, ...] = ()

    @property
    def requested(self) -> bool:
        """Whether a stop was requested on this rank."""
        return self._requested

    @property
    def signal_name(self) -> str | None:
        """Name of the signal that requested the stop (None: none, or requested by code)."""
        return None if self._signal is None else signal.Signals(self._signal).name

    def request(self, signum: int | None = None) -> None:
        """Request a stop (from code, e.g. a time budget, or from the handler)."""
        self._signal = signum
        self._requested = True

    def clear(self) -> None:
        """Forget a request (after the run acted on it)."""
        self._signal = None
        self._requested = False

    def handle(self, signum: int, frame: Any) -> None:
        """The signal handler: records the request; the abort-on-repeat signals get their
        default action back, so that a second one ends the process at once, even inside a
        long C call or a checkpoint write (an atomic write leaves the previous checkpoint
        whole)."""
        self.request(signum)
        for abort in self._abort_on_repeat:
            signal.signal(abort, signal.SIG_DFL)

    @contextlib.contextmanager
    def disarmed(self) -> Iterator[None]:
        """No abort on a repeated signal inside the block: the abort signals only record.

        For a run's last collectives: once one rank has ended with status 85, ``mpiexec``
        sends SIGTERM to the others, and a rank still finishing must take it as a repeat,
        not die of it (the job would end with 143). Every rank enters the block before the
        last collective, so none can have ended while another is outside it.
        """
        armed, self._abort_on_repeat = self._abort_on_repeat, ()
        for signum in armed:
            signal.signal(signum, self.handle)
        try:
            yield
        finally:
            self._abort_on_repeat = armed

    def restore(self) -> None:
        """Put back the handlers that ``install_stop_handlers`` replaced."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def __enter__(self) -> "StopRequest":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def install_stop_handlers(signals: Iterable[int] = DEFAULT_STOP_SIGNALS,
                          stop: StopRequest | None = None, *,
                          abort_on_repeat: Iterable[int] = ()) -> StopRequest:
    """Make ``signals`` set a stop flag instead of ending the process.

    Args:
        signals: the signals to catch (default SIGTERM and SIGUSR1).
        stop: the flag to set (default: a new one).
        abort_on_repeat: signals (among ``signals``) that end the process at once when
            they come after a stop was requested (a second Ctrl-C).

    Returns:
        the StopRequest; ``restore()`` (or leaving its ``with`` block) reinstates the
        previous handlers.

    Raises:
        RuntimeError: called from a thread other than the main thread (Python only
            allows handlers to be set there).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("expected install_stop_handlers to be called from the main thread, "
                           f"got thread {threading.current_thread().name!r}")
    stop = StopRequest() if stop is None else stop
    signals = tuple(signals)
    stray = [s for s in abort_on_repeat if s not in signals]
    if stray:
        raise ValueError(f"expected abort_on_repeat among the caught signals {signals}, got {stray}")
    stop._abort_on_repeat = tuple(abort_on_repeat)
    early = False
    for signum in signals:
        previous = signal.signal(signum, stop.handle)
        early = early or previous is early_signals.record
        stop._previous.setdefault(signum, previous)
    if early:      # signals that came while the program was still loading
        for signum in early_signals.received:
            stop.handle(signum, None)
        early_signals.received.clear()
    return stop
