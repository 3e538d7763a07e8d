"""Pipelined evaluation: the next genome is made while this one is evaluated.

Evaluating a batch of model-sized children one at a time alternates two kinds of
work: *making* child ``i`` (materialising a delta or a recipe, or copying a dense row
into the model's buffer) and *using* it (the fitness: a forward pass). With two
genome buffers the two overlap: a helper thread makes child ``i + 1`` into one buffer
while the caller's thread evaluates child ``i`` in the other, so the evaluator waits
only when making a child takes longer than evaluating one (:func:`pipelined`).

The helper thread runs code that releases the GIL (Numba kernels compiled with
``nogil=True``, numpy and torch copies), and so does a forward pass (torch) or a
device evaluation (the host waits), so the two really run at once on two cores. The
helper is one core: its Numba kernels run on one thread (their results do not depend
on the count).
(A fitness that runs Numba parallel kernels itself needs a thread-safe Numba threading
layer, OpenMP or TBB, as the helper may run one at the same time.) The values are
those of making and using the children one after the other: the
same functions run on the same inputs, only on another thread. An exception raised
while making a child is raised again in the caller's thread (and so ends an MPI run
as any fitness error does), after the thread has stopped touching the buffers.

A problem offers pipelining by lending two genome buffers (``genome_blocks(dtype)``,
e.g. :meth:`mpievo.torch.ModelProblem.genome_blocks`): the encodings
(:mod:`mpievo.evo.genomes`) then materialise each child on the helper thread into
the buffer the model is not using. Plain problems need nothing of this: their
genomes are the rows themselves.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np

_LOCK = threading.Lock()
_EXECUTOR: ThreadPoolExecutor | None = None


def _one_numba_thread() -> None:
    """The helper is one core: its Numba parallel kernels run on one thread (Numba's count
    is per thread: the run's limit, ``run.blas_threads``, is the caller thread's only;
    with the default, all cores, OpenMP teams of every rank's helper oversubscribed the
    cores and slowed the forward passes 2.5x with 2 ranks on 2 cores)."""
    import numba

    numba.set_num_threads(1)


def _executor() -> ThreadPoolExecutor:
    """The process's one helper thread (made on first use; islands evaluate one at a time)."""
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mpievo-pipeline",
                                           initializer=_one_numba_thread)
        return _EXECUTOR


def pipelined(count: int, make: Callable[[int, int], None], use: Callable[[int, int], float]) -> np.ndarray:
    """``use(i, slot)`` for ``i`` in ``range(count)``, each after ``make(i, slot)``, with
    ``make(i + 1, ...)`` on a helper thread while ``use(i, ...)`` runs (module docstring).

    ``slot`` is ``i % 2``: the buffer child ``i`` is made into and used from; ``make``
    writes a slot only after the ``use`` of the child before in it has returned.

    Returns:
        the ``count`` values ``use`` returned, as float64.

    Raises:
        whatever ``make`` or ``use`` raised, in the caller's thread; the helper thread
        has finished its child by then (no buffer is written after this returns).

    Example::

        buffers = [np.empty(4), np.empty(4)]
        rows = np.arange(12.0).reshape(3, 4)
        values = pipelined(3, lambda i, s: np.copyto(buffers[s], rows[i]),
                           lambda i, s: float(buffers[s].sum()))       # [6., 22., 38.]
    """
    values = np.empty(count)
    if count <= 0:
        return values
    pool = _executor()
    pending: Future | None = pool.submit(make, 0, 0)
    try:
        for index in range(count):
            pending.result()                    # child `index` made (or its error raised here)
            pending = pool.submit(make, index + 1, (index + 1) % 2) if index + 1 < count else None
            values[index] = use(index, index % 2)
    finally:
        if pending is not None:                 # `use` raised: let the helper finish, then leave
            try:
                pending.result()
            except BaseException:               # noqa: BLE001 -- the caller's error is the one raised
                pass
    return values


