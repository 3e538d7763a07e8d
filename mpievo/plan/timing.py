"""The cost model's time: a run's wall time from its messages (:mod:`.traffic`) and constants.

A run is simulated generation by generation on its critical path:

* computation: a child costs ``breed_s`` on the rank that breeds it (the leader; every
  rank under "replicated"; under ``breed = "evaluator"`` the rank that evaluates it,
  every group rank breeding its block at once; ``init_s`` for an initial genome) and ``row_s`` plus the
  workload's cost on the rank that evaluates it; an island's record (``record_s``) is
  made at every log line and at the end. Engine costs are calibrated per genome size
  and interpolated in log-log space between calibrated sizes (:meth:`Constants.child`);
* cores: CPU work is stretched by ``busy ranks / cores`` when busy ranks outnumber
  cores, times the calibrated contention of that many ranks running at once, also
  where each has its own core (:meth:`Constants.stretch`); a "burn" cost, CPU time by
  definition, only by the share of the cores.
  Ranks breeding or between steps count as busy (under the leader schemes only the
  leaders breed, :func:`_breeding`); a group rank left without rows in a batch waits
  for the next order, and Open MPI's waits yield the core when ranks
  outnumber cores (:func:`_evaluating`); master_worker's master waits for results in a
  polling loop that yields its core (:mod:`mpievo.comm.progress`), so its workers share
  the cores (:func:`_pulled_seconds`);
* a batch cut into row blocks waits for its slowest block; an island-scheme rank
  waits for the slowest rank only where ranks synchronise (migrations, log lines);
* master_worker's blocks go to whichever worker is free first: generational waits
  for each island's batch, steady only where its queue drains (:func:`_master_worker_run`);
* a message costs its link's latency plus bytes / bandwidth (intra- or inter-node);
  a leader sends its blocks one after another; collectives take ``ceil(log2 P)`` latencies;
* the run loop's fixed costs, measured by :mod:`.calibrate` on real runs
  (``Constants.loop``): ``run_s`` per run (start, gathers, finish) and ``step_s`` per
  generation (the Python of a step and its messages beyond what the terms above
  count, and what waiting ranks cost each other), per scheme and rank count (1, 2, 4
  here); other rank counts take the nearest measured one, stretched like CPU work.

A child's cost in "vary" mode is drawn like the bench's (uniform factor in
:data:`.workloads.VARY_RANGE`, mean 1), and the wall time is the mean over
:data:`SAMPLES` seeded draws, so predictions are repeatable.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .workloads import STEADY, VARY_RANGE
from ..parallel.groups import row_blocks
from ..rules.mapping import rank_of_island
from ..parallel.master_worker import block_bounds
from .traffic import Layout, Traffic, migration_messages, traffic

SAMPLES = 32
LOG_EVERY = 10      # run.log_every's default: the run loop gathers (and syncs) then


@dataclass(frozen=True)
class Link:
    latency_s: float
    bandwidth_Bps: float

    def seconds(self, nbytes: int, messages: int = 1) -> float:
        return messages * self.latency_s + nbytes / self.bandwidth_Bps


ENGINE_KEYS = ("row_s", "breed_s", "init_s", "record_s")


@dataclass(frozen=True)
class Constants:
    """Per-child engine costs at calibrated dims, the links, the cores and the run
    loop's fixed costs (``loop``: {ranks: {bench scheme: {"run_s", "step_s"}}}, one
    rank under "island": every scheme is the island model there)."""

    engine: dict             # {dim: {"row_s", "breed_s", "init_s", "record_s"}}
    intra: Link
    inter: Link
    cores: int
    source: str = ""
    loop: dict = field(default_factory=dict)
    contention: dict = field(default_factory=dict)   # {ranks: {dim: slowdown beyond busy / cores}}

    @classmethod
    def load(cls, path, inter: Link | None = None) -> "Constants":
        """From a ``mpievo plan --calibrate`` JSON file; ``inter`` defaults to the intra link."""
        data = json.loads(Path(path).read_text())
        return cls.from_dict(data, inter)

    @classmethod
    def from_dict(cls, data: dict, inter: Link | None = None) -> "Constants":
        intra = Link(**data["intra"])
        engine = {int(d): dict(v) for d, v in data["engine"].items()}
        cores = int(data["cores"])
        contention = data.get("contention")
        if contention is None and "oversubscribed" in data:     # calibrations before 2026-11-27 12:00
            contention = {cores + 1: data["oversubscribed"]}     # measured with more ranks than cores only
        return cls(engine, intra, inter or intra, cores, data.get("source", ""),
                   {int(p): {k: dict(v) for k, v in by.items()} for p, by in data.get("loop", {}).items()},
                   {int(p): {int(d): float(f) for d, f in by.items()} for p, by in (contention or {}).items()})

    def stretch(self, busy: int, dim: int) -> float:
        """How much longer engine work at ``dim`` genes takes when ``busy`` ranks run at
        once: ``busy / cores`` where they outnumber the cores, times the calibrated
        contention of that many ranks side by side (:mod:`.calibrate`: shared
        caches, memory and clock budget); the largest calibrated rank count up to
        ``busy`` gives it, 1 where none does, interpolated in log dim like the engine costs."""
        share = max(1.0, busy / self.cores)
        counts = [p for p in self.contention if p <= busy and self.contention[p]]
        if busy <= 1 or not counts:
            return share
        factors = self.contention[max(counts)]
        dims = sorted(factors)      # outside the calibrated dims: the nearest one's
        low, high, t = _bracket(dims, dim)
        low, high = (dims[0] if low is None else low), (dims[-1] if high is None else high)
        return share * _log_mix(factors[low], factors[high], t)

    def child(self, dim: int) -> dict:
        """{"row_s", "breed_s", "init_s", "record_s"} at ``dim`` genes: the calibrated
        dim's; between two calibrated dims, interpolated in log-log space (memory-bound
        work costs more per gene at large dims); outside them, per gene from the nearest."""
        low, high, t = _bracket(sorted(self.engine), dim)
        if low is None or high is None:
            base = low if high is None else high
            return {k: self.engine[base].get(k, 0.0) * dim / base for k in ENGINE_KEYS}
        if low == high:
            return {k: self.engine[low].get(k, 0.0) for k in ENGINE_KEYS}
        return {k: _log_mix(self.engine[low].get(k, 0.0), self.engine[high].get(k, 0.0), t)
                for k in ENGINE_KEYS}

    def loop_costs(self, layout: Layout) -> tuple[float, float]:
        """(run_s, step_s) of ``layout``'s run loop as measured at its rank count, else
        at the nearest calibrated count below (above if none), stretched by the cores'
        oversubscription beyond the measured one's; (0, 0) when not calibrated."""
        counts = sorted(p for p in self.loop if (p == 1) == (layout.ranks == 1))
        if not counts:
            return 0.0, 0.0
        measured = max([p for p in counts if p <= layout.ranks], default=counts[0])
        costs = self.loop[measured].get("island" if layout.ranks == 1 else bench_name(layout), {})
        stretch = _stretch(layout.ranks, self.cores) / _stretch(measured, self.cores)
        return costs.get("run_s", 0.0) * stretch, costs.get("step_s", 0.0) * stretch


