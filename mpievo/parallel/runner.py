"""The run loop: drive a :class:`~mpievo.parallel.scheme.Scheme` until a stop rule holds.

A run ends at the first of: ``generations`` reached, the scheme's budget spent
(``scheme.budget_generation``, alike on every rank; a split of the budget at a
migration may move it), the ``target`` fitness reached by some island, or a stop
request (``RunResult.stop_reason``: "generations", "budget", "target", "stopped"), or
a ``callback`` that says so at a log point ("callback").

Per generation every rank steps its islands (migrating when due). Every
``log_every`` generations the island records go to rank 0 (one gather: the global
best, totals, per-island logs, progress). When a stop flag is given, a target is
set or time-based checkpoints are on, the ranks vote with one non-blocking 24-byte
max-all-reduce of three int64 flags (this rank's stop flag, rank 0's "checkpoint
time is up", "an island here reached the target"), posted after each generation
and completed after the next one: a signal reaching any rank stops all of them
after the same generation, rank 0's clock makes all of them checkpoint at the same
generation, and a target reached anywhere ends the run everywhere, without the
ranks waiting for each other every generation. The vote takes effect one
generation after it is cast; on one rank the stop and checkpoint flags take effect
at once, the target flag one generation later as on several ranks, so that where a
run ends never depends on the rank count. On a stop a checkpointer saves the
islands and the loop returns with ``stopped=True``. Checkpoints are also written
every ``checkpoint_every`` generations and at the end. A checkpointer with
``background`` set (:class:`mpievo.io.Checkpointer`) writes the periodic ones in a
thread while the loop goes on (not with a served scheme, whose serving ranks join
checkpoints only when summoned); they become visible at the next log point where
every rank's file is written, and the next checkpoint, a stop and the end of the run
wait for them first. A ``callback`` is asked on
rank 0 at each log point after a generation, with the global best genome, and its
answer is broadcast: a True ends the run after that generation on every rank (no
vote, no delay), so where it ends does not depend on the rank count either.

A *served* scheme (master_worker) has ranks that hold no islands and only serve the
others' evaluations; it names the communicator of the ranks that run generations as
``scheme.loop_comm`` (None on a serving rank). The per-generation collectives (logs,
votes) then run over ``loop_comm`` only; a serving rank calls ``scheme.serve()`` for
the whole run, which returns when the loop calls ``scheme.summon(call)``: to join a
checkpoint (``{"kind": "checkpoint", "generation": g}``, every rank writes its file)
or to end the run (``{"kind": "finish", "reason": ...}``, every rank then returns the
same result). Its stop flag is not consulted: the loop's ranks decide. Such a scheme's
``step(ahead)`` may start the next generation's work while it runs this one, so the
loop passes ``ahead=False`` for a generation after which it saves, ends, or acts on a
vote, all of which it knows one generation in advance (votes act one generation after
they are cast, as on several ranks).

Nothing the loop does changes the islands: logging, checkpointing and stopping never
alter the result of a deterministic run.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from ..evo.moo.indicators import hypervolume, merged_front
from .scheme import IslandRecord, Scheme


@dataclass(frozen=True)
class RunSettings:
    """How long to run and how often to log and checkpoint.

    Attributes:
        generations: the last generation to run (a resumed run continues up to it);
            None: no limit, the scheme's budget ends the run.
        log_every: generations between record gathers (>= 1).
        checkpoint_every: generations between checkpoints (0: only at the end and on stop).
        checkpoint_seconds: wall-clock seconds between checkpoints, measured on rank 0
            (0: off); decided together with the stop vote, so it lands one generation
            after the time is up, at the same generation on every rank.
        target: stop once an island's best fitness is at least this good (user's
            sense: <= when minimising, >= when maximising), one generation after the
            generation that reached it; None: no target.
    """

    generations: int | None
    log_every: int = 10
    checkpoint_every: int = 0
    checkpoint_seconds: float = 0.0
    target: float | None = None

    def __post_init__(self):
        for name, minimum in (("generations", 0), ("log_every", 1), ("checkpoint_every", 0)):
            value = getattr(self, name)
            if name == "generations" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"expected {name} to be an int >= {minimum}, got {value!r}")
        seconds = self.checkpoint_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"expected checkpoint_seconds to be a number >= 0, got {seconds!r}")
        target = self.target
        if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                                   or not np.isfinite(target)):
            raise ValueError(f"expected target to be a finite number or None, got {target!r}")


@dataclass
class LogPoint:
    """What rank 0 knows at a log point (all islands)."""

    generation: int
    records: list[IslandRecord]          # every island, index order
    evaluations: int                     # total over islands
    migrations: int                      # migrations so far
    migrants_sent: int                   # migrants sent so far (all ranks)
    elapsed_s: float                     # since this run() started
    evaluations_this_run: int

    @property
    def best(self) -> IslandRecord:
        return min(self.records, key=lambda r: (r.best_internal, r.island))


@dataclass
class RunResult:
    """The outcome of :meth:`RunLoop.run` (genome and island list on rank 0 only)."""

    generations: int
    best_fitness: float
    best_island: int
    best_genome: np.ndarray | None
    evaluations: int
    evaluations_this_run: int
    wall_s: float
    evals_per_s: float
    bytes_sent: dict[str, int]
    islands: list[dict] = field(default_factory=list)
    migrations: int = 0
    stopped: bool = False
    checkpoints: list[str] = field(default_factory=list)
    stop_reason: str = "generations"    # "generations", "budget", "target", "stopped" or "callback"
    #: several objectives: the merged non-dominated set of all islands (:func:`merge_fronts`)
    front: dict | None = None


class Reporter(Protocol):
    """Rank 0's observer of a run (progress display, log files, summary)."""

    def on_log(self, point: LogPoint) -> None: ...

    def on_finish(self, result: RunResult) -> None: ...


