"""Parallel schemes: how the engine's work is spread over ranks.

:class:`Scheme` is what the run loop (:mod:`.runner`) drives. The island model
(:class:`IslandScheme`) is the first implementation; others (centralised breeding on
rank 0, master-worker batch evaluation, a replicated archive) can be added beside it
by implementing the same few methods on top of :class:`mpievo.evo.Island` or the
engine's ask/tell interface.

Generations and evaluations: a generation of the run is a *round* in which every
island evaluates about the same number of children, whatever its batch; an
evaluation budget gives each island a share (the rule is in :mod:`mpievo.rules.budget`).

Checkpoint contract: ``island_states()`` returns this rank's islands as
``{index: state tree}`` and ``run_state()`` a small scheme-level tree (identical on
every rank); ``restore(island_states, run_state)`` puts a fresh scheme (same config,
any rank count that the island count allows) back exactly where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

from ..evo.engine_config import EngineConfig
from ..evo.genomes import row_dtype
from ..evo.island import Island
from ..evo.migration_policy import MigrationPolicy
from ..evo.streams import stream
from ..rules.budget import (finish_step, finisher, lead_scale, leader, leader_rates, losers, plan, progress,
                            progress_rates, rate_at, rounds_to_spend, split_left)
from ..rules.mapping import islands_of_rank
from ..rules.schedule import MigrationSchedule
from ..rules.topology import build_topology
from .migrator import IslandShape, MigrationReport, Migrator

SCHEME_FORMAT = 1


@dataclass(frozen=True)
class IslandRecord:
    """One island's state at a generation of the run (what the per-island log holds)."""

    island: int
    generation: int        # the run's generation (round)
    best: float            # in the user's sense (maximised problems: the largest value)
    mean: float            # mean finite fitness of the archive, user's sense (nan if none)
    diversity: float
    evaluations: int
    migrations: int        # migrations this island took part in so far
    immigrants: int        # immigrants it accepted so far
    best_internal: float   # minimised value, for comparing islands
    nonfinite: int = 0     # evaluations that returned NaN or +-inf so far
    steps: int = 0         # the island's own generations (steps) so far
    hypervolume: float | None = None   # several objectives: its front's, to the problem's reference point

    @property
    def only_nonfinite(self) -> bool:
        """True when every evaluation so far returned a non-finite value."""
        return self.evaluations > 0 and self.nonfinite >= self.evaluations

    def to_json(self) -> dict:
        return {"generation": self.generation, "best": self.best, "mean": self.mean,
                "diversity": self.diversity, "evaluations": self.evaluations,
                "nonfinite": self.nonfinite, "migrations": self.migrations, "immigrants": self.immigrants,
                "steps": self.steps, **({} if self.hypervolume is None else {"hypervolume": self.hypervolume})}


class BestMember(NamedTuple):
    """The best member of some islands."""

    internal: float        # minimised fitness (compare with this)
    island: int
    fitness: float         # in the user's sense
    genome: np.ndarray


@dataclass
class StepResult:
    """What one generation did on this rank."""

    generation: int
    migration: MigrationReport | None = None


@runtime_checkable
class Scheme(Protocol):
    """What the run loop needs from a parallel scheme (all collective unless noted)."""

    name: str
    n_islands: int
    generation: int        # last completed generation (identical on every rank)
    budget_generation: int | None   # the generation that spends the budget (None: no budget)

    def initialize(self) -> None:
        """Generation 0 (random start), on every rank."""

    def step(self) -> StepResult:
        """Run generation ``generation + 1`` (including migration when due)."""

    def records(self) -> list[IslandRecord]:
        """Records of this rank's islands (local, not collective)."""

    def evaluations(self) -> int:
        """Evaluations made by this rank's islands (local)."""

    def best_local(self) -> BestMember | None:
        """The best member of this rank's islands, or None when it has none (local)."""

    def reached(self, target: float) -> bool:
        """True when one of this rank's islands holds a fitness at least as good as
        ``target`` (in the user's sense: <= when minimising, >= when maximising) (local)."""

    def genome_shape(self, island: int) -> tuple[int, np.dtype]:
        """(dim, dtype) of the genomes of ``island`` (any island; local, no message)."""

    def island_states(self) -> dict[int, dict]:
        """This rank's islands as state trees (local); their genome arrays may be views of
        the archives: use them before the next step."""

    def run_state(self) -> dict:
        """Scheme-level state, identical on every rank (local)."""

    def restore(self, island_states: Mapping[int, Mapping[str, Any]], run_state: Mapping[str, Any]) -> None:
        """Continue from saved states (local)."""