def _bracket(dims: list[int], dim: int) -> tuple[int | None, int | None, float]:
    """(the largest of the sorted ``dims`` <= ``dim``, the smallest >= it, ``dim``'s
    position between them in log space); None beyond the ends, position 0 then."""
    low = max([d for d in dims if d <= dim], default=None)
    high = min([d for d in dims if d >= dim], default=None)
    if low is None or high is None or low == high:
        return low, high, 0.0
    return low, high, math.log(dim / low) / math.log(high / low)


def _log_mix(a: float, b: float, t: float) -> float:
    """``a`` to ``b`` at ``t`` in [0, 1], linear in log space (linear if either is <= 0)."""
    if a <= 0 or b <= 0:
        return a + (b - a) * t
    return math.exp(math.log(a) + (math.log(b) - math.log(a)) * t)


def bench_name(layout: Layout) -> str:
    """The ``mpievo bench schemes`` name of ``layout``'s scheme (master_worker_steady)."""
    steady = layout.scheme == "master_worker" and layout.evaluation == "steady"
    return layout.scheme + (STEADY if steady else "")


@dataclass(frozen=True)
class Cost:
    """The workload's cost per child on top of the fitness: ``mode`` none, sleep, burn, vary."""

    seconds: float = 0.0
    mode: str = "none"

    def draw(self, rng, n: int) -> np.ndarray:
        if self.mode == "vary":
            low, high = VARY_RANGE
            return self.seconds * rng.uniform(low, high, n) / ((low + high) / 2)
        return np.full(n, self.seconds if self.mode != "none" else 0.0)