class RunLoop:
    """Drives a scheme (see the module docstring).

    Args:
        comm: an mpievo Communicator.
        scheme: the :class:`Scheme`, initialised or restored or neither (then the loop
            initialises it).
        settings: :class:`RunSettings`.
        reporters: observers called on rank 0.
        checkpointer: an object with ``save(generation, islands, config=..., run_state=...)``
            (mpievo.io.Checkpointer), or None for no checkpoints.
        config: the effective config stored in checkpoints.
        stop: a flag object with a ``requested`` attribute (mpievo.faults.StopRequest), or None.
        extra_run_state: merged into the saved run state (e.g. elapsed time before a resume).
        decode: turns the best member's row into its whole genome on rank 0 (the
            encoded problem's ``decode`` for delta/seeded genomes); None: rows are genomes.
        callback: ``callback(point, genome) -> bool``, called on rank 0 at each log point
            after a generation with the :class:`LogPoint` and the best genome so far
            (whole); True ends the run there (stop reason "callback"). None: not asked.
    """

    def __init__(self, comm, scheme: Scheme, settings: RunSettings, *,
                 reporters: Sequence[Reporter] = (), checkpointer: Any = None,
                 config: Mapping[str, Any] | None = None, stop: Any = None,
                 extra_run_state: Mapping[str, Any] | None = None,
                 decode: Callable[[np.ndarray], np.ndarray] | None = None,
                 callback: Callable[[LogPoint, np.ndarray], bool] | None = None):
        self.comm = comm
        # the ranks of the per-generation collectives (None: this rank only serves)
        self.loop = getattr(scheme, "loop_comm", comm)
        self.served = self.loop is not comm
        self.decode = decode       # an encoded row -> its whole genome (delta/seeded genomes)
        self.scheme = scheme
        self.settings = settings
        self.reporters = list(reporters) if comm.rank == 0 else []
        self.checkpointer = checkpointer
        self.config = dict(config or {})
        self.stop = stop
        self.callback = callback
        self.extra_run_state = dict(extra_run_state or {})
        self._migrants_sent = 0
        self._checkpoints: list[str] = []
        self._last_saved = -1
        self._stop_vote = None     # (request, buffer) of the vote in flight
        self._reached = False      # one rank: the target flag cast one generation ago

    # ------------------------------------------------------------------ loop
    def run(self) -> RunResult:
        """Run until a stop rule holds (collective). Returns the result on every rank.

        Raises:
            ValueError: neither ``settings.generations`` nor a budget bounds the run.
        """
        last, bound = self._last_generation()
        start = self._start = self._last_save_time = time.perf_counter()
        self._evaluations_before = self._total_evaluations()
        if self.loop is None:
            return self._serve(start)
        if self.scheme.generation < 0:
            self.scheme.initialize()
        elif self.checkpointer is not None:
            self._last_saved = self.scheme.generation   # restored: that checkpoint exists
        self._log(self.scheme.generation)
        reason = bound
        while self.scheme.generation < last:
            step = self.scheme.step(ahead=self._may_run_ahead(last)) if self.served else self.scheme.step()
            if step.migration is not None:
                self._migrants_sent += step.migration.sent
            generation = step.generation
            # a budget split at a migration (run.leader_rate) moves the budget's round
            last, bound, reason = self._moved_end(bound, reason)
            logged = generation % self.settings.log_every == 0 or generation == last
            halted = logged and self._halted(self._log(generation))
            # a halt ends the run here: no vote is cast for the next generation
            stop_vote, time_due, reached = self._votes(generation if halted else last)
            if reached:
                reason = "target"
                if not logged:      # the run is complete: its last generation is logged
                    self._log(generation)
            elif halted:
                reason = "callback"
            # a stop decided at the last generation changes nothing: the run is complete
            elif stop_vote and generation < last:
                reason = "stopped"
            done = reason != bound or generation == last
            if self.checkpointer is not None and (reason == "stopped" or time_due
                                                  or self._checkpoint_due(generation)):
                self._save(generation, background=not done)
            elif logged:
                self._publish_written_checkpoint()
            if done:
                break
        if reason != "stopped" and self.checkpointer is not None and self._last_saved != self.scheme.generation:
            self._save(self.scheme.generation)
        if self.checkpointer is not None and getattr(self.checkpointer, "busy", False):
            with self.comm.purpose("control"):
                self.checkpointer.wait()
        if self.served:
            self.scheme.summon({"kind": "finish", "reason": reason})
        return self._finish(time.perf_counter() - start, reason)

    def _serve(self, start: float) -> RunResult:
        """A serving rank's run: serve until summoned, joining the checkpoints it is
        called to; the run's result once the loop's ranks end it."""
        while True:
            call = self.scheme.serve()
            if call["kind"] == "finish":
                return self._finish(time.perf_counter() - start, call["reason"])
            self._save(int(call["generation"]))

    def _may_run_ahead(self, last: int) -> bool:
        """Whether a served scheme may start the work of the generation after the next
        one while stepping it: not when the loop saves or ends there, nor when a vote
        cast (its result known: one rank runs the loop) takes effect there."""
        generation = self.scheme.generation + 1
        if generation >= last or self._checkpoint_due(generation):
            return False
        if self.callback is not None and generation % self.settings.log_every == 0:
            return False        # the callback may end the run there
        return self._stop_vote is None or not self._stop_vote[1].any()

    def _last_generation(self) -> tuple[int, str]:
        """(the last generation, "generations" or "budget": which bound sets it)."""
        generations, budget = self.settings.generations, self.scheme.budget_generation
        if generations is None and budget is None:
            raise ValueError("expected a generation count or a scheme with a budget to bound the run, got neither")
        if budget is not None and (generations is None or budget <= generations):
            return budget, "budget"
        return generations, "generations"

    def _moved_end(self, bound: str, reason: str) -> tuple[int, str, str]:
        """(last generation, its bound, the stop reason so far) after a step that may
        have moved the budget's end; a reason that was the old bound becomes the new one."""
        last, new_bound = self._last_generation()
        return last, new_bound, new_bound if reason == bound else reason

    def _checkpoint_due(self, generation: int) -> bool:
        every = self.settings.checkpoint_every
        return self.checkpointer is not None and every > 0 and generation % every == 0

    def _time_due(self) -> bool:
        """Rank 0's clock says a time-based checkpoint is due (False elsewhere)."""
        seconds = self.settings.checkpoint_seconds
        if not seconds or self.checkpointer is None or self.comm.rank != 0:
            return False
        return time.perf_counter() - self._last_save_time >= seconds

    def _votes(self, last: int) -> tuple[bool, bool, bool]:
        """(stop anywhere, time checkpoint due, target reached anywhere), alike on every
        rank: cast one generation ago (on one rank: stop and checkpoint now).

        One non-blocking 24-byte max-all-reduce per generation carries all three, so
        ranks never wait for each other just to learn that nothing happened.
        """
        voting = self.stop is not None or self.settings.target is not None or (
            self.settings.checkpoint_seconds and self.checkpointer is not None)
        if not voting:
            return False, False, False
        if self.comm.size == 1:    # one rank in all (a served scheme's one-rank loop: below)
            vote = self._ballot()
            reached, self._reached = self._reached, bool(vote[2])
            return bool(vote[0]), bool(vote[1]), reached
        decided = (False, False, False)
        if self._stop_vote is not None:
            request, vote = self._stop_vote
            request.wait()
            decided = (bool(vote[0]), bool(vote[1]), bool(vote[2]))
            self._stop_vote = None
        if decided[1]:  # the save follows at once: restart the clock before the next vote
            self._last_save_time = time.perf_counter()
        if not (decided[0] or decided[2]) and self.scheme.generation < last:
            vote = self._ballot()
            with self.loop.purpose("control"):
                self._stop_vote = (self.loop.iallreduce(vote, vote, op="max"), vote)
        return decided

    def _ballot(self) -> np.ndarray:
        """This rank's flags: stop requested, checkpoint time due, target reached."""
        stop = self.stop is not None and self.stop.requested
        target = self.settings.target
        reached = target is not None and self.scheme.reached(target)
        return np.array([stop, self._time_due(), reached], np.int64)

    def _save(self, generation: int, background: bool = False) -> None:
        """Checkpoint after ``generation``: handed to the checkpointer's writer thread when
        ``background`` and the checkpointer can, else written before the loop goes on."""
        run_state = {**self.scheme.run_state(), **self.extra_run_state,
                     "wall_s_before": float(self.extra_run_state.get("wall_s_before", 0.0))
                     + (time.perf_counter() - self._start)}
        if self.served and self.loop is not None:    # the serving ranks write their files too
            self.scheme.summon({"kind": "checkpoint", "generation": generation})
        handoff = background and not self.served and getattr(self.checkpointer, "background", False)
        with self.comm.purpose("control"):
            if handoff:
                name = self.checkpointer.save_background(generation, self.scheme.island_states(),
                                                         config=self.config, run_state=run_state)
            else:
                name = self.checkpointer.save(generation, self.scheme.island_states(),
                                              config=self.config, run_state=run_state)
        self._checkpoints.append(name if handoff else getattr(name, "name", str(name)))
        self._last_saved = generation
        self._last_save_time = time.perf_counter()

    def _publish_written_checkpoint(self) -> None:
        """At a log point: complete a background checkpoint once every rank wrote its file
        (one small all-gather, only while one is in flight), so it becomes visible
        without waiting for the next one."""
        checkpointer = self.checkpointer
        if checkpointer is None or not getattr(checkpointer, "busy", False):
            return
        with self.comm.purpose("control"):
            if all(self.comm.allgather_object(checkpointer.written())):
                checkpointer.wait()

    # --------------------------------------------------------------- logging
    def _total_evaluations(self) -> int:
        with self.comm.purpose("control"):
            return sum(self.comm.allgather_object(self.scheme.evaluations()))

    def _log(self, generation: int) -> LogPoint | None:
        """Gather the records to rank 0 and report them; the :class:`LogPoint` there
        (None on the other ranks)."""
        with self.loop.purpose("global_best"):
            parts = self.loop.gather_object((self.scheme.records(), self._migrants_sent), root=0)
        if parts is None:
            return None
        point = self._log_point(generation, parts)
        for reporter in self.reporters:
            reporter.on_log(point)
        return point

    def _halted(self, point: LogPoint | None) -> bool:
        """Whether the callback ends the run at this log point: rank 0 asks it with the
        global best genome, every loop rank learns the answer (collective over them)."""
        if self.callback is None:
            return False
        _, _, genome = self._global_best(self.loop)
        verdict = bool(self.callback(point, genome)) if self.loop.rank == 0 else None
        with self.loop.purpose("control"):
            return bool(self.loop.bcast_object(verdict))

    def _global_best(self, comm) -> tuple[float, int, np.ndarray | None]:
        """(fitness, island, genome) of the best member over ``comm``'s ranks, the genome
        whole (decoded) on ``comm``'s rank 0, None elsewhere (collective over ``comm``)."""
        with comm.purpose("global_best"):
            best = comm.allgather_object(_without_genome(self.scheme.best_local()))
            owner = min((b, rank) for rank, b in enumerate(best) if b is not None)[1]
            _, island, fitness = best[owner]
            genome = self._best_genome_to_root(comm, owner, island)
        if genome is not None and self.decode is not None:
            genome = self.decode(genome)    # rows travel (a recipe: bytes), rank 0 decodes
        return fitness, island, genome

    def _log_point(self, generation: int, parts) -> LogPoint:
        records = sorted((r for recs, _ in parts for r in recs), key=lambda r: r.island)
        evaluations = sum(r.evaluations for r in records)
        return LogPoint(generation, records, evaluations, self.scheme.run_state().get("migrations", 0),
                        sum(sent for _, sent in parts), time.perf_counter() - self._start,
                        evaluations - self._evaluations_before)

    # --------------------------------------------------------------- finish
    def _finish(self, wall_s: float, reason: str) -> RunResult:
        # ranks leave one by one after these collectives: no abort on a repeated stop signal
        # from here (mpievo.faults.StopRequest.disarmed)
        with getattr(self.stop, "disarmed", contextlib.nullcontext)():
            return self._result(wall_s, reason)

    def _result(self, wall_s: float, reason: str) -> RunResult:
        comm = self.comm
        fitness, island, genome = self._global_best(comm)
        with comm.purpose("global_best"):
            records = comm.gather_object(self.scheme.records(), root=0)
        traffic = dict(comm.traffic)
        with comm.purpose("control"):
            evaluations = comm.allgather_object(self.scheme.evaluations())
            traffics = comm.gather_object(traffic, root=0)
        total = sum(evaluations)
        this_run = total - self._evaluations_before
        result = RunResult(
            generations=self.scheme.generation, best_fitness=fitness, best_island=island,
            best_genome=genome, evaluations=total, evaluations_this_run=this_run, wall_s=wall_s,
            evals_per_s=this_run / wall_s if wall_s > 0 else float("nan"),
            bytes_sent=_sum_traffic(traffics) if traffics is not None else dict(traffic),
            migrations=int(self.scheme.run_state().get("migrations", 0)), stopped=reason == "stopped",
            checkpoints=list(self._checkpoints), stop_reason=reason)
        problem = getattr(self.scheme, "problem", None)
        if getattr(problem, "n_obj", 1) > 1:     # the same on every rank
            with comm.purpose("global_best"):
                fronts = comm.gather_object(self.scheme.fronts(), root=0)
            if fronts is not None:
                result.front = merge_fronts([f for part in fronts for f in part], problem.reference_point)
        if records is not None:
            flat = sorted((r for recs in records for r in recs), key=lambda r: r.island)
            result.islands = [{"island": r.island, "best_fitness": r.best, "evaluations": r.evaluations,
                               "nonfinite": r.nonfinite, "immigrants": r.immigrants,
                               "diversity": r.diversity, "steps": r.steps,
                               **({} if r.hypervolume is None else {"hypervolume": r.hypervolume})}
                              for r in flat]
        for reporter in self.reporters:
            reporter.on_finish(result)
        return result

    def _best_genome_to_root(self, comm, owner: int, island: int) -> np.ndarray | None:
        """Send the winning genome from ``comm``'s rank ``owner`` to its rank 0 (a buffer, no pickle)."""
        if comm.rank == owner:
            genome = np.ascontiguousarray(self.scheme.best_local().genome)
            if owner == 0:
                return genome
            comm.exchange(sends=[(0, genome)])
        elif comm.rank == 0:
            dim, dtype = self.scheme.genome_shape(island)
            genome = np.empty(dim, dtype)
            comm.exchange(recvs=[(owner, genome)])
            return genome
        return None


def merge_fronts(fronts, reference_point) -> dict:
    """The non-dominated set of the islands' ``fronts`` ((island, objectives, genomes) each):
    ``objectives``, ``genomes`` (float64), the ``islands`` they come from, and its
    ``hypervolume`` to ``reference_point`` (None without one or without moocore)."""
    fronts = sorted(fronts, key=lambda f: f[0])
    objectives, genomes, islands = merged_front(
        np.concatenate([f[1] for f in fronts]), np.concatenate([np.asarray(f[2], np.float64) for f in fronts]),
        np.concatenate([np.full(len(f[1]), f[0], np.int64) for f in fronts]))
    return {"objectives": objectives, "genomes": genomes, "islands": islands,
            "reference_point": reference_point, "hypervolume": hypervolume(objectives, reference_point)}


def _without_genome(best):
    return None if best is None else (best.internal, best.island, best.fitness)


def _sum_traffic(traffics: list[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for traffic in traffics:
        for purpose, nbytes in traffic.items():
            total[purpose] = total.get(purpose, 0) + int(nbytes)
    return dict(sorted(total.items()))

