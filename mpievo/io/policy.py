"""When to checkpoint: every N generations and/or every T seconds, decided alike on all ranks."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from .serial import resolve_comm


class Decision(NamedTuple):
    """What every rank does after a generation."""

    #: write a checkpoint now (due by a rule, or forced by a stop request)
    checkpoint: bool
    #: a stop was requested on some rank: checkpoint, then exit with EXIT_CHECKPOINTED_REQUEUE
    stop: bool


class CheckpointPolicy:
    """Decides at generation boundaries whether a checkpoint is due.

    The generation rule is deterministic, so every rank reaches the same answer alone.
    The time rule is not (clocks and progress differ), so ``due_everywhere`` lets rank
    0 decide and broadcasts its answer.

    Args:
        every_generations: checkpoint when the generation crosses a multiple of this
            (None: no generation rule).
        every_seconds: checkpoint when this much wall-clock time has passed since the
            last checkpoint (or since start) on rank 0 (None: no time rule).
        start_generation: the generation the run starts (or resumes) from.

    Raises:
        ValueError: a rule that is not positive.
    """

    def __init__(self, every_generations: int | None = None, every_seconds: float | None = None,
                 *, start_generation: int = 0):
        if every_generations is not None and (isinstance(every_generations, bool) or
                                              not isinstance(every_generations, int) or every_generations < 1):
            raise ValueError(f"expected every_generations to be None or an int >= 1, got {every_generations!r}")
        if every_seconds is not None and not (isinstance(every_seconds, (int, float)) and every_seconds > 0):
            raise ValueError(f"expected every_seconds to be None or a number > 0, got {every_seconds!r}")
        self.every_generations = every_generations
        self.every_seconds = None if every_seconds is None else float(every_seconds)
        self.last_generation = int(start_generation)
        self.last_time = time.monotonic()

    def due(self, generation: int, now: float | None = None) -> bool:
        """This rank's local answer: is a checkpoint due after ``generation``?

        Args:
            generation: the generation just completed.
            now: a time.monotonic() reading (default: now).
        """
        if generation <= self.last_generation:
            return False
        if self.every_generations is not None and (
                generation // self.every_generations > self.last_generation // self.every_generations):
            return True
        if self.every_seconds is not None:
            now = time.monotonic() if now is None else now
            return now - self.last_time >= self.every_seconds
        return False

    def due_everywhere(self, comm: Any, generation: int, now: float | None = None) -> bool:
        """The same answer on every rank. Collective when a time rule is set.

        Without a time rule no message is sent (the generation rule agrees by itself).
        """
        if self.every_seconds is None:
            return self.due(generation, now)
        comm = resolve_comm(comm)
        decision = self.due(generation, now) if comm.rank == 0 else None
        return bool(comm.bcast_object(decision, root=0))

    def agree(self, comm: Any, generation: int, stop_requested: bool = False,
              now: float | None = None) -> Decision:
        """One collective per generation deciding both checkpoint and stop, alike on all ranks.

        Each rank contributes its stop flag (a signal may reach only some ranks); rank 0
        contributes the checkpoint decision. A stop anywhere forces a checkpoint.

        Args:
            comm: an mpievo.comm.Communicator, or None for one rank.
            generation: the generation just completed.
            stop_requested: this rank's flag (``StopRequest.requested``).
            now: a time.monotonic() reading (default: now; only rank 0's matters).
        """
        comm = resolve_comm(comm)
        local_due = self.due(generation, now) if comm.rank == 0 else False
        votes = comm.allgather_object((bool(local_due), bool(stop_requested)))
        stop = any(flag for _, flag in votes)
        return Decision(checkpoint=bool(votes[0][0]) or stop, stop=stop)

    def mark_written(self, generation: int, now: float | None = None) -> None:
        """Record that a checkpoint was written after ``generation`` (call on every rank)."""
        self.last_generation = int(generation)
        self.last_time = time.monotonic() if now is None else now
