"""The cost model's time: a run's wall time from its messages (:mod:`.plan`) and constants.

A run is simulated generation by generation on its critical path:

* computation: a child costs ``breed_s`` on the rank that breeds it (the leader; every
  rank under "replicated") and ``row_s`` plus the workload's cost on the rank that
  evaluates it; CPU work is stretched by ``ranks / cores`` when ranks outnumber cores
  (Open MPI ranks spin while they wait, so a waiting rank still holds its core);
* a batch cut into row blocks waits for its slowest block; an island-scheme rank
  waits for the slowest rank only where ranks synchronise (migrations, log lines);
* master_worker's blocks go to whichever worker is free first: generational waits
  for each island's batch, steady only for the generation's blocks of every island;
* a message costs its link's latency plus bytes / bandwidth (intra- or inter-node);
  a leader sends its blocks one after another; collectives take ``ceil(log2 P)`` latencies.

A child's cost in "vary" mode is drawn like the bench's (uniform factor in
:data:`.bench_schemes.VARY_RANGE`, mean 1), and the wall time is the mean over
:data:`SAMPLES` seeded draws, so predictions are repeatable.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .bench_schemes import VARY_RANGE
from .groups import row_blocks
from .mapping import rank_of_island
from .master_worker import block_bounds
from .plan import Layout, Traffic, migration_messages, traffic

SAMPLES = 32
LOG_EVERY = 10      # run.log_every's default: the run loop gathers (and syncs) then


@dataclass(frozen=True)
class Link:
    latency_s: float
    bandwidth_Bps: float

    def seconds(self, nbytes: int, messages: int = 1) -> float:
        return messages * self.latency_s + nbytes / self.bandwidth_Bps


@dataclass(frozen=True)
class Constants:
    """Per-child engine costs at calibrated dims, the links and the cores."""

    engine: dict             # {dim: {"row_s": .., "breed_s": ..}}
    intra: Link
    inter: Link
    cores: int
    source: str = ""
    run_s: float = 0.0       # a run's fixed cost (start, initial populations, log lines, finish)

    @classmethod
    def load(cls, path, inter: Link | None = None) -> "Constants":
        """From a ``mpievo plan --calibrate`` JSON file; ``inter`` defaults to the intra link."""
        data = json.loads(Path(path).read_text())
        return cls.from_dict(data, inter)

    @classmethod
    def from_dict(cls, data: dict, inter: Link | None = None) -> "Constants":
        intra = Link(**data["intra"])
        engine = {int(d): dict(v) for d, v in data["engine"].items()}
        return cls(engine, intra, inter or intra, int(data["cores"]), data.get("source", ""),
                   float(data.get("run_s", 0.0)))

    def child(self, dim: int) -> tuple[float, float]:
        """(fitness seconds, other engine seconds) per child at ``dim`` genes: the
        calibrated dim's, or per gene from the largest calibrated dim below ``dim``."""
        if dim in self.engine:
            c = self.engine[dim]
            return c["row_s"], c["breed_s"]
        below = [d for d in self.engine if d <= dim] or [min(self.engine)]
        base = max(below)
        c = self.engine[base]
        return c["row_s"] * dim / base, c["breed_s"] * dim / base


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


def _stretch(layout: Layout, constants: Constants) -> float:
    return max(1.0, layout.ranks / constants.cores)


def _rows_seconds(layout, constants, cost, rng, rows: int) -> np.ndarray:
    """Each row's evaluation seconds."""
    fit, _ = constants.child(layout.dim)
    cpu = _stretch(layout, constants)
    extra = cost.draw(rng, rows) * (cpu if cost.mode == "burn" else 1.0)
    return fit * cpu + extra


def _link(layout, constants, a: int, b: int) -> Link:
    return constants.intra if layout.node(a) == layout.node(b) else constants.inter