def _stretch(busy: int, cores: int) -> float:
    """How much longer CPU work takes when ``busy`` ranks share ``cores``."""
    return max(1.0, busy / cores)


def _busy(layout: Layout) -> int:
    """Ranks that hold a core while children are evaluated: master_worker's master
    waits in a polling loop that yields its core, every other waiting rank spins in MPI."""
    pulled = layout.scheme == "master_worker" and layout.ranks > 1
    return layout.ranks - 1 if pulled else layout.ranks


def _breeding(layout: Layout) -> int:
    """Ranks that hold a core while the islands breed (and make their records): every
    rank under "island" and "replicated" (each breeds its replica); under the leader
    schemes only the leaders, while their group ranks wait for the next order and
    Open MPI's waits yield the core where ranks outnumber cores (centralized at 1e5
    genes, 4 ranks on 2 cores: +39, +6 and +34 % in three commands with the leader's
    breeding stretched as if all 4 ranks bred)."""
    return layout.ranks if layout.scheme == "replicated" else len(layout.leaders)


def _evaluating(layout: Layout, rows: int) -> int:
    """Ranks that hold a core while a batch of ``rows`` is evaluated by every group at
    once. Under the leader schemes a group rank without rows waits for the next order,
    and Open MPI's waits yield the core when ranks outnumber cores (centralized at 1e7
    genes: 2 rows over 4 ranks keep 2 cores busy, not 4); a replicated rank without rows
    waits in the fitness all-gather alike (its replica's breeding, before, is charged
    to every rank by the caller)."""
    return len(layout.leaders) * sum(1 for a, b in row_blocks(rows, layout.group_size) if b > a)


def _rows_seconds(layout, constants, cost, rng, rows: int, busy: int | None = None) -> np.ndarray:
    """Each row's evaluation seconds while ``busy`` ranks hold a core (default
    :func:`_busy`)."""
    fit = constants.child(layout.dim)["row_s"]
    busy = _busy(layout) if busy is None else busy
    # a burn child spins for its seconds of its own CPU time (bench_schemes.burn): only
    # sharing a core stretches it, not the contention that slows the engine's work (a
    # sweep whose calibrations put 2 ranks' contention at 100 genes at 1.28: every 50 ms
    # burn run at P = 2 was +27 % with it, 4.83-4.85 s against the share's 4.80 s)
    extra = cost.draw(rng, rows) * (_stretch(busy, constants.cores) if cost.mode == "burn" else 1.0)
    return fit * constants.stretch(busy, layout.dim) + extra


def _link(layout, constants, a: int, b: int) -> Link:
    return constants.intra if layout.node(a) == layout.node(b) else constants.inter


def _bred_batch_seconds(layout, constants, cost, rng, leader: int, rows: int) -> float:
    """Evaluator breeding: one batch of ``rows`` evaluated (of the island's ``batch``
    bred) over ``leader``'s group: the plan's broadcast, every rank breeding and
    evaluating its block at once, its counts and fitness back."""
    size = layout.group_size
    blocks = row_blocks(layout.batch, size)
    busy = len(layout.leaders) * sum(1 for a, b in blocks if b > a)
    seconds = _rows_seconds(layout, constants, cost, rng, rows, busy)
    breed = constants.child(layout.dim)["breed_s"] * constants.stretch(busy, layout.dim)
    hops = math.ceil(math.log2(size))
    finish = 0.0
    for r, (a, b) in zip(range(leader, leader + size), blocks):
        if b > a:
            back = _link(layout, constants, leader, r).seconds(8 * (2 * (b - a))) if r != leader else 0.0
            finish = max(finish, breed * (b - a) + seconds[a:min(b, rows)].sum() + back)
    return constants.intra.latency_s * hops + finish