# --- children bred where they are made ------------------------------------------------
#
# Breeding a batch of model-sized children is genome-sized work too. Where the island
# evaluates its own batch through a problem that pipelines (Island.step), the GA's
# one-pass half-precision breeding (mpievo.evo.half.HalfBreeding.breed) takes its draws
# at once but breeds each child's row only when it is made: on the helper thread, just
# before it is materialised (DeferredRows). The rows are the same bits (each child's
# counter-based draws are keyed by its index), and every row is bred before the
# algorithm or the archive reads the batch (settle).

_DEFER = threading.local()
_DEFERRED: dict[int, "DeferredRows"] = {}


class DeferredRows:
    """A batch of children whose rows are bred on demand by ``breed(i)`` (once each).

    Example::

        rows = np.zeros((3, 4))
        lazy = DeferredRows(rows, lambda i: rows[i].fill(i))
        lazy.ensure(1)                  # row 1 bred; rows 0 and 2 not yet
        lazy.settle()                   # every row bred
    """

    def __init__(self, rows: np.ndarray, breed: Callable[[int], None]):
        self.rows = rows
        self._breed = breed
        self._bred = np.zeros(rows.shape[0], bool)

    def ensure(self, index: int) -> None:
        """Row ``index`` bred (now, unless it already was)."""
        if not self._bred[index]:
            self._breed(index)
            self._bred[index] = True

    def settle(self) -> None:
        """Every row bred."""
        for index in range(len(self._bred)):
            self.ensure(index)


class deferring:
    """Within this block (one thread), breeding that can defer its rows does
    (:func:`may_defer`); on leaving, nothing is deferred any more. Island.step wraps
    its ``ask`` in it where its problem makes the children (``evaluates_deferred_rows``).

    Example::

        with deferring():
            rows = island.algorithm.ask(rng)        # rows bred on demand
        settle()                                    # ... or all of them now
    """

    def __enter__(self):
        _DEFER.on = True
        return self

    def __exit__(self, *exc):
        _DEFER.on = False
        return False


def may_defer() -> bool:
    """Whether breeding may defer its rows now (inside :class:`deferring`)."""
    return getattr(_DEFER, "on", False)


def defer(rows: np.ndarray, breed: Callable[[int], None]) -> None:
    """Register ``rows`` as bred on demand by ``breed(i)`` (:class:`DeferredRows`)."""
    _DEFERRED[rows.__array_interface__["data"][0]] = DeferredRows(rows, breed)


def deferred(rows) -> DeferredRows | None:
    """The :class:`DeferredRows` whose rows start where ``rows`` does (a batch or its
    first rows), else None."""
    if not _DEFERRED or not isinstance(rows, np.ndarray):
        return None
    lazy = _DEFERRED.get(rows.__array_interface__["data"][0])
    return lazy if lazy is not None and rows.shape[0] <= lazy.rows.shape[0] else None


def pipelined_rows(rows: np.ndarray, fill: Callable[[int, int], None],
                   use: Callable[[int, int], float]) -> np.ndarray:
    """:func:`pipelined` over the rows of a batch: ``fill(i, slot)`` makes row ``i``'s
    genome into buffer ``slot`` on the helper thread, after breeding the row there when
    it is deferred (:func:`deferred`).

    Example::

        values = pipelined_rows(rows, lambda i, s: np.copyto(buffers[s], rows[i]),
                                lambda i, s: float(buffers[s].sum()))
    """
    lazy = deferred(rows)

    def make(index: int, slot: int) -> None:
        if lazy is not None:
            lazy.ensure(index)
        fill(index, slot)

    return pipelined(rows.shape[0], make, use)


def settle_rows(rows) -> None:
    """Breed the deferred rows of ``rows`` (a batch evaluated without the pipeline)."""
    lazy = deferred(rows)
    if lazy is not None:
        lazy.settle()


def settle() -> None:
    """Breed every deferred row (before anything but the pipeline reads them)."""
    while _DEFERRED:
        _, lazy = _DEFERRED.popitem()
        lazy.settle()
