"""The cost model of children bred where they are evaluated, with pipelined evaluation.

The path of issue 40 (items 2 and 3): an island's archive (and, for seeded genomes, its
sources) lives once per node, and every evaluating rank breeds its own children from it
with the counter-based draws, writing each child straight into its model's buffer; only
fitness values cross ranks (an all-gather: every rank then takes the survivors'
decisions itself), and a child that enters the archive is written into its row once, by
the rank that bred it. While one child is evaluated the next is made into a second
buffer (a host thread; a second CUDA stream on a device).

Per generation of one island over the ``gpus`` evaluating ranks of its node, the rank
with the most children (``k = ceil(batch / gpus)``) sets the time:

* **making a child** (:func:`make_seconds`): the larger of the kernel's own rate
  (``breed_Bps``, bytes of child per second: compute-bound where every gene draws a
  normal) and the memory traffic it needs -- dense: the parents' rows read once, the
  child written once; seeded: every base read once, the child written once -- over the
  path the rows live on (:data:`PLACEMENTS`): ``host`` (the node's shared memory, read
  over each GPU's PCIe link, all GPUs sharing the host memory's bandwidth), ``replica``
  and ``rebuild`` (a copy of the rows on every GPU: local reads), or ``peer`` (each GPU holds
  ``capacity / gpus`` rows, read by the others over NVLink through CUDA IPC: a
  busiest GPU serves the rows tournament selection favours, :func:`busiest_share`);
* **the pipeline** (:func:`evaluation_seconds`): ``make + (k - 1) * per_child + eval``
  with ``per_child = eval + max(0, make - spare * eval)``: the next child's make runs
  beside the evaluation with the share ``spare`` of the device the evaluation leaves it
  (1: a core or device of its own, the steady state ``max(make, eval)``; 0: none, the
  two in series). A generation's children need the previous generation's survivors, so
  the pipeline fills and drains once per generation: with one child per rank (``k =
  1``) nothing is hidden;
* **the survivors' rows** (:func:`survivor_seconds`): ``survivors`` children per
  generation enter the archive; replica: each is copied into its breeder's replica and
  broadcast to the other GPUs (every GPU receives ``survivors * (gpus - 1) / gpus`` rows
  over NVLink); rebuild: every GPU makes again, from the plan's counters, each survivor
  another GPU bred (no row crosses; ``survivors * (gpus - 1) / gpus`` makes per GPU);
  peer: its breeder writes it into the row it replaces, on another GPU
  ``(gpus - 1) / gpus`` of the time; host: over its breeder's PCIe link. The next
  generation reads them: on the critical path. Seeded archives hold recipes: bytes;
* the fitness all-gather (``ceil(log2 gpus)`` latencies), the migration of the study's
  scheme between nodes (:mod:`mpievo.plan.timing` of the same layout, averaged per
  generation), and a checkpoint's snapshot of the rows changed since the previous one
  every ``checkpoint_every`` generations (0: none; written in the background after it).

Several islands per node (``Island.islands``: each of ``batch``, its children in one
queue the node's GPUs take from, as master-worker's ``steady`` evaluation does): while
one island's batch is evaluated, another's children are made on the second stream and
its survivors' rows written, so a round of every island's generation takes the larger
of the GPUs' throughput (``k_all`` evaluations of the round's ``ceil(islands * batch /
gpus)`` children a GPU, plus the second stream's makes and rebuilds beyond the
``spare`` share of them) and one island's own generation above (its dependency
chain); each island's draws and results stay its own, so its bits are the island
model's. The queue fills once at generation 0 (one make before any evaluation, counted
by :func:`run_seconds`) and drains before each migration (the table's generations end
with their one migration: the refill after it falls outside them).

The node's constants (:class:`Node`) are flags of ``mpievo plan --scenario design``:
the device traffic is the device copy of ``mpievo bench gpu`` on an H100 (breeding at
141-146 GB/s of child was 0.13-0.15x the copy's ~1 TB/s of traffic); NVLink, PCIe and
host memory are nominal figures, not measured here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

PLACEMENTS = ("host", "replica", "peer", "rebuild")
#: the placements with the rows on the GPUs, among which :func:`choose` picks
DEVICE_PLACEMENTS = ("replica", "peer", "rebuild")
#: seeded draws of the busiest GPU's share of the parents' rows (:func:`busiest_share`)
SHARE_SAMPLES = 256


@dataclass(frozen=True)
class Node:
    """A node's paths, in bytes per second (one direction) and bytes.

    Example:
        >>> Node().gpus, Node(device_Bps=2e12).device_Bps
        (8, 2000000000000.0)
    """

    gpus: int = 8
    device_Bps: float = 1.0e12     # device memory traffic (read + write); mpievo bench gpu, H100
    peer_Bps: float = 400e9        # NVLink per GPU and direction (H100 SXM nominal 450, ~90 % of it)
    pcie_Bps: float = 50e9         # host <-> device per GPU (PCIe 5 x16 nominal 64)
    host_Bps: float = 400e9        # the node's host memory, shared by every GPU reading it
    device_bytes: float = 80e9     # memory per GPU (H100)
    latency_s: float = 5e-6        # a message inside the node


@dataclass(frozen=True)
class Island:
    """One island's children on one node's evaluating ranks (a GA: two parents a child).

    ``genome_bytes`` is a child's buffer; ``row_bytes`` an archive row (dense: the
    genome; seeded: its recipe); ``bases`` the sources a seeded child reads (0: dense,
    which reads ``parents`` rows); ``survivors`` the children entering the archive per
    generation (an assumption: it changes over a run); ``spare`` the share of the device
    a make on the second stream gets while an evaluation runs; ``islands`` the islands
    like this one that share the node's GPUs (interleaved, see the module docstring).

    Example:
        >>> isl = Island(genome_bytes=3e9, row_bytes=3e9, capacity=16, batch=8, eval_s=0.1,
        ...              breed_Bps=141e9)
        >>> isl.children(Node()), round(isl.traffic() / 1e9)
        (1, 9)
    """

    genome_bytes: float
    row_bytes: float
    capacity: int
    batch: int
    eval_s: float
    breed_Bps: float
    parents: int = 2
    bases: int = 0
    survivors: float = 4.0
    spare: float = 0.5
    pipelined: bool = True
    checkpoint_every: int = 0
    islands: int = 1

    def __post_init__(self):
        if not 0.0 <= self.spare <= 1.0:
            raise ValueError(f"spare: expected a share of the device in [0, 1], got {self.spare}")
        if self.batch < 1 or self.capacity < 1 or self.islands < 1:
            raise ValueError(f"batch, capacity, islands: expected >= 1, got {self.batch}, {self.capacity}, "
                             f"{self.islands}")

    @property
    def seeded(self) -> bool:
        return self.bases > 0

    def children(self, node: Node, rows: int | None = None) -> int:
        """Children of the busiest evaluating rank in a batch of ``rows`` (default the batch)."""
        return math.ceil((self.batch if rows is None else rows) / node.gpus)

    def reads(self) -> float:
        """Bytes a child reads: its parents' rows (dense) or every base (seeded)."""
        return (self.bases if self.seeded else self.parents) * self.genome_bytes

    def traffic(self) -> float:
        """The memory traffic a child needs: its reads once, its buffer written once."""
        return self.reads() + self.genome_bytes