def _batch_seconds(layout, constants, cost, rng, leader: int, rows: int) -> float:
    """Evaluate one batch over ``leader``'s group, messages included."""
    size = layout.group_size
    group = list(range(leader, leader + size))
    seconds = _rows_seconds(layout, constants, cost, rng, rows, _evaluating(layout, rows))
    blocks = row_blocks(rows, size)
    block_s = [seconds[a:b].sum() for a, b in blocks]
    if size == 1:
        return block_s[0]
    if layout.scheme == "replicated":
        hops = math.ceil(math.log2(size))
        link = max((_link(layout, constants, group[0], r) for r in group[1:]), key=lambda x: x.latency_s)
        return max(block_s) + link.seconds(8 * rows, hops)
    # order broadcast, blocks sent one after another, each block evaluated on arrival
    hops = 2 * math.ceil(math.log2(size))
    start = constants.intra.latency_s * hops
    finish, sent = block_s[0], start
    for r, (a, b), s in zip(group[1:], blocks[1:], block_s[1:]):
        if b == a:
            continue
        link = _link(layout, constants, leader, r)
        sent += link.seconds((b - a) * layout.row_bytes())
        finish = max(finish, sent + s + link.seconds(8 * (b - a)))
    return finish


def _pulled_seconds(layout, constants, cost, rng, batches: list[int]) -> float:
    """master_worker: the blocks of these batches pulled by the workers, first come first
    served; when the last result is back (a block costs its genomes' and its fitness's
    messages and its rows' evaluation; the workers with a block share the cores, the
    master and the workers without one yield: generational at 1e7 genes, 4 ranks on 2
    cores, cuts each 2-row batch into 2 blocks, so 2 workers run, +7 % to +26 % in four
    commands with all 3 counted)."""
    workers = layout.ranks - 1
    blocks = [block_bounds(rows, workers) for rows in batches]
    busy = min(workers, sum(len(b) for b in blocks))
    free = [0.0] * workers
    for rows, bounds in zip(batches, blocks):
        seconds = _rows_seconds(layout, constants, cost, rng, rows, busy)
        for a, b in bounds:
            start = heapq.heappop(free)
            link = constants.intra.seconds((b - a) * layout.row_bytes()) + constants.intra.seconds(8 * (b - a))
            heapq.heappush(free, start + link + seconds[a:b].sum())
    return max(free)


def _master_worker_run(layout, constants, cost, rng, plan: Traffic) -> float:
    """master_worker: the whole run on rank 0, which holds every island and runs the
    run loop alone (its workers serve the whole run: no generation ends with a release,
    no migration leaves rank 0; logs and records are rank 0's).

    * generation 0: each island's initial population (``init_s`` per genome) and its
      blocks, island by island (``steady``: every island's blocks in one queue);
    * ``generational``: island after island, the master breeds a batch while the
      workers wait (their polls yield the cores: no stretch), then waits for its last block;
    * ``steady``: every island's blocks in one queue; an island whose batch is back
      breeds its next one while the workers evaluate (all ranks busy), also into the
      next generation, except before a migration and at the end of the run: the queue
      drains only there, so the workers wait once per such segment of generations and
      only its first batch's breeding is not overlapped; where the ranks outnumber the
      cores, the overlap takes at least the cores' time for its CPU work
      (:func:`_shared_cores_seconds`).
    """
    c = constants.child(layout.dim)
    initial = [rows for rows in plan.batches[0] if rows]
    if layout.evaluation == "steady":
        wall = c["init_s"] * sum(initial) + _pulled_seconds(layout, constants, cost, rng, initial)
        breed = c["breed_s"] * constants.stretch(layout.ranks, layout.dim)
        for segment in _segments(plan):
            batches = [rows for g in segment for rows in plan.batches[g] if rows]
            head, rest = breed * batches[0], breed * sum(batches[1:])
            wall += head + max(rest, _pulled_seconds(layout, constants, cost, rng, batches),
                               _shared_cores_seconds(layout, constants, cost, sum(batches[1:]), sum(batches)))
    else:
        wall = sum(c["init_s"] * rows + _pulled_seconds(layout, constants, cost, rng, [rows]) for rows in initial)
        wall += sum(c["breed_s"] * rows + _pulled_seconds(layout, constants, cost, rng, [rows])
                    for per_island in plan.batches[1:] for rows in per_island if rows)
    logs = sum(1 for g in range(plan.generations + 1) if g % LOG_EVERY == 0 or g == plan.generations)
    return wall + c["record_s"] * layout.islands * (logs + 1)     # and the final records


