"""A cost model of the parallel schemes (``run.scheme``): the bytes each one sends.

:func:`traffic` lists every counted message of a GA run -- who sends, to whom, how many
bytes, for what purpose -- from the layout alone, the way the schemes send them:

* **migration** (island scheme over all ranks; hybrid and centralized over the group
  leaders): per remote edge a records block of ``8 + 32k`` bytes (one buffer per rank
  pair) and a genome array of ``k * dim * itemsize`` bytes (always ``k`` rows, padded),
  and for elite-unique migration the receiver's ``8 * (capacity + 1)`` bytes of hashes
  (:mod:`.packing`);
* **evaluation** (hybrid, centralized): per batch the leader's pickled order
  ``("evaluate", n, dtype, False)`` to every other rank of its group, each rank's row
  block of genomes, 8 bytes of fitness per row back, and after every generation the
  pickled ``("release", run_state)``; the pickles are made here from the same objects,
  so their sizes are exact (:mod:`.groups`). With ``breed = "evaluator"``
  (:mod:`mpievo.parallel.breed_local`) a bred batch sends no rows nor order under
  "evaluation": each rank sends back its block's mutation counts and the fitness of
  its evaluated rows, 8 bytes each (the plan's broadcast and the survivors' slots are
  "breeding", not modelled: the slots' count is the run's); generation 0 goes as rows;
* **evaluation** (replicated): the all-gather of every batch's fitness, each rank's
  block counted once per other rank (:mod:`.replicated`);
* **evaluation** (master_worker): per block of a batch (:func:`.master_worker.block_bounds`)
  the pickled ``("evaluate", rows)`` to a worker and the pickled fitness back, and at the
  end of the run the pickled summons ``("release", {"kind": "finish", ...})`` to every
  worker, each message with its 8-byte length (:mod:`.master_worker`: workers serve the
  whole run); which worker takes a block is decided
  at run time, so its messages are put on the link from rank 0 to rank 1 (their bytes
  are exact, their link class is not); generational and steady send the same bytes.

Summed over ranks this is what ``mpievo bench schemes`` counts for these purposes. Not
modelled: the run loop's reporting (purposes ``control`` and ``global_best``: pickled
island records at log lines and at the end, the same order of bytes for every scheme
and independent of the genome size) and adaptive migration intervals.
:mod:`.timing` turns the messages into time; :mod:`.scenario` is the design
study's scenario.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import numpy as np

from ..comm.pickles import message_bytes
from ..rules.budget import budget_rounds, evaluation_shares
from ..parallel.groups import row_blocks
from ..rules.mapping import rank_of_island
from ..parallel.master_worker import block_bounds
from ..parallel.scheme import SCHEME_FORMAT, IslandScheme
from ..rules.topology import build_topology

SCHEMES = ("island", "hybrid", "centralized", "replicated", "master_worker")


@dataclass(frozen=True)
class Layout:
    """One run to model: a GA on ``islands`` islands over ``ranks`` ranks.

    ``ranks_per_island`` is the hybrid group size (``ranks_per_node`` for "node");
    ``ranks_per_node`` splits ranks into nodes for the link classes. ``generations``
    bounds the run when ``budget`` is None. ``evaluation`` is master_worker's
    ``engine.evaluation``; ``breed`` hybrid's and centralized's ``run.breed``.
    """

    scheme: str
    ranks: int
    islands: int
    dim: int
    capacity: int
    batch: int
    itemsize: int = 4
    interval: int = 10
    emigrants: int = 2
    unique: bool = True
    topology: str = "ring"
    ranks_per_island: int = 1
    ranks_per_node: int = 0       # 0: every rank on one node
    budget: int | None = None
    generations: int | None = None
    dtype: str = "<f4"
    wire_row_bytes: int = 0       # bytes a genome travels as (0: dim * itemsize; 8: a seed)
    evaluation: str = "generational"
    breed: str = "leader"         # run.breed: "evaluator": each group rank breeds its own block

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"expected a scheme among {SCHEMES}, got {self.scheme!r}")
        if self.budget is None and self.generations is None:
            raise ValueError("expected a budget or a generation count, got neither")
        if self.ranks % self.group_size:
            raise ValueError(f"expected a rank count divisible by the group size {self.group_size}, "
                             f"got {self.ranks}")
        if self.breed not in ("leader", "evaluator"):
            raise ValueError(f"breed: expected 'leader' or 'evaluator', got {self.breed!r}")
        if self.breed == "evaluator" and self.scheme not in ("hybrid", "centralized"):
            raise ValueError(f"breed: expected 'leader' with scheme {self.scheme!r} (evaluator breeding is "
                             f"hybrid's and centralized's), got 'evaluator'")
        if self.islands < self.ranks // self.group_size and self.scheme != "replicated":
            raise ValueError(f"expected at least one island per group ({self.ranks // self.group_size}), "
                             f"got {self.islands}")

    @property
    def group_size(self) -> int:
        """Ranks per evaluating group: 1 (island), K (hybrid), every rank (centralized,
        replicated, master_worker)."""
        return {"island": 1, "hybrid": self.ranks_per_island}.get(self.scheme, self.ranks)

    @property
    def leaders(self) -> list[int]:
        """World ranks that hold islands and migrate (every rank for the island scheme)."""
        if self.scheme == "replicated":
            return [0]
        return list(range(0, self.ranks, self.group_size))

    def node(self, rank: int) -> int:
        return rank // self.ranks_per_node if self.ranks_per_node else 0

    def row_bytes(self) -> int:
        return self.wire_row_bytes or self.dim * self.itemsize

    def bred_by_evaluators(self, generation: int) -> bool:
        """Whether the group's ranks breed this generation's batches themselves
        (evaluator breeding after generation 0, whose genomes go as rows)."""
        return self.breed == "evaluator" and generation > 0 and self.group_size > 1


@dataclass(frozen=True)
class Message:
    src: int
    dst: int
    nbytes: int
    purpose: str


@dataclass
class Traffic:
    """Every counted message of a run, and its shape (generations, batches, migrations)."""

    layout: Layout
    generations: int
    batches: list[list[int]]           # per generation (0: initial populations): rows per island
    migrations: list[int]              # generations that migrate
    messages: list[Message] = field(default_factory=list)

    def total(self, purpose: str | None = None) -> int:
        return sum(m.nbytes for m in self.messages if purpose is None or m.purpose == purpose)

    def by_purpose(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in self.messages:
            out[m.purpose] = out.get(m.purpose, 0) + m.nbytes
        return dict(sorted(out.items()))

    def per_generation(self) -> dict[str, float]:
        """Bytes per generation by purpose, as the bench divides them (over ``generations``)."""
        return {p: n / max(self.generations, 1) for p, n in self.by_purpose().items()}

    def by_link(self) -> dict[str, int]:
        """Bytes over intra-node and inter-node links."""
        out = {"intra": 0, "inter": 0}
        for m in self.messages:
            out["intra" if self.layout.node(m.src) == self.layout.node(m.dst) else "inter"] += m.nbytes
        return out


# ---------------------------------------------------------------- run shape
def batches(layout: Layout) -> tuple[int, list[list[int]]]:
    """(generations, rows each island evaluates in each generation, generation 0 first)
    for GA islands of ``capacity`` and ``batch`` (one batch per island per generation;
    the last one cut to the island's budget share)."""
    n, initial, size = layout.islands, layout.capacity, layout.batch
    if layout.budget is None:
        return layout.generations, [[initial] * n] + [[size] * n for _ in range(layout.generations)]
    shares = evaluation_shares(layout.budget, n)
    last = budget_rounds(shares, [initial] * n, size)
    if layout.generations is not None:
        last = min(last, layout.generations)
    rows = [[initial] * n]
    for g in range(1, last + 1):
        rows.append([max(0, min(size, share - initial - (g - 1) * size)) for share in shares])
    return last, rows


def run_states(layout: Layout, generations: int) -> tuple[list[int], list[dict]]:
    """(migrating generations, the island scheme's run state after each generation 0..G)."""
    migrations, states, next_migration, count = [], [], layout.interval, 0
    for g in range(generations + 1):
        if g and g == next_migration:
            migrations.append(g)
            count += 1
            next_migration = g + layout.interval
        states.append({"scheme": IslandScheme.name, "format": SCHEME_FORMAT, "generation": g,
                       "n_islands": layout.islands, "interval": layout.interval,
                       "next_migration": next_migration, "migrations": count,
                       "emigrants": layout.emigrants})
    return migrations, states


class _Counter:
    """A file that only counts what a pickler writes (a large array's data arrives as
    one buffer, never copied nor read)."""

    def __init__(self):
        self.nbytes = 0

    def write(self, data) -> None:
        self.nbytes += memoryview(data).nbytes


def pickled(obj) -> int:
    """The bytes of ``obj``'s pickle as the object calls send it (``pickle.dumps``)."""
    counter = _Counter()
    pickle.Pickler(counter, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return counter.nbytes


# ---------------------------------------------------------------- messages
def migration_messages(layout: Layout, generation: int) -> list[Message]:
    """One migration among the leaders (world ranks), every island on its leader."""
    leaders = layout.leaders
    if layout.scheme == "replicated" or layout.emigrants == 0:
        return []           # replicas migrate in memory
    destinations = build_topology(layout.topology, layout.islands, seed=0)(generation)
    home = [leaders[rank_of_island(i, layout.islands, len(leaders))] for i in range(layout.islands)]
    out = []
    for s in range(layout.islands):
        for d in sorted(destinations[s]):
            if home[s] == home[d]:
                continue
            k = layout.emigrants
            out.append(Message(home[s], home[d], 8 + 32 * k, "migration"))
            out.append(Message(home[s], home[d], k * layout.row_bytes(), "migration"))
            if layout.unique:
                out.append(Message(home[d], home[s], 8 * (layout.capacity + 1), "migration"))
    return out


def group_of(layout: Layout, leader: int) -> list[int]:
    return list(range(leader, leader + layout.group_size))


def batch_messages(layout: Layout, leader: int, rows: int, generation: int = 1) -> list[Message]:
    """One island batch of ``rows`` evaluated by ``leader``'s group in ``generation``."""
    group = group_of(layout, leader)
    if layout.scheme == "island" or rows == 0 or len(group) == 1:
        return []
    if layout.bred_by_evaluators(generation):     # counts and fitness of the batch's blocks
        return [Message(r, leader, 8 * ((b - a) + max(0, min(b, rows) - a)), "evaluation")
                for r, (a, b) in zip(group[1:], row_blocks(layout.batch, len(group))[1:]) if b > a]
    blocks = row_blocks(rows, len(group))
    if layout.scheme == "replicated":     # every rank's fitness block to every other rank
        return [Message(r, o, 8 * (b - a), "evaluation")
                for r, (a, b) in zip(group, blocks) for o in group if o != r and b > a]
    if layout.scheme == "master_worker":
        return pulled_messages(layout, rows)
    order = pickled(("evaluate", rows, layout.dtype, False))
    out = [Message(leader, r, order, "evaluation") for r in group[1:]]
    for r, (a, b) in zip(group[1:], blocks[1:]):
        if b > a:
            out.append(Message(leader, r, (b - a) * layout.row_bytes(), "evaluation"))
            out.append(Message(r, leader, 8 * (b - a), "evaluation"))
    return out


def pulled_messages(layout: Layout, rows: int) -> list[Message]:
    """One batch of ``rows`` evaluated by master_worker's workers, block by block."""
    out = []
    for a, b in block_bounds(rows, layout.ranks - 1):
        block = np.empty((b - a, layout.dim), layout.dtype)     # never touched: only its pickle's size
        out.append(Message(0, 1, message_bytes(("evaluate", block)), "evaluation"))
        out.append(Message(1, 0, message_bytes(np.empty(b - a, np.float64)), "evaluation"))
    return out


def release_messages(layout: Layout, leader: int, state: dict) -> list[Message]:
    """hybrid, centralized: after every generation the leader's pickled release."""
    if layout.scheme not in ("hybrid", "centralized") or layout.group_size == 1:
        return []
    size = pickled(("release", state))
    return [Message(leader, r, size, "evaluation") for r in group_of(layout, leader)[1:]]


def summon_messages(layout: Layout, state: dict) -> list[Message]:
    """master_worker: the workers serve the whole run; at its end rank 0 summons each
    one with the run's end and state (:meth:`.master_worker.MasterWorkerScheme.summon`)."""
    if layout.scheme != "master_worker" or layout.ranks == 1:
        return []
    call = {"kind": "finish", "reason": end_reason(layout), "run_state": state}
    size = message_bytes(("release", call))
    return [Message(0, r, size, "evaluation") for r in range(1, layout.ranks)]


def end_reason(layout: Layout) -> str:
    """The run loop's stop reason: "budget" when the budget ends the run first."""
    if layout.budget is None:
        return "generations"
    generations, _ = batches(dataclasses.replace(layout, generations=None))
    return "budget" if layout.generations is None or generations <= layout.generations else "generations"


def traffic(layout: Layout) -> Traffic:
    """Every counted message of the run (see the module docstring)."""
    generations, rows = batches(layout)
    migrations, states = run_states(layout, generations)
    out = Traffic(layout, generations, rows, migrations)
    leaders = layout.leaders
    for g, per_island in enumerate(rows):
        for island, n in enumerate(per_island):
            leader = leaders[rank_of_island(island, layout.islands, len(leaders))]
            out.messages += batch_messages(layout, leader, n, g)
        if g in migrations:
            out.messages += migration_messages(layout, g)
        for leader in leaders:
            out.messages += release_messages(layout, leader, states[g])
    out.messages += summon_messages(layout, states[generations])
    return out


def bench_layout(row: dict, *, interval: int) -> Layout:
    """The :class:`Layout` of one ``mpievo bench schemes`` row (float32 genomes, default
    migration policy and ring, the default block rows)."""
    from .workloads import run_breed, run_scheme

    scheme, evaluation = run_scheme(row["scheme"])
    breed = run_breed(row["scheme"]) if row["ranks"] > 1 else "leader"     # one rank: the island run
    return Layout(scheme=scheme, ranks=row["ranks"], islands=row["islands"], dim=row["dim"],
                  capacity=row["capacity"], batch=row["capacity"], interval=interval,
                  ranks_per_island=row["ranks_per_island"], budget=row["budget"], evaluation=evaluation,
                  breed=breed)