def _batch_seconds(layout, constants, cost, rng, leader: int, rows: int) -> float:
    """Evaluate one batch over ``leader``'s group, messages included."""
    size = layout.group_size if layout.scheme != "island" else 1
    group = list(range(leader, leader + size))
    seconds = _rows_seconds(layout, constants, cost, rng, rows)
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
    messages and its rows' evaluation)."""
    workers = layout.ranks - 1
    free = [0.0] * workers
    for rows in batches:
        seconds = _rows_seconds(layout, constants, cost, rng, rows)
        for a, b in block_bounds(rows, workers):
            start = heapq.heappop(free)
            link = constants.intra.seconds((b - a) * layout.row_bytes()) + constants.intra.seconds(8 * (b - a))
            heapq.heappush(free, start + link + seconds[a:b].sum())
    return max(free)


def _generation_seconds(layout, constants, cost, rng, per_island: list[int]) -> float:
    """master_worker: one generation's batches (one after another unless steady)."""
    batches = [rows for rows in per_island if rows]
    if layout.evaluation == "steady":
        return _pulled_seconds(layout, constants, cost, rng, batches)
    return sum(_pulled_seconds(layout, constants, cost, rng, [rows]) for rows in batches)


def _migration_seconds(layout, constants, generation: int) -> float:
    """The busiest rank's migration messages (sent and received)."""
    per_rank: dict[int, float] = {}
    for m in migration_messages(layout, generation):
        t = _link(layout, constants, m.src, m.dst).seconds(m.nbytes)
        per_rank[m.src] = per_rank.get(m.src, 0.0) + t
        per_rank[m.dst] = per_rank.get(m.dst, 0.0) + t
    return max(per_rank.values(), default=0.0)


def _one_run(layout, constants, cost, plan: Traffic, rng) -> float:
    _, breed = constants.child(layout.dim)
    breed *= _stretch(layout, constants)
    leaders = layout.leaders
    n = layout.islands
    home = [leaders[rank_of_island(i, n, len(leaders))] if layout.scheme != "replicated" else 0
            for i in range(n)]
    wall, pending = 0.0, {r: 0.0 for r in leaders}   # per holder: work since the last sync
    last = plan.generations
    pulled = layout.scheme == "master_worker" and layout.ranks > 1
    for g, per_island in enumerate(plan.batches):
        if pulled:      # every island on rank 0, its workers released every generation
            pending[0] += ((breed * sum(per_island) if g else 0.0) + constants.intra.latency_s
                           + _generation_seconds(layout, constants, cost, rng, per_island))
        else:
            for i, rows in enumerate(per_island):
                if rows:
                    work = breed * rows if g else 0.0
                    pending[home[i]] += work + _batch_seconds(layout, constants, cost, rng, home[i], rows)
        if layout.scheme in ("hybrid", "centralized") and layout.group_size > 1:
            for r in leaders:      # the release broadcast
                pending[r] += constants.intra.latency_s * 2 * math.ceil(math.log2(layout.group_size))
        synced = g in plan.migrations or g % LOG_EVERY == 0 or g == last
        if synced:
            wall += max(pending.values()) + (_migration_seconds(layout, constants, g)
                                             if g in plan.migrations else 0.0)
            pending = dict.fromkeys(pending, 0.0)
    return wall


def predict_seconds(layout: Layout, constants: Constants, cost: Cost = Cost()) -> dict:
    """{"wall_s", "per_generation_s"} of the run (mean over :data:`SAMPLES` draws)."""
    plan = traffic(layout)
    rng = np.random.default_rng(0)
    samples = SAMPLES if cost.mode == "vary" else 1
    wall = constants.run_s + float(np.mean([_one_run(layout, constants, cost, plan, rng)
                                             for _ in range(samples)]))
    return {"wall_s": wall, "per_generation_s": wall / max(plan.generations, 1)}


MODELLED = ("evaluation", "migration")     # the purposes :mod:`.plan` counts


def predict_row(row: dict, interval: int, constants: Constants) -> dict:
    """The model next to one ``mpievo bench schemes`` row: bytes of the modelled purposes
    per generation (predicted, measured: equal when the model is right) and the wall
    time's relative error (predicted / measured - 1)."""
    from .plan import bench_layout

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