def _shared_cores_seconds(layout, constants, cost, bred: int, rows: int) -> float:
    """The least time in which the cores breed ``bred`` children (the master) and do the
    CPU work of ``rows`` rows (the workers) while every rank is busy and the ranks
    outnumber the cores: time-slicing shares the cores out but adds no CPU time beyond
    its calibrated slowdown, so the two stretched terms cannot both run at their own
    stretch (master_worker_steady at 1e7 genes, 4 ranks on 2 cores: -26 % without this
    and -24 % with it, over one sweep); 0 where every rank has a core. Sleeping children
    hold no core."""
    if layout.ranks <= constants.cores:
        return 0.0
    c = constants.child(layout.dim)
    burn = cost.seconds * rows if cost.mode == "burn" else 0.0      # CPU time: no slowdown (_rows_seconds)
    # CPU work x slowdown / cores, where stretch = ranks / cores x slowdown
    engine = (c["breed_s"] * bred + c["row_s"] * rows) * constants.stretch(layout.ranks, layout.dim)
    return engine / layout.ranks + burn / constants.cores


def _segments(plan: Traffic) -> list[list[int]]:
    """Generations 1..G cut after each migrating generation and at the last one."""
    segments, current = [], []
    for g in range(1, plan.generations + 1):
        current.append(g)
        if g in plan.migrations or g == plan.generations:
            segments.append(current)
            current = []
    return [s for s in segments if any(any(plan.batches[g]) for g in s)]


def migration_seconds(layout, constants, generation: int) -> float:
    """The busiest rank's messages (sent and received) of a migration in ``generation``.

    Example:
        >>> from mpievo.plan.traffic import Layout
        >>> lay = Layout("island", ranks=2, islands=2, dim=1000, capacity=4, batch=4, generations=2, interval=2)
        >>> c = Constants({}, Link(0.0, 1e9), Link(0.0, 1e9), cores=2)
        >>> round(migration_seconds(lay, c, 2) * 1e6, 2)    # 2 rows of 4 kB, records, hashes: each way
        16.22
    """
    per_rank: dict[int, float] = {}
    for m in migration_messages(layout, generation):
        t = _link(layout, constants, m.src, m.dst).seconds(m.nbytes)
        per_rank[m.src] = per_rank.get(m.src, 0.0) + t
        per_rank[m.dst] = per_rank.get(m.dst, 0.0) + t
    return max(per_rank.values(), default=0.0)


def _homes(layout: Layout) -> list[int]:
    """Each island's holder (world rank; replicated: rank 0 speaks for the replicas)."""
    leaders = layout.leaders
    n = layout.islands
    return [leaders[rank_of_island(i, n, len(leaders))] if layout.scheme != "replicated" else 0
            for i in range(n)]


def _one_run(layout, constants, cost, plan: Traffic, rng) -> float:
    """The simulated wall time of one run, the run loop's fixed costs excluded."""
    c = constants.child(layout.dim)
    cpu = constants.stretch(_breeding(layout), layout.dim)
    home = _homes(layout)
    held = {r: home.count(r) for r in layout.leaders}
    if layout.scheme == "master_worker" and layout.ranks > 1:
        return _master_worker_run(layout, constants, cost, rng, plan)
    wall, pending = 0.0, dict.fromkeys(layout.leaders, 0.0)   # per holder: work since the last sync
    last = plan.generations
    for g, per_island in enumerate(plan.batches):
        for i, rows in enumerate(per_island):
            if rows and layout.bred_by_evaluators(g):      # the leader draws decisions only
                pending[home[i]] += _bred_batch_seconds(layout, constants, cost, rng, home[i], rows)
            elif rows:
                work = (c["breed_s"] if g else c["init_s"]) * rows * cpu
                pending[home[i]] += work + _batch_seconds(layout, constants, cost, rng, home[i], rows)
        if layout.scheme in ("hybrid", "centralized") and layout.group_size > 1:
            for r in layout.leaders:      # the release broadcast
                pending[r] += constants.intra.latency_s * 2 * math.ceil(math.log2(layout.group_size))
        logged = g % LOG_EVERY == 0 or g == last
        if logged:      # the run loop gathers every island's record
            for r in pending:
                pending[r] += c["record_s"] * held[r] * cpu
        if logged or g in plan.migrations:
            wall += max(pending.values()) + (migration_seconds(layout, constants, g)
                                             if g in plan.migrations else 0.0)
            pending = dict.fromkeys(pending, 0.0)
    return wall + c["record_s"] * max(held.values()) * cpu     # the final records