class IslandScheme:
    """The island model: N islands over the ranks of ``comm``, migrating synchronously.

    Args:
        comm: an mpievo Communicator.
        problem: the :class:`~mpievo.evo.problems.Problem` (the same on every island).
        engines: one resolved :class:`~mpievo.evo.engine_config.EngineConfig` per island (at
            least comm.size of them), e.g. ``EngineConfig(...).resolve_all(n_islands)``.
        seed: the run's seed.
        policy: the :class:`MigrationPolicy` (default: its defaults).
        schedule: the :class:`MigrationSchedule` (default: a ring, every 10 generations).
        budget: evaluations over all islands, initial populations included (None: no
            limit); each island gets its share and the run ends at ``budget_generation``.
        leader_rate: with a budget, > 1 splits the budget left again at each migration
            (before the migrants move): the island with the best fitness evaluates
            ``leader_rate`` children per child of any other island (:mod:`mpievo.rules.budget`),
            and ``budget_generation`` moves with each split. 1: fixed equal shares.
        leader_rate_final: with ``leader_rate > 1``, the leader's rate at the whole budget:
            from half the budget spent it grows geometrically from ``leader_rate`` to
            this (:func:`mpievo.rules.budget.rate_at`); None: ``leader_rate`` throughout.
        leader_margin: the lead changes hands only when another island is better by more
            than this fraction of the spread of the islands' best fitness at the first
            split (:func:`mpievo.rules.budget.lead_scale`); 0: any improvement.
        finish_diversity, finish_reserve: with ``leader_rate > 1``, when the leader (under
            ``leader_margin``) switches to a local CMA-ES from its best (:func:`mpievo.rules.budget.finisher`):
            a non-CMA-ES island whose diversity is at most ``finish_diversity``, any
            island once at most ``finish_reserve`` of the budget is left; 0: never.
        progress_rate: with ``leader_rate > 1``, > 1 gives every other island up to this
            many parts by its progress since the previous split (:func:`mpievo.rules.budget.progress_rates`);
            1: one part each.
        restart_after: with ``leader_rate > 1``, > 0 restarts an island that does not run
            CMA-ES and is not the leader as CMA-ES after this many splits in a row without
            progress (:func:`mpievo.rules.budget.losers`); 0: never.

    Generation ``g`` of the run is a round (:mod:`mpievo.rules.budget`): each island steps until
    the children it evaluated since its initial population reach ``g * R`` (``R``:
    the largest planned batch, ``plan.round_size``), so an island with a small batch
    (CMA-ES: 10 children) steps more often than one with a large batch (a GA with
    256) and both make about the same number of evaluations; migration every ``K``
    generations is migration every ``K * R`` evaluations per island. With a budget
    an island stops at its share, its last step evaluating only what is left.

    Every random draw is keyed by (seed, island, the island's own step; the run's
    generation for migration), migrations happen at generation boundaries in a fixed
    order, and each island evaluates its own batch (never fused with another
    island's: a BLAS product may round differently for a different batch size), so
    the result is bit-identical on any number of ranks, given the same BLAS thread
    count (``mpievo run`` and :func:`mpievo.minimize` pin one thread per rank: a
    multi-threaded product may also round differently).
    """

    name = "islands"

    def __init__(self, comm, problem, engines: Sequence[EngineConfig], *, seed: int = 0,
                 policy: MigrationPolicy | None = None, schedule: MigrationSchedule | None = None,
                 budget: int | None = None, leader_rate: int = 1, leader_rate_final: int | None = None,
                 leader_margin: float = 0.0, finish_diversity: float = 0.0, finish_reserve: float = 0.0,
                 progress_rate: int = 1, restart_after: int = 0):
        self.comm = comm
        self.problem = problem
        self.n_islands = len(engines)
        mixed = [i for i, e in enumerate(engines) if not isinstance(e, EngineConfig) or e.is_heterogeneous()]
        if mixed:
            raise ValueError("expected one resolved EngineConfig per island (EngineConfig.resolve_all), "
                             f"got per-island values or another type on islands {mixed}")
        self.seed = int(seed)
        self.policy = MigrationPolicy() if policy is None else policy
        self.schedule = MigrationSchedule(build_topology("ring", self.n_islands)) if schedule is None else schedule
        edges_from = len(self.schedule.destinations(0))
        if edges_from != self.n_islands:
            raise ValueError(f"expected a topology of {self.n_islands} islands, got one of {edges_from}")
        self.local_indices = islands_of_rank(comm.rank, self.n_islands, comm.size)
        self.islands = {i: Island(i, problem, engines[i], seed=self.seed, n_islands=self.n_islands)
                        for i in self.local_indices}
        # rows as the islands keep them (seeded genomes: float64 recipes, whatever engine.dtype)
        shapes = [IslandShape(problem.dim, row_dtype(problem, e.dtype), e.capacity, getattr(problem, "n_obj", 1))
                  for e in engines]
        self.migrator = Migrator(comm, self.islands, shapes, self.policy, self.seed)
        self.plan = plan(engines, problem.dim, budget)
        self.budget_generation = self.plan.budget_generation
        if isinstance(leader_rate, bool) or not isinstance(leader_rate, int) or leader_rate < 1:
            raise ValueError(f"expected a leader_rate >= 1, got {leader_rate!r}")
        if leader_rate > 1 and budget is None:
            raise ValueError(f"expected a budget to split with leader_rate = {leader_rate}, got none")
        self.leader_rate = leader_rate
        final = leader_rate if leader_rate_final is None else leader_rate_final
        if isinstance(final, bool) or not isinstance(final, int) or final < leader_rate:
            raise ValueError(f"expected a leader_rate_final >= leader_rate = {leader_rate} (or None), "
                             f"got {leader_rate_final!r}")
        self.leader_rate_final = final
        if not 0.0 <= leader_margin <= 1.0:
            raise ValueError(f"expected a leader_margin in [0, 1], got {leader_margin!r}")
        self.leader_margin = float(leader_margin)
        for name, value in (("finish_diversity", finish_diversity), ("finish_reserve", finish_reserve)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"expected a {name} in [0, 1), got {value!r}")
            if value > 0 and leader_rate == 1:
                raise ValueError(f"expected a leader_rate > 1 with {name} = {value} (decided at the "
                                 f"budget's splits), got 1")
        self.finish_diversity, self.finish_reserve = float(finish_diversity), float(finish_reserve)
        self.finishing = self.finish_diversity > 0 or self.finish_reserve > 0
        self.kinds = [str(e.algorithm) for e in engines]
        self.finished: list[int] = []           # islands switched to a finishing run
        for name, value, low in (("progress_rate", progress_rate, 1), ("restart_after", restart_after, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"expected a {name} >= {low}, got {value!r}")
            if value > low and leader_rate == 1:
                raise ValueError(f"expected a leader_rate > 1 with {name} = {value} (decided at the "
                                 f"budget's splits), got 1")
        self.progress_rate, self.restart_after = progress_rate, restart_after
        self.tracking = progress_rate > 1 or restart_after > 0
        # progress: each island's best after the last migration (own children count from
        # there), its evaluations at the last split, splits in a row without progress
        self.after_best: list[float] | None = None
        self.last_evaluations = list(self.plan.initial)
        self.stalls = [0] * self.n_islands
        self.switched: set[int] = set()         # islands running CMA-ES by a switch (finish, restart)
        self.lead_scale: float | None = None     # set at the first split
        # the split in force: since round split_generation, island i steps R * rates[i]
        # children per round from base[i] evaluations, up to shares[i]
        self.leader: int | None = None
        self.split_generation = 0
        self.rates = [1] * self.n_islands
        self.base = list(self.plan.initial)
        self.shares = None if self.plan.shares is None else list(self.plan.shares)
        self.generation = -1
        self.interval = self._clamp(self.schedule.interval)
        self.next_migration = self.interval
        self.migrations = 0
        self.emigrants = self.policy.emigrants   # per edge; adapts with the schedule's rule

    def _clamp(self, interval: int) -> int:
        rule = self.schedule.adaptive
        return interval if rule is None else rule.clamp(interval)

    # ------------------------------------------------------------ evolution
    def initialize(self) -> None:
        for index in self.local_indices:
            self.islands[index].initialize()
        self.generation = 0

    def step(self) -> StepResult:
        if self.generation < 0:
            raise RuntimeError("expected initialize() or restore() before step(), got neither")
        generation = self.generation + 1
        for index in self.local_indices:
            self._advance(self.islands[index], generation)
        self.generation = generation
        result = StepResult(generation)
        if generation == self.next_migration:
            if self.leader_rate > 1:
                self._split(generation)
            result.migration = self._migrate(generation)
            if self.tracking:
                self.after_best = [b for _, b in self._gather(lambda i: self.islands[i].best_internal())]
        return result

    def _gather(self, value) -> list[tuple[int, Any]]:
        """[(island, value(island))] of every island, index order (collective)."""
        with self.comm.purpose("control"):
            gathered = self.comm.allgather_object([(i, value(i)) for i in self.local_indices])
        return sorted(r for part in gathered for r in part)

    def _advance(self, island: Island, generation: int) -> None:
        """Step ``island`` until it evaluated its children of rounds up to ``generation``
        (since the split in force), or until its share of the budget is spent."""
        i = island.index
        start = self.base[i]
        clock = (generation - self.split_generation) * self.plan.round_size * self.rates[i]
        share = None if self.shares is None else self.shares[i]
        while island.evaluations - start < clock:
            left = None if share is None else share - island.evaluations
            if left is not None and left <= 0:
                return
            island.step(island.generation + 1, left)

    def _split(self, generation: int) -> None:
        """Split the budget left among the islands: the leader (best fitness now, before
        this migration's arrivals; the current one kept within ``leader_margin``) at the
        rate :func:`mpievo.rules.budget.rate_at` gives (collective: one small gather)."""
        finishing = self.finishing
        rows = [r for _, r in self._gather(lambda i: (self.islands[i].evaluations, self.islands[i].best_internal(),
                                                      self.islands[i].diversity() if finishing else 0.0))]
        evaluations = [r[0] for r in rows]
        budget = sum(self.plan.shares)
        best = [r[1] for r in rows]
        if self.lead_scale is None:
            self.lead_scale = lead_scale(best)
        self.leader = leader(best, self.leader, self.leader_margin * self.lead_scale)
        if finishing:
            late = self.finish_reserve > 0 and budget - sum(evaluations) <= self.finish_reserve * budget
            chosen = finisher(best, [r[2] for r in rows], self.kinds, self.finished, self.finish_diversity, late,
                              self.leader)
            if chosen is not None:
                self.finished.append(chosen)
                self.leader = chosen         # the finishing run gets the leader's share
                self._note_switch(chosen)
                if chosen in self.islands:
                    self._finish(self.islands[chosen], rows[chosen][2])
        gains = [0.0] * self.n_islands
        if self.tracking and self.after_best is not None:
            spent = [e - b for e, b in zip(evaluations, self.last_evaluations)]
            gains = progress(self.after_best, best, spent, self.lead_scale)
            self.stalls = [0 if g > 0 else s + 1 for s, g in zip(self.stalls, gains)]
            eligible = [self.kinds[i] != "cmaes" and i not in self.switched for i in range(self.n_islands)]
            for i in losers(self.stalls, self.leader, self.restart_after, eligible):
                self.stalls[i] = 0
                self._note_switch(i)
                if i in self.islands:
                    self._restart_island(self.islands[i], generation)
        self.last_evaluations = evaluations
        rate = rate_at(sum(evaluations), budget, self.leader_rate, self.leader_rate_final)
        self.rates = leader_rates(self.n_islands, self.leader, rate)
        if self.progress_rate > 1:
            self.rates = progress_rates(self.rates, self.leader, gains, self.progress_rate)
        self.shares = split_left(budget, evaluations, self.rates)
        self.base, self.split_generation = evaluations, generation
        self._update_budget_generation()

    def _finish(self, island: Island, diversity: float | None = None) -> None:
        """Switch ``island`` to CMA-ES (its engine's ``cma_*`` settings); with
        ``diversity``, start a local run from its best with that step (else a restore
        loads the run)."""
        from ..evo.algorithms.cmaes import CMAES

        algorithm = island.algorithm
        if not isinstance(algorithm, CMAES) or diversity is None:
            algorithm = CMAES.from_config(island.config)
            island.switch_algorithm(algorithm)
        if diversity is not None:
            algorithm.start_local(finish_step(diversity, algorithm.sigma0))

    def _note_switch(self, index: int) -> None:
        """Record (every rank) that island ``index`` runs CMA-ES from now on."""
        if self.kinds[index] != "cmaes":
            self.switched.add(index)

    def _restart_island(self, island: Island, generation: int) -> None:
        """A losing island switched to CMA-ES, from a random point under its restart policy
        (draws: the island's ``restart`` stream of ``generation``)."""
        self._finish(island)        # never CMA-ES here (eligible islands are not): a fresh one
        island.algorithm.restart(stream(self.seed, island.index, generation, "restart"))

    def _update_budget_generation(self) -> None:
        self.budget_generation = self.split_generation + rounds_to_spend(
            self.shares, self.base, self.plan.round_size, self.rates)

    def _migrate(self, generation: int) -> MigrationReport:
        report = self.migrator.migrate(generation, self.schedule.destinations(generation), self.emigrants)
        self.migrations += 1
        rule = self.schedule.adaptive
        if rule is not None:
            # every rank applies the same pure rule to the same gathered values
            diversities = [d for _, d in self._gather(lambda i: self.islands[i].diversity())]
            self.interval = rule.next(self.interval, diversities)
            self.emigrants = rule.next_emigrants(self.emigrants, self.policy.emigrants, diversities)
        self.next_migration = generation + self.interval
        return report

    # ------------------------------------------------------------ reporting
    def records(self) -> list[IslandRecord]:
        return [self._record(self.islands[i]) for i in self.local_indices]

    def _record(self, island: Island) -> IslandRecord:
        fitness = island.archive.fitness
        finite = fitness[np.isfinite(fitness)]
        mean = float(island.problem.to_user(finite.mean())) if finite.size else float("nan")
        best = float(island.problem.to_user(island.best_internal()))   # not island.best(): no decoded genome
        return IslandRecord(island.index, self.generation, best, mean, island.diversity(),
                            island.evaluations, self.migrations, island.immigrants_accepted,
                            island.best_internal(), island.nonfinite,
                            island.generation, island.hypervolume())

    def fronts(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(island, objectives, genomes) of the front of each local island with several
        objectives (local)."""
        out = []
        for i in self.local_indices:
            archive = self.islands[i].archive
            if self.islands[i].n_obj > 1:
                front = archive.front()
                out.append((i, archive.objectives[front].copy(), archive.take(front)))
        return out

    def evaluations(self) -> int:
        return sum(self.islands[i].evaluations for i in self.local_indices)

    def best_local(self) -> BestMember | None:
        best = None
        for i in self.local_indices:
            archive = self.islands[i].archive
            slot = archive.best_index()
            if best is None or (float(archive.fitness[slot]), i) < (best.internal, best.island):
                internal = float(archive.fitness[slot])
                best = BestMember(internal, i, float(self.problem.to_user(internal)),
                                  archive.row(slot))
        return best

    def reached(self, target: float) -> bool:
        goal = -target if self.problem.maximize else target     # the engine minimises
        return any(self.islands[i].best_internal() <= goal for i in self.local_indices)

    def genome_shape(self, island: int) -> tuple[int, np.dtype]:
        shape = self.migrator.shapes[island]
        return shape.dim, shape.dtype

    # ------------------------------------------------------------ checkpoints
    def island_states(self) -> dict[int, dict]:
        # views of the archives' genomes, not copies: the run loop writes the checkpoint
        # before any island steps again (a genome-sized copy per member would set the
        # run's peak memory)
        return {i: self.islands[i].state_dict(copy=False) for i in self.local_indices}

    def run_state(self) -> dict:
        return {"scheme": self.name, "format": SCHEME_FORMAT, "generation": self.generation,
                "n_islands": self.n_islands, "interval": self.interval,
                "next_migration": self.next_migration, "migrations": self.migrations,
                "emigrants": self.emigrants, **self._split_state()}

    def _split_state(self) -> dict:
        if self.leader_rate == 1:
            return {}
        return {**self._portfolio_state(), "leader": -1 if self.leader is None else self.leader,
                "split_generation": self.split_generation,
                "lead_scale": -1.0 if self.lead_scale is None else self.lead_scale,
                "rates": np.asarray(self.rates, np.int64), "base": np.asarray(self.base, np.int64),
                "shares": np.asarray(self.shares, np.int64)}

    def _portfolio_state(self) -> dict:
        """Finishing, progress and restarts (only what is on): flags and counts per island."""
        state = {}
        if self.finishing:
            state["finished"] = np.isin(np.arange(self.n_islands), self.finished).astype(np.int64)
        if self.tracking:
            state.update(stalls=np.asarray(self.stalls, np.int64),
                         last_evaluations=np.asarray(self.last_evaluations, np.int64))
            if self.after_best is not None:
                state["after_best"] = np.asarray(self.after_best, np.float64)
        if self.switched:
            state["switched"] = np.isin(np.arange(self.n_islands), sorted(self.switched)).astype(np.int64)
        return state

    def _restore_portfolio(self, state: Mapping[str, Any]) -> None:
        """The flags and counts of :meth:`_portfolio_state`; switched islands run CMA-ES
        (before their states load: they hold a CMA-ES state)."""
        def flags(key):
            return [int(i) for i in np.flatnonzero(np.asarray(state.get(key, np.zeros(0))).ravel())]
        self.finished = flags("finished")
        self.switched = set(flags("switched"))
        if self.tracking:
            # checkpoints from before the rule: counts start at the restore
            self.stalls = [int(v) for v in np.asarray(state.get("stalls", self.stalls)).ravel()]
            self.last_evaluations = [int(v) for v in np.asarray(state.get("last_evaluations", self.base)).ravel()]
            after = state.get("after_best")
            self.after_best = None if after is None else [float(v) for v in np.asarray(after).ravel()]
        for i in sorted(self.switched & set(self.local_indices)):
            self._finish(self.islands[i])

    def restore(self, island_states, run_state) -> None:
        """Load this rank's islands and the schedule state.

        Raises:
            ValueError: another scheme, island count, or missing/extra islands.
        """
        for key, value in (("scheme", self.name), ("n_islands", self.n_islands)):
            if run_state.get(key) != value:
                raise ValueError(f"expected {key} = {value!r} in the saved run state, got {run_state.get(key)!r}")
        if sorted(island_states) != self.local_indices:
            raise ValueError(f"expected saved states of islands {self.local_indices} on rank "
                             f"{self.comm.rank}, got {sorted(island_states)}")
        if self.leader_rate > 1 and "split_generation" in run_state:
            self._restore_portfolio(run_state)
        for i in self.local_indices:
            self.islands[i].load_state_dict(island_states[i])
        self.generation = int(run_state["generation"])
        self.interval = int(run_state["interval"])
        self.next_migration = int(run_state["next_migration"])
        self.migrations = int(run_state["migrations"])
        # checkpoints written before the count could adapt hold none: the policy's
        self.emigrants = min(int(run_state.get("emigrants", self.policy.emigrants)), self.policy.emigrants)
        if self.leader_rate > 1:
            self._restore_split(run_state)

    def _restore_split(self, state: Mapping[str, Any]) -> None:
        if "split_generation" not in state:
            raise ValueError(f"expected the budget's split in the saved run state (leader_rate = "
                             f"{self.leader_rate}), got a state without one")
        lead = int(state["leader"])
        self.leader = None if lead < 0 else lead
        # checkpoints from before the margin hold no scale: the next split takes it
        scale = float(state.get("lead_scale", -1.0))
        self.lead_scale = None if scale < 0 else scale
        self.split_generation = int(state["split_generation"])
        self.rates, self.base, self.shares = ([int(v) for v in np.asarray(state[key]).ravel()]
                                              for key in ("rates", "base", "shares"))
        budget = sum(self.plan.shares)
        if sum(self.shares) != budget:      # resumed with another run.budget: split that one
            self.shares = split_left(budget, self.base, self.rates)
        self._update_budget_generation()
