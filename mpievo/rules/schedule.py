"""The migration schedule of a run: the topology and the interval rule (no MPI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .adaptive import AdaptiveInterval


@dataclass(frozen=True)
class MigrationSchedule:
    """When and along which edges islands migrate.

    Attributes:
        destinations: the topology, ``destinations(epoch) -> list[list[int]]`` (from
            :func:`mpievo.rules.topology.build_topology`, for the run's island count).
        interval: generations (rounds) between migrations (the first one with ``adaptive``).
        adaptive: rule for a diversity-driven interval, or None for a fixed one.
    """

    destinations: Callable[[int], list[list[int]]]
    interval: int = 10
    adaptive: AdaptiveInterval | None = None

    def __post_init__(self):
        if isinstance(self.interval, bool) or not isinstance(self.interval, int) or self.interval < 1:
            raise ValueError(f"expected a migration interval >= 1, got {self.interval!r}")