def predict_seconds(layout: Layout, constants: Constants, cost: Cost = Cost(), loop: bool = True) -> dict:
    """{"wall_s", "per_generation_s"} of the run (mean over :data:`SAMPLES` draws);
    ``loop=False`` leaves out the run loop's fixed costs (what calibration measures them by)."""
    plan = traffic(layout)
    rng = np.random.default_rng(0)
    samples = SAMPLES if cost.mode == "vary" else 1
    run_s, step_s = constants.loop_costs(layout) if loop else (0.0, 0.0)
    wall = run_s + step_s * plan.generations + float(np.mean(
        [_one_run(layout, constants, cost, plan, rng) for _ in range(samples)]))
    return {"wall_s": wall, "per_generation_s": wall / max(plan.generations, 1)}


MODELLED = ("evaluation", "migration")     # the purposes :mod:`.traffic` counts
#: the issue's bound on the model's time error (predicted / measured - 1) that
#: ``mpievo bench schemes`` checks
TIME_BOUND = 0.25


def predict_row(row: dict, interval: int, constants: Constants) -> dict:
    """The model next to one ``mpievo bench schemes`` row: bytes of the modelled purposes
    per generation (predicted, measured: equal when the model is right) and the wall
    time's relative error (predicted / measured - 1)."""
    from .traffic import bench_layout

    layout = bench_layout(row, interval=interval)
    plan = traffic(layout)
    measured = sum(n for p, n in row["bytes_per_generation_by_purpose"].items() if p in MODELLED)
    predicted = sum(n for p, n in plan.by_purpose().items() if p in MODELLED) / max(plan.generations, 1)
    wall = predict_seconds(layout, constants, Cost(row["cost_ms"] / 1e3, row["mode"]))["wall_s"]
    return {"model_bytes_per_generation": predicted, "measured_modelled_bytes_per_generation": measured,
            "model_bytes_exact": round(predicted * row["generations"]) == round(measured * row["generations"]),
            "model_wall_s": wall, "model_time_error": wall / row["wall_s"] - 1}


def model_rows(rows: list[dict], interval: int, constants: Constants) -> list[str]:
    """Put :func:`predict_row` in every bench row; the runs whose bytes the model misses."""
    wrong = []
    for row in rows:
        row.update(predict_row(row, interval, constants))
        if not row["model_bytes_exact"]:
            wrong.append(f"{row['workload']}, {row['scheme']}, P={row['ranks']}: expected the model's "
                         f"{row['model_bytes_per_generation']:.1f} evaluation and migration bytes per "
                         f"generation, got {row['measured_modelled_bytes_per_generation']:.1f}")
    return wrong


def outside_bound(row: dict) -> bool:
    """The row's modelled time is off by more than :data:`TIME_BOUND`."""
    error = row.get("model_time_error")
    return error is not None and abs(error) > TIME_BOUND


def time_outliers(rows: list[dict]) -> list[str]:
    """The runs whose modelled time is off by more than :data:`TIME_BOUND` (a one-rank
    run, reported under every scheme, once), with the 1-minute load average they ran at."""
    return [f"{r['workload']}, {'every scheme' if r['ranks'] == 1 else r['scheme']}, P={r['ranks']}: "
            f"expected the model's {r['model_wall_s']:.4g} s within {100 * TIME_BOUND:.0f} % of the measured "
            f"wall time, got {r['wall_s']:.4g} s ({100 * r['model_time_error']:+.0f} %, load average "
            f"{r['loadavg_1min']:.2f})"
            for r in rows if outside_bound(r) and (r["ranks"] > 1 or r["scheme"] == "island")]