@functools.lru_cache(maxsize=1024)
def busiest_share(node: Node, island: Island, samples: int = SHARE_SAMPLES) -> float:
    """Peer placement: the expected largest number of parent rows one GPU serves to the
    others in a generation (binary tournaments over the archive, its members' fitness
    ranks placed on the GPUs at random, ``capacity / gpus`` rows each; seeded draws, so
    repeatable; fewer of them for larger batches, which average over more picks each).

    Example:
        >>> busiest_share(Node(gpus=1), Island(3e9, 3e9, 16, 8, 0.1, 141e9))
        0.0
    """
    if node.gpus == 1:
        return 0.0
    rng = np.random.default_rng(0)
    picks = island.batch * island.parents
    samples = max(32, samples * 16 // max(picks, 16))      # as many picks in all from a batch of 8 up
    reader = np.repeat(np.arange(island.batch) % node.gpus, island.parents)
    # each draw: the GPU of each fitness rank (capacity / gpus ranks each, at random) ...
    owner = np.argsort(rng.random((samples, island.capacity)), axis=1) % node.gpus
    # ... and each parent's fitness rank: the better of two uniform draws
    draws = rng.integers(0, island.capacity, (2, samples, picks))
    served = np.take_along_axis(owner, np.minimum(draws[0], draws[1]), axis=1)
    remote = served != reader
    slot = (np.arange(samples)[:, None] * node.gpus + served)[remote]       # (draw, serving GPU)
    counts = np.bincount(slot, minlength=samples * node.gpus).reshape(samples, node.gpus)
    return float(counts.max(axis=1).mean())


def fits(node: Node, island: Island, placement: str) -> bool:
    """Whether the placement's rows, sources and two model buffers fit one GPU.

    Example:
        >>> isl = Island(3e9, 3e9, 16, 8, 0.1, 141e9)     # 16 rows + 2 buffers of 3 GB
        >>> fits(Node(), isl, "replica"), fits(Node(device_bytes=40e9), isl, "replica")
        (True, False)
    """
    return device_bytes(node, island, placement) <= node.device_bytes


def device_bytes(node: Node, island: Island, placement: str) -> float:
    """Bytes per GPU: two model buffers, and the archive (and seeded sources) held there:
    all of them (replica), a GPU's share (peer) or none (host).

    Example:
        >>> device_bytes(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9), "peer") / 1e9
        12.0
    """
    held = island.islands * island.capacity * island.row_bytes + island.bases * island.genome_bytes
    share = {"host": 0.0, "replica": 1.0, "rebuild": 1.0, "peer": 1.0 / node.gpus}[placement]
    return 2 * island.genome_bytes + held * share


def make_seconds(node: Node, island: Island, placement: str) -> float:
    """One child made on each GPU at once: the kernel's rate or its traffic's path.

    Example:
        >>> round(make_seconds(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9), "replica"), 4)     # 3 GB at 141 GB/s
        0.0213
    """
    child = island.genome_bytes
    compute = child / island.breed_Bps
    reads = island.reads()
    if placement == "host":
        paths = [reads / node.pcie_Bps, node.gpus * reads / node.host_Bps, child / node.device_Bps]
    elif placement in ("replica", "rebuild"):
        paths = [island.traffic() / node.device_Bps]
    elif placement == "peer":
        remote = reads * (node.gpus - 1) / node.gpus
        if island.seeded:     # every GPU reads every base: each serves its share to the others
            served = remote
        else:
            served = busiest_share(node, island) * island.genome_bytes / island.children(node)
        paths = [(island.traffic() - remote) / node.device_Bps, remote / node.peer_Bps,
                 served / node.peer_Bps]
    else:
        raise ValueError(f"placement: expected one of {PLACEMENTS}, got {placement!r}")
    return max(compute, *paths)


def evaluation_seconds(island: Island, make: float, k: int) -> float:
    """``k`` children made and evaluated by one rank, pipelined or one after the other.

    Example:
        >>> round(evaluation_seconds(Island(3e9, 3e9, 16, 8, 0.1, 141e9), 0.07, 3), 3)    # 0.07 + 2 * (0.1 + 0.02) + 0.1
        0.41
    """
    if k == 0:
        return 0.0
    if not island.pipelined:
        return k * (make + island.eval_s)
    per_child = island.eval_s + max(0.0, make - island.spare * island.eval_s)
    return make + (k - 1) * per_child + island.eval_s


def survivor_seconds(node: Node, island: Island, placement: str) -> float:
    """The survivors' rows written before the next generation reads them (rebuild: made
    again on every GPU that did not breed them, one after another).

    Example:
        >>> round(survivor_seconds(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9), "replica"), 5)   # 4 x 7/8 x 3 GB at 400 GB/s
        0.02625
    """
    row = island.row_bytes
    if island.seeded:                       # recipes: one small message each
        return node.latency_s * math.ceil(island.survivors)
    spread = (node.gpus - 1) / node.gpus
    mine = min(island.survivors, island.children(node))      # the busiest breeder's survivors
    if placement == "rebuild":
        return (rebuild_makes(node, island) * make_seconds(node, island, placement)
                + 2 * mine * row / node.device_Bps)
    if placement == "replica":
        received = island.survivors * spread * row
        return max(received / node.peer_Bps, (received + 2 * mine * row) / node.device_Bps)
    if placement == "peer":
        return max(mine * spread * row / node.peer_Bps, 2 * mine * row / node.device_Bps)
    return max(mine * row / node.pcie_Bps, island.survivors * row / node.host_Bps)


def rebuild_makes(node: Node, island: Island) -> float:
    """Rebuild placement: the survivors each GPU makes again (those other GPUs bred; 0
    for seeded archives, whose rows are recipes).

    Example:
        >>> rebuild_makes(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9))      # 4 survivors x 7/8
        3.5
    """
    return 0.0 if island.seeded else island.survivors * (node.gpus - 1) / node.gpus


def gather_seconds(node: Node, island: Island) -> float:
    """The fitness all-gather inside the node (8 bytes a child).

    Example:
        >>> gather_seconds(Node(gpus=1), Island(3e9, 3e9, 16, 8, 0.1, 141e9)) < 1e-9
        True
    """
    hops = math.ceil(math.log2(node.gpus)) if node.gpus > 1 else 0
    return hops * node.latency_s + 8 * island.batch / node.peer_Bps


def checkpoint_seconds(node: Node, island: Island) -> float:
    """Per generation: the snapshot of the rows changed since the previous checkpoint,
    copied to the host before the background write (0 without checkpoints).

    Example:
        >>> checkpoint_seconds(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9))
        0.0
    """
    if not island.checkpoint_every:
        return 0.0
    changed = min(island.capacity, island.survivors * island.checkpoint_every) * island.row_bytes
    return changed / node.pcie_Bps / island.checkpoint_every


def generation_seconds(node: Node, island: Island, placement: str, rows: int | None = None) -> dict:
    """{"make_s", "evaluate_s", "survivors_s", "gather_s", "checkpoint_s", "cycle_s",
    "seconds"} of one generation of every island on the node, ``rows`` children each
    (default the batch; generation 0: the capacity): one island's chain ("cycle_s": its
    make, pipelined evaluations, survivors' rows, gather, checkpoint) and, with several
    islands, the GPUs' throughput ("evaluate_s"); "seconds" the larger.

    Example:
        >>> parts = generation_seconds(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9), "replica")
        >>> round(parts["evaluate_s"], 4)     # one child a GPU: make, then evaluate
        0.1213
        >>> two = generation_seconds(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9, islands=2), "peer")
        >>> round(two["seconds"], 3)          # 2 children a GPU, each make beside the other's evaluation
        0.2
    """
    make = make_seconds(node, island, placement)
    parts = {"make_s": make,
             "evaluate_s": evaluation_seconds(island, make, island.children(node, rows)),
             "survivors_s": survivor_seconds(node, island, placement),
             "gather_s": gather_seconds(node, island),
             "checkpoint_s": checkpoint_seconds(node, island)}
    parts["cycle_s"] = sum(v for k, v in parts.items() if k != "make_s")
    parts["seconds"] = parts["cycle_s"]
    if island.islands > 1:
        parts["evaluate_s"] = throughput_seconds(node, island, placement, make, rows)
        parts["seconds"] = max(parts["cycle_s"], parts["evaluate_s"])
    return parts


def throughput_seconds(node: Node, island: Island, placement: str, make: float, rows: int | None = None) -> float:
    """Several islands on the node: the busiest GPU's round of every island's ``rows``
    children (default the batch): its evaluations, and what its second stream's makes
    (and rebuilds) need beyond the ``spare`` share of them (without the pipeline: all of
    it); the survivors' copies and checkpoints go over the copy engines and links.

    Example:
        >>> isl = Island(3e9, 3e9, 16, 8, 0.1, 141e9, islands=2)
        >>> round(throughput_seconds(Node(), isl, "replica", 0.0213), 3)     # 2 x 100 ms, the makes hidden
        0.2
    """
    k = math.ceil(island.islands * (island.batch if rows is None else rows) / node.gpus)
    rebuild = island.islands * rebuild_makes(node, island) * make if placement == "rebuild" else 0.0
    second = k * make + rebuild
    hidden = island.spare * k * island.eval_s if island.pipelined else 0.0
    return k * island.eval_s + max(0.0, second - hidden)


def run_seconds(node: Node, island: Island, placement: str, generations: int,
                migration_s: float = 0.0) -> float:
    """Generation 0 (the initial ``capacity`` genomes) and ``generations`` more, plus
    the migrations' ``migration_s``, per generation (averaged as the plan's tables);
    several islands: plus the queue's fill, one make.

    Example:
        >>> run_seconds(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9), "peer", 50) > 0.1
        True
    """
    first = generation_seconds(node, island, placement, island.capacity)
    later = generation_seconds(node, island, placement)["seconds"]
    fill = first["make_s"] if island.islands > 1 else 0.0
    return (fill + first["seconds"] + generations * later + migration_s) / generations


def utilisation(gpus: int, capacity: int, batch: int, eval_s: float, generations: int,
                per_generation_s: float) -> float:
    """Evaluation time over the GPUs' wall time of a run of generation 0 (``capacity``
    genomes) and ``generations`` batches, at ``per_generation_s`` (its wall / ``generations``).

    Example:
        >>> round(utilisation(8, 16, 8, 0.1, 50, 0.125), 3)
        0.832
    """
    evaluations = capacity + generations * batch
    return evaluations * eval_s / (gpus * per_generation_s * generations)


def choose(node: Node, island: Island, generations: int, migration_s: float = 0.0) -> tuple[str, dict]:
    """(the device placement with the least time per generation among those that fit,
    {placement: seconds per generation, None where it does not fit}). Host rows are
    for nodes whose GPUs cannot hold them; they are chosen only then.

    Example:
        >>> isl = Island(3e9, 800, 16, 8, 0.1, 141e9, bases=4)
        >>> choose(Node(), isl, 50)[0]
        'replica'
    """
    seconds = {p: run_seconds(node, island, p, generations, migration_s) if fits(node, island, p) else None
               for p in PLACEMENTS}
    device = [p for p in DEVICE_PLACEMENTS if seconds[p] is not None]
    best = min(device, key=lambda p: seconds[p]) if device else "host"
    return best, seconds


def batch_for(node: Node, island: Island, placement: str, target: float, generations: int,
              migration_s: float = 0.0, largest: int = 512) -> int | None:
    """The smallest batch per island (its islands' together a multiple of the GPUs)
    whose utilisation reaches ``target`` on this placement (survivors in proportion to
    the batch, the archive at least the batch, the migration's seconds unchanged); None
    up to ``largest`` per node.

    Example:
        >>> batch_for(Node(), Island(3e9, 800, 16, 8, 0.1, 141e9, bases=4), "replica", 0.9, 50)
        16
    """
    step = max(1, node.gpus // island.islands)
    for batch in range(step, largest // island.islands + 1, step):
        trial = replace(island, batch=batch, capacity=max(island.capacity, batch),
                        survivors=island.survivors * batch / island.batch)
        wall = run_seconds(node, trial, placement, generations, migration_s)
        if island_utilisation(node, trial, generations, wall) >= target:
            return batch
    return None


def island_utilisation(node: Node, island: Island, generations: int, per_generation_s: float) -> float:
    """:func:`utilisation` of the node's islands (generation 0 and ``generations`` batches).

    Example:
        >>> round(island_utilisation(Node(), Island(3e9, 3e9, 16, 8, 0.1, 141e9, islands=2), 50, 0.25), 3)
        0.832
    """
    return utilisation(node.gpus, island.islands * island.capacity, island.islands * island.batch,
                       island.eval_s, generations, per_generation_s)


def device_link_bytes(node: Node, island: Island, placement: str) -> float:
    """Bytes per generation per node over NVLink (replica, peer) or PCIe (host): the
    parents' or bases' reads from other GPUs or the host, and the survivors' rows
    (rebuild: none, every GPU makes them again).

    Example:
        >>> isl = Island(3e9, 3e9, 16, 8, 0.1, 141e9)
        >>> device_link_bytes(Node(), isl, "replica") / 1e9      # 4 rows to 7 GPUs
        84.0
        >>> device_link_bytes(Node(), isl, "rebuild")
        0.0
    """
    spread = (node.gpus - 1) / node.gpus
    survivors = island.survivors * island.row_bytes
    if placement == "rebuild":
        per_island = 0.0
    elif placement == "replica":
        per_island = survivors * (node.gpus - 1)
    elif placement == "peer":
        per_island = island.batch * island.reads() * spread + survivors * spread
    else:
        per_island = island.batch * island.reads() + survivors
    return island.islands * per_island
