"""What the hybrid and master-worker schemes share: some ranks run an island model
(the *inner* :class:`~mpievo.parallel.scheme.IslandScheme`), the others only serve
its evaluations.

Reporting and checkpoints come from the inner scheme where there is one and are empty
elsewhere. Under :meth:`LedScheme.step` (hybrid) the ranks that hold islands release
the serving ranks after each generation with the scheme-level run state, so every rank
knows the generation and runs the run loop's collectives; master_worker overrides the
stepping (its workers serve the whole run, see :mod:`.master_worker`).

A subclass sets ``inner`` (None on serving ranks), ``problem``, ``engines``,
``n_islands``, ``comm``, ``generation = -1`` and ``_run_state = {}``, says what a
serving rank is called in errors (:attr:`serving_rank`) and, where it keeps this
stepping, how a serving rank serves (:meth:`_serve`) and how the holding rank
releases it (:meth:`_release`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..evo.genomes import row_dtype
from .scheme import BestMember, IslandRecord, IslandScheme, StepResult


class LedScheme:
    """Ranks with islands lead, the others serve (see the module docstring)."""

    name = IslandScheme.name     # the same checkpoints as the island model
    #: how errors name a serving rank (formatted with ``rank``)
    serving_rank = "rank {rank}"

    def _serve(self) -> Mapping:
        """A serving rank's part of a generation; returns the run state it was released with."""
        raise NotImplementedError

    def _release(self, run_state: Mapping) -> None:
        """The leading rank ends its servers' generation with ``run_state``."""
        raise NotImplementedError

    # ------------------------------------------------------------ evolution
    def initialize(self) -> None:
        self._synchronised(lambda: self.inner.initialize())

    def step(self) -> StepResult:
        if self.generation < 0:
            raise RuntimeError("expected initialize() or restore() before step(), got neither")
        return self._synchronised(lambda: self.inner.step()) or StepResult(self.generation)

    def _synchronised(self, work):
        """Leading ranks do ``work`` while the others serve; then every rank learns the run state."""
        if self.inner is None:
            self._adopt(self._serve())
            return None
        result = work()
        state = self.inner.run_state()
        self._release(state)
        self._adopt(state)
        return result

    def _adopt(self, run_state: Mapping) -> None:
        self._run_state = dict(run_state)
        self.generation = int(run_state["generation"])

    # ------------------------------------------------------------ reporting
    def records(self) -> list[IslandRecord]:
        return [] if self.inner is None else self.inner.records()

    def evaluations(self) -> int:
        return 0 if self.inner is None else self.inner.evaluations()

    def best_local(self) -> BestMember | None:
        return None if self.inner is None else self.inner.best_local()

    def reached(self, target: float) -> bool:
        return self.inner is not None and self.inner.reached(target)

    def genome_shape(self, island: int) -> tuple[int, np.dtype]:
        return self.problem.dim, row_dtype(self.problem, self.engines[island].dtype)

    # ------------------------------------------------------------ checkpoints
    def island_states(self) -> dict[int, dict]:
        return {} if self.inner is None else self.inner.island_states()

    def run_state(self) -> dict:
        return dict(self._run_state)

    def restore(self, island_states, run_state) -> None:
        """Leading ranks load their islands; serving ranks only the run state.

        Raises:
            ValueError: as :meth:`IslandScheme.restore`; island states given to a serving rank.
        """
        if self.inner is not None:
            self.inner.restore(island_states, run_state)
            self._adopt(self.inner.run_state())
            return
        if island_states:
            raise ValueError(f"expected no island states on {self.serving_rank.format(rank=self.comm.rank)}, "
                             f"got islands {sorted(island_states)}")
        for key, value in (("scheme", self.name), ("n_islands", self.n_islands)):
            if run_state.get(key) != value:
                raise ValueError(f"expected {key} = {value!r} in the saved run state, got {run_state.get(key)!r}")
        self._adopt(run_state)
