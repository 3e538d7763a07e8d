"""Fault handling: stop requests by signal, and wall-clock limits on fitness evaluations.

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
itself: SIGINT or SIGTERM to it becomes SIGUSR1 to ``mpiexec`` (see mpievo.launch).

Evaluation time limits
----------------------
``TimeLimitedFitness`` evaluates a user fitness with a wall-clock limit; an evaluation
past the limit counts as failed (``worst``, +inf for minimisation), is logged and
counted. Two methods, because Python code cannot be stopped safely from another thread:

``method="process"`` (default)
    Each evaluation runs in a persistent worker process started with the ``spawn``
    method (fork + exec: no copy of the parent's MPI state, which a plain ``fork()``
    after MPI_Init would share), with ``MPI4PY_RC_INITIALIZE=0`` so that the worker
    never initialises MPI even if the fitness module imports mpi4py. A late evaluation
    is stopped by killing the worker (a hard limit that also stops C code that ignores
    signals); the next evaluation starts a new one. Costs: the fitness and genomes must
    be picklable (a module-level function, or a callable object of one), each call pays
    a pipe round-trip (tens of microseconds), and a restart after a timeout pays an
    interpreter start plus the fitness module's imports. The worker shares the rank's
    CPU binding.

``method="signal"``
    ``setitimer(ITIMER_REAL)`` + SIGALRM raises an exception inside the fitness in the
    main thread. No process, no pickling, microseconds of overhead; but the limit is
    soft for C code (a long numpy or compiled call finishes before Python sees the
    signal), the fitness's own state may be left half-updated, only the main thread
    may use it, and nothing else in the process may use SIGALRM. The exception derives
    from BaseException so that ``except Exception`` in user code does not swallow it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from . import early_signals

#: exit status of a run that checkpointed because a stop was requested (Slurm requeues it)
EXIT_CHECKPOINTED_REQUEUE = 85
#: signals that request a checkpoint-and-stop by default
DEFAULT_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
#: ``mpievo run``'s: Ctrl-C too; a second SIGINT or SIGTERM aborts at once
RUN_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
RUN_ABORT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: how TimeLimitedFitness enforces its limit (see the module docstring)
TIME_LIMIT_METHODS = ("process", "signal")

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


# ---------------------------------------------------------------- evaluation time limits


class EvaluationError(RuntimeError):
    """The fitness raised an exception inside the worker process (its traceback included)."""


class _EvaluationTimedOut(BaseException):
    """Raised by SIGALRM inside a fitness call (BaseException: user `except Exception` lets it pass)."""


class TimeLimitedFitness:
    """A fitness function with a wall-clock limit per evaluation.

    Args:
        fitness: the user's callable ``fitness(genome) -> value``.
        seconds: the limit per evaluation (> 0).
        method: "process" (hard limit, separate process) or "signal" (SIGALRM in the main
            thread); see the module docstring for the trade-off.
        worst: the value an evaluation that ran out of time (or whose worker died) gets.
        startup_timeout: seconds to wait for a new worker process to start ("process").

    Raises:
        ValueError: a non-positive limit or an unknown method.
        TypeError: ``method="process"`` with a fitness that cannot be pickled.
    """

    def __init__(self, fitness: Callable[[Any], Any], seconds: float, *, method: str = "process",
                 worst: Any = math.inf, startup_timeout: float = 120.0):
        if not (isinstance(seconds, (int, float)) and seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"expected a finite time limit > 0 seconds, got {seconds!r}")
        if method not in TIME_LIMIT_METHODS:
            raise ValueError(f"expected method among {TIME_LIMIT_METHODS}, got {method!r}")
        self.fitness = fitness
        self.seconds = float(seconds)
        self.method = method
        self.worst = worst
        self.evaluations = 0
        self.timeouts = 0
        self.crashes = 0
        self._worker = _WorkerProcess(fitness, startup_timeout) if method == "process" else None

    @property
    def failures(self) -> int:
        """Evaluations that got ``worst``: timeouts plus worker crashes."""
        return self.timeouts + self.crashes

    def __call__(self, genome: Any) -> Any:
        """Evaluate one genome within the limit; ``worst`` when it ran out of time.

        Raises:
            EvaluationError: the fitness raised ("process"; "signal" re-raises the original).
        """
        self.evaluations += 1
        if self._worker is None:
            status, value = _evaluate_with_alarm(self.fitness, genome, self.seconds)
        else:
            status, value = self._worker.evaluate(genome, self.seconds)
        if status == "ok":
            return value
        if status == "timeout":
            self.timeouts += 1
            LOGGER.warning("evaluation exceeded its %.3g s limit; counted as failed with fitness %r "
                           "(%d timeouts so far)", self.seconds, self.worst, self.timeouts)
        else:
            self.crashes += 1
            LOGGER.warning("evaluation worker died (%s); counted as failed with fitness %r", value, self.worst)
        return self.worst

    def evaluate_many(self, genomes: Iterable[Any]) -> np.ndarray:
        """Evaluate each genome (e.g. each row of a population matrix) within the limit."""
        return np.asarray([self(genome) for genome in genomes])

    def close(self) -> None:
        """Stop the worker process, if any."""
        if self._worker is not None:
            self._worker.stop()

    def __enter__(self) -> "TimeLimitedFitness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _evaluate_with_alarm(fitness: Callable, genome: Any, seconds: float) -> tuple[str, Any]:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("expected method='signal' evaluations in the main thread, got thread "
                           f"{threading.current_thread().name!r}; use method='process'")

    def on_alarm(signum, frame):
        raise _EvaluationTimedOut()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        # The timer is one-shot: once it fired it cannot fire again, so the outer
        # except also catches an alarm that lands after fitness returned but before the
        # timer was cleared.
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, seconds)
                value = fitness(genome)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _EvaluationTimedOut:
            return "timeout", None
        return "ok", value
    finally:
        signal.signal(signal.SIGALRM, previous)


class _WorkerProcess:
    """A spawned process evaluating ``fitness`` on genomes sent over a pipe."""

    def __init__(self, fitness: Callable, startup_timeout: float):
        try:
            pickle.dumps(fitness)
        except Exception as err:
            raise TypeError(
                f"expected a picklable fitness for method='process' (a module-level function), "
                f"got {fitness!r} ({err}); use method='signal' for this one") from None
        self.fitness = fitness
        self.startup_timeout = startup_timeout
        self.context = multiprocessing.get_context("spawn")
        self.process = None
        self.connection = None

    def evaluate(self, genome: Any, seconds: float) -> tuple[str, Any]:
        if self.process is None or not self.process.is_alive():
            self._start()
        try:
            self.connection.send(genome)
            if not self.connection.poll(seconds):
                self.stop()
                return "timeout", None
            tag, payload = self.connection.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self.process.exitcode if self.process is not None else None
            self.stop()
            return "crashed", f"exit code {code}"
        if tag == "error":
            raise EvaluationError(f"the fitness raised in the evaluation worker:\n{payload}")
        return "ok", payload

    def _start(self) -> None:
        self.stop()
        parent_end, child_end = self.context.Pipe()
        process = self.context.Process(target=_worker_main, args=(child_end, self.fitness),
                                       name="mpievo-evaluation-worker", daemon=True)
        with _environment(MPI4PY_RC_INITIALIZE="0"):
            process.start()
        child_end.close()
        self.process, self.connection = process, parent_end
        if not parent_end.poll(self.startup_timeout):
            self.stop()
            raise RuntimeError(f"expected the evaluation worker to start within {self.startup_timeout} s, "
                               "got no answer")
        try:
            parent_end.recv()
        except EOFError:
            code = process.exitcode
            self.stop()
            raise RuntimeError(f"the evaluation worker died while starting (exit code {code}); "
                               "is the fitness importable in a fresh interpreter?") from None

    def stop(self) -> None:
        if self.connection is not None:
            self.connection.close()
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
            if self.process.exitcode is not None:
                self.process.close()
        self.process = self.connection = None


def _worker_main(connection, fitness: Callable) -> None:
    """Body of the worker process: answer each genome with ("ok", value) or ("error", traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the worker ends
    connection.send(("ready", os.getpid()))
    while True:
        try:
            genome = connection.recv()
        except EOFError:
            return
        try:
            reply = ("ok", fitness(genome))
            connection.send(reply)
        except Exception as err:
            connection.send(("error", "".join(traceback.format_exception(err))))


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for a child started inside the block, then restore them."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
