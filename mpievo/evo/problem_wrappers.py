"""Problem wrappers: a fitness made from another one.

:class:`RowFitness` is one genome's fitness from a batch function.

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
    interpreter start plus the fitness module's imports and this package's (mpievo.evo:
    about 2 s on a loaded 2-core machine). The worker shares the rank's
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

#: how TimeLimitedFitness enforces its limit (see the module docstring)
TIME_LIMIT_METHODS = ("process", "signal")

LOGGER = logging.getLogger("mpievo.evo.problem_wrappers")


class RowFitness:
    """One genome's fitness from a batch function (picklable when the function is)."""

    def __init__(self, batch_function):
        self.batch_function = batch_function

    def __call__(self, genome) -> float:
        return float(np.asarray(self.batch_function(np.asarray(genome)[None, :])).reshape(-1)[0])


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
