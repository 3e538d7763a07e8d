"""Breed where you evaluate on GPUs (``run.breed = "evaluator"`` with device islands):
a replica of the island's archive rows on every evaluating rank's GPU, survivors
rebuilt from the plan's counters.

The host path (:mod:`.breed_local`) keeps an island's rows once per node in shared
memory. A GPU island's rows live on GPUs instead, and each rank of the group holds
its own copy of them on its device (a *replica*), so every read a child needs is a
local device read:

* the leader's GA plans the generation (:class:`~.breed_local.PlannedGA`: parents,
  weights, step sizes, the counter-based stream's key and first block) and
  broadcasts the plan, a few numbers per child;
* every rank breeds its block of the batch from its replica with the device twins of
  the counter kernels (:mod:`mpievo.kernels.cuda.counter_operators`: the host's
  bits), evaluates it on its GPU and returns fitness and mutation counts;
* the leader's merge decides which children enter which slots, and *every* rank
  writes every survivor into its own replica: the ones it bred by a device copy,
  the others rebuilt from the plan's counters (child ``c`` of a plan is the same bits
  whoever makes it). No child's bytes cross ranks; the cost is one make per survivor
  bred elsewhere, on every GPU (:mod:`mpievo.plan.local` counts it).

Rows the leader's archive takes from elsewhere -- generation 0, immigrants, a
checkpoint, a restart's compaction -- reach the replicas before the next plan is
bred (:meth:`DeviceBreeding.sync`): each slot's row version
(:meth:`mpievo.evo.archive.Archive.row_versions`) says whether the replicas hold
that row already (in place, or in another slot: a device copy) or not (its bytes are
sent, once per rank). The results are the island model's on device islands, bit for
bit, on any group size, and checkpoints are the island model's.

What it needs: every island of the group on the device (``engine.device = "cuda"``,
or ``"auto"`` on a GPU), the GA with interpolation crossover, dense or delta rows
(seeded genomes are recipes on the host: their children are made on the device by the
problem, not bred there), ``bounds`` clip or reflect, ``unique = false``, no fidelity.
Unlike host rows, the replicas need no shared memory (a group may span nodes) and no
minimum genome size (the device always breeds with the counter-based kernels).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from mpievo.kernels import counter_operators as counter_kernels

from ..evo import device
from ..evo.algorithms.ga import breeding_box
from ..evo.device_archive import DeviceArchive
from ..evo.fidelity import fidelity_of
from ..evo.genomes import encoding_of, row_dtype
from ..evo.half import genome_dtype, is_half
from .breed_local import (AUTO_ROW_BYTES, BREEDING, BreedingGroupProblem, BreedPlan, EvaluatorBreeding,
                          PlannedGA, SharedArchive, _PlanningHalf, choose_breeding)
from .groups import GroupProblem, evaluate_block, row_blocks


# ------------------------------------------------------------------ the decision
def device_islands(engines, problem) -> list[bool]:
    """Per island, whether it keeps its rows on a GPU (``engine.device`` "cuda", or
    "auto" on a rank with a GPU for a problem evaluated there).

    Example:
        >>> from mpievo.evo import EngineConfig, make_problem
        >>> device_islands([EngineConfig(algorithm="ga", device="cpu")], make_problem("sphere", dim=4))
        [False]
    """
    return [engine.device == "cuda" or (engine.device == "auto" and engine.algorithm == "ga"
                                        and device.resolve_device("auto", "ga", problem))
            for engine in engines]


def device_breeding_problems(engines, problem) -> list[str]:
    """What keeps the device islands ``engines`` over ``problem`` from breeding on the
    evaluators: [] when nothing does (module docstring).

    Example:
        >>> from mpievo.evo import EngineConfig, make_problem
        >>> device_breeding_problems([EngineConfig(algorithm="ga", device="cuda", bounds="resample")],
        ...                          make_problem("sphere", dim=4))
        ["engine.bounds 'clip' or 'reflect', got 'resample' on island 0"]
    """
    found = []
    encoded = encoding_of(problem)
    if encoded is not None and encoded.genome not in ("dense", "delta"):
        found.append(f"engine.genome 'dense' or 'delta' (rows on the device), got {encoded.genome!r}")
    if fidelity_of(problem) is not None:
        found.append("no problem.fidelity_sample")
    on = device_islands(engines, problem)
    for index, engine in enumerate(engines):
        for name, ok, want in (("genome", engine.genome in ("dense", "delta"), "'dense' or 'delta' (rows on the device)"),
                               ("algorithm", engine.algorithm == "ga", "'ga'"),
                               ("crossover", engine.crossover == "interpolate", "'interpolate'"),
                               ("bounds", engine.bounds in ("clip", "reflect"), "'clip' or 'reflect'"),
                               ("unique", not engine.unique, "false"),
                               ("device", on[index], "'cuda' on every island of the group")):
            message = f"engine.{name} {want}, got {getattr(engine, name)!r} on island {index}"
            if not ok and message not in found and not (name == "genome" and encoded is not None):
                found.append(message)
    return found


def breeding_rows(setting: str, engines, problem, group) -> tuple[str, type | None]:
    """(``run.breed`` resolved: "leader" or "evaluator", the class that holds the
    group's rows for it: :class:`~.breed_local.EvaluatorBreeding` for host islands,
    :class:`DeviceBreeding` for device islands, None for "leader").

    Raises:
        ValueError: an unknown setting, or "evaluator" with settings it cannot run
            (naming each).

    Example:
        >>> from mpievo.comm import SelfComm
        >>> from mpievo.evo import EngineConfig, make_problem
        >>> breeding_rows("auto", [EngineConfig(algorithm="ga")], make_problem("sphere", dim=10), SelfComm())
        ('leader', None)
    """
    if not any(engine.device == "cuda" for engine in engines) and not any(device_islands(engines, problem)):
        mode = choose_breeding(setting, engines, problem, group)
        return mode, (EvaluatorBreeding if mode == "evaluator" else None)
    if setting not in BREEDING:
        raise ValueError(f"run.breed: expected one of {BREEDING}, got {setting!r}")
    if setting == "leader" or (setting == "auto" and max(
            problem.dim * row_dtype(problem, e.dtype).itemsize for e in engines) < AUTO_ROW_BYTES):
        return "leader", None
    found = device_breeding_problems(engines, problem)
    if setting == "evaluator" and found:
        raise ValueError("run.breed = 'evaluator' on device islands: expected " + "; ".join(found))
    return ("leader", None) if found else ("evaluator", DeviceBreeding)


def breeding_view(problem, group, breeding):
    """The leader's view of ``problem`` for ``breeding`` (None: the leader breeds):
    a :class:`~.groups.GroupProblem` that hands planned batches to the group.

    Example::

        IslandScheme(leaders, breeding_view(problem, group, breeding), engines)
    """
    if breeding is None:
        return GroupProblem(problem, group)
    if isinstance(breeding, DeviceBreeding):
        return DeviceBreedingGroupProblem(problem, group, breeding)
    return BreedingGroupProblem(problem, group, breeding)


def replica_bytes(job, nranks: int) -> int | None:
    """Device bytes a rank needs at least when ``job`` breeds device islands on the
    evaluators (None when it does not): its group's islands' replicas (``capacity``
    rows each), the block of children it breeds, and for half-precision rows the
    float32 copies they breed in (children and the parents they use).

    Example:
        >>> from mpievo.config import validate
        >>> job = validate({"run": {"scheme": "centralized", "islands": 2, "breed": "evaluator"},
        ...                 "problem": {"name": "sphere", "dim": 1000},
        ...                 "engine": {"device": "cuda", "capacity": 8, "batch_size": 4}}, 2)
        >>> replica_bytes(job, 2)     # 2 replicas of 8 rows, 2 children, 4 KB rows
        72000
    """
    run = job.run
    if run.scheme not in ("hybrid", "centralized") or not all(e.device == "cuda" for e in job.engines):
        return None
    dim = job.problem.dim
    rows = [genome_dtype(e.dtype).itemsize * dim for e in job.engines]
    if run.breed == "leader" or (run.breed == "auto" and max(rows) < AUTO_ROW_BYTES):
        return None
    size = run.ranks_per_island if run.scheme == "hybrid" and isinstance(run.ranks_per_island, int) else nranks
    groups = max(1, nranks // max(1, size))
    per_group = math.ceil(job.n_islands / groups)
    engine = job.engines[0]
    block = math.ceil(engine.batch_size / max(1, size))
    widened = 3 * block * dim * 4 if is_half(engine.dtype) else 0    # float32 children and 2 parents each
    return per_group * engine.capacity * max(rows) + block * max(rows) + widened


# ------------------------------------------------------------------ the leader's side
class PlannedRows(np.ndarray):
    """The placeholder batch of a device island's :class:`DevicePlannedGA` (no rows:
    the evaluators breed them); :class:`ReplicaArchive` passes it through.

    Example::

        placeholder = np.broadcast_to(np.zeros((1, 1), np.float32), (8, dim)).view(PlannedRows)
    """


class _DevicePlanningHalf(_PlanningHalf):
    """:class:`~.breed_local._PlanningHalf` of a device island: always the fused path
    (one plan of the float32 draws; the evaluators widen their parents themselves)."""

    def fuses(self, dim: int) -> bool:
        return True


class DevicePlannedGA(PlannedGA):
    """:class:`~.breed_local.PlannedGA` on a :class:`ReplicaArchive`: the draws of a
    device island's GA, its batch a :class:`PlannedRows` placeholder.

    Example::

        ga = DevicePlannedGA.from_config(island.config)     # then ga.sink = DeviceBreeding(...)
    """

    def init(self, problem, archive, rng) -> None:
        super().init(problem, archive, rng)
        self._children = self._children.view(PlannedRows)
        if self._half is not None:
            self._half = _DevicePlanningHalf(archive.dtype, self)

    def _work(self):
        return self._children

    def _rounded(self, out):
        return self._children


class ReplicaArchive(SharedArchive, DeviceArchive):
    """A device :class:`~mpievo.evo.device_archive.DeviceArchive` whose rows are the
    leader's replica, and whose merge of the island's own children leaves the rows to
    the ranks (:meth:`DeviceBreeding.write`: every rank writes every survivor).

    Example::

        island.archive = ReplicaArchive(breeding.replicas[0], breeding, limit=4, island=0)
    """

    def __init__(self, rows, breeding: "DeviceBreeding", **settings):
        super().__init__(rows, breeding, **settings)
        self.merges_in_one_call = True     # own children: insert_children (no rows read)

    def _allocate(self):
        return self._rows

    def as_rows(self, genomes, name: str = "genomes"):
        if isinstance(genomes, PlannedRows):
            return genomes
        return super().as_rows(genomes, name)

    def population_rows(self, count: int):
        return None


class DeviceBreedingGroupProblem(BreedingGroupProblem):
    """:class:`~.breed_local.BreedingGroupProblem` of device islands: a planned batch
    is bred and evaluated by the group from its plan; generation 0 travels as device rows.

    Example::

        IslandScheme(leaders, DeviceBreedingGroupProblem(problem, group, breeding), engines)
    """

    def evaluate_device(self, genomes) -> np.ndarray:
        plan, self.breeding.pending = self.breeding.pending, None
        if plan is None:
            return super().evaluate_device(genomes)
        return self.breeding.lead(plan, genomes.shape[0])


# ------------------------------------------------------------------ every rank's side
class DeviceBreeding(EvaluatorBreeding):
    """One rank's part of evaluator breeding for its group's device islands: a replica
    of each island's rows on this rank's GPU (collective over ``group`` to use; same
    arguments and protocol as :class:`~.breed_local.EvaluatorBreeding`).

    Example::

        breeding = DeviceBreeding(problem, group, engines, [0, 1])   # every rank of the group
        breeding.adopt(inner.islands)        # the leader; the others: serve(..., breeding.handle)
    """

    def __init__(self, problem, group, engines, islands):
        from numba import cuda

        self.problem, self.group, self.engines = problem, group, engines
        self.view = GroupProblem(problem, group)
        self.replicas = {i: cuda.device_array((engines[i].capacity, problem.dim),
                                              row_dtype(problem, engines[i].dtype)) for i in islands}
        self.archives: dict = {}                                        # the leader's
        self._synced = {i: np.zeros(engines[i].capacity, np.int64) for i in islands}  # versions the replicas hold
        self._plans: dict = {}         # island -> its last plan (survivors are rebuilt from it)
        self._boxes: dict = {}
        self._children = None
        self._scratch = None
        self._last = (None, 0, 0)
        self.pending: BreedPlan | None = None
        self.made = 0                  # survivors this rank rebuilt from their plans
        self.sent_rows = 0             # rows the leader sent to the replicas (sync)

    def adopt(self, islands) -> None:
        """Give the leader's ``islands`` (Island objects, not initialised yet) their
        replica archives and planned GAs."""
        for index, island in islands.items():
            old = island.archive
            island.archive = ReplicaArchive(self.replicas[index], self, unique=old.unique, limit=old.limit,
                                            island=index)
            self.archives[index] = island.archive
            ga = DevicePlannedGA.from_config(island.config)
            ga.sink = self
            island.algorithm = ga

    def close(self) -> None:
        """Drop the replicas (no collective: device memory is this rank's)."""
        self.replicas, self.archives = {}, {}
        self._children = self._scratch = None

    # --- the protocol -------------------------------------------------------------
    def lead(self, plan: BreedPlan, evaluated: int) -> np.ndarray:
        self.sync(plan.island)
        return super().lead(plan, evaluated)

    def write(self, island: int, entered: np.ndarray, slots: np.ndarray) -> None:
        super().write(island, entered, slots)
        self._synced[island][slots] = self.archives[island]._versions[slots]

    def handle(self, order) -> bool:
        if order[0] == "sync":
            self._receive(*order[1:])
            return True
        return super().handle(order)

    def sync(self, island: int) -> None:
        """The leader: bring every replica of ``island`` to its archive's rows (collective
        over the group when they differ): rows held elsewhere in the replicas are moved
        there, rows they never held are sent (generation 0, immigrants, a restore)."""
        archive, synced = self.archives[island], self._synced[island]
        versions = archive.row_versions()
        where = {int(v): s for s, v in enumerate(synced) if v}
        moves, sent = [], []
        for slot, version in enumerate(versions):
            if synced[slot] == version:
                continue
            source = where.get(int(version))
            if source is None:
                sent.append(slot)
            else:
                moves.append((source, slot))
        if not (moves or sent):
            return
        order = ("sync", island, np.array(moves, np.int64).reshape(-1, 2), np.array(sent, np.int64))
        with self.group.purpose("breeding"):
            self.group.bcast_object(order, root=0)
        if len(sent):          # (the leader's replica is its archive's storage: moved already)
            rows = device.take(self.replicas[island], order[3])
            with self.group.purpose("breeding"):
                self.group.exchange(sends=[(r, rows) for r in range(1, self.group.size)])
            self.sent_rows += len(sent) * (self.group.size - 1)
        synced[:len(versions)] = versions

    def _move(self, island: int, moves: np.ndarray) -> None:
        """On a replica: rows ``moves[:, 0]`` into slots ``moves[:, 1]`` (read before written)."""
        if not len(moves):
            return
        from mpievo.kernels.cuda import rows as cuda_rows

        replica = self.replicas[island]
        moved = cuda_rows.take_rows(replica, moves[:, 0])
        cuda_rows.copy_rows(moved, np.arange(len(moves)), replica, moves[:, 1])

    def _receive(self, island: int, moves: np.ndarray, sent: np.ndarray) -> None:
        from numba import cuda

        from mpievo.kernels.cuda import rows as cuda_rows

        self._move(island, moves)
        if len(sent):
            replica = self.replicas[island]
            rows = cuda.device_array((len(sent), replica.shape[1]), replica.dtype)
            with self.group.purpose("breeding"):
                self.group.exchange(recvs=[(0, rows)])
            cuda_rows.copy_rows(rows, np.arange(len(sent)), replica, sent)

    # --- breeding and rebuilding ----------------------------------------------------
    def _breed(self, plan: BreedPlan, evaluated: int) -> np.ndarray:
        """Breed and evaluate this rank's block of ``plan`` on its GPU; returns its counts
        then the fitness of its children among the first ``evaluated`` (float64)."""
        replica = self.replicas[plan.island]
        self._plans[plan.island] = plan
        a, b = row_blocks(plan.n, self.group.size)[self.group.rank]
        self._last = (plan.island, a, b - a)
        if b == a:
            return np.empty(0)
        children = self._children = self._rows(self._children, replica.dtype, b - a)
        counts = breed_device_rows(plan, replica, a, b, self._box(plan.island), children[:b - a],
                                   self.engines[plan.island].device_math)
        fitness = evaluate_block(self.problem, children[:max(0, min(b, evaluated) - a)], on_device=True)
        return np.concatenate([counts.astype(np.float64), fitness])

    def _write(self, island: int, entered, slots) -> None:
        """Every survivor of ``island``'s last plan into this rank's replica: its own by a
        device copy, the others rebuilt from the plan. A survivor is made straight into
        its slot once no other pending rebuild reads that slot; a cycle of such reads
        makes one survivor into a scratch row first (:func:`rebuild_order`)."""
        from mpievo.kernels.cuda import rows as cuda_rows

        replica, plan = self.replicas[island], self._plans[island]
        last, a, count = self._last
        mine = [(c - a, s) for c, s in zip(entered, slots) if last == island and a <= c < a + count]
        pending = {int(c): int(s) for c, s in zip(entered, slots) if not (last == island and a <= c < a + count)}
        reads = {c: () if plan.kind == "uniform" else (int(plan.idx_a[c]), int(plan.idx_b[c])) for c in pending}
        steps = rebuild_order(pending, reads)
        scratch = [(row, s) for row, (c, s, spare) in enumerate(x for x in steps if x[2])]
        if scratch:
            self._scratch = self._rows(self._scratch, replica.dtype, len(scratch))
        box, math_mode, row = self._box(island), self.engines[island].device_math, 0
        for c, s, spare in steps:
            target = self._scratch[row:row + 1] if spare else replica[s:s + 1]
            row += spare
            breed_device_rows(plan, replica, c, c + 1, box, target, math_mode)
        self.made += len(steps)
        for source, pairs in ((self._children, mine), (self._scratch, scratch)):
            if pairs:
                rows, targets = (np.array(p, np.int64) for p in zip(*pairs))
                cuda_rows.copy_rows(source, rows, replica, targets)

    def _rows(self, buffer, dtype, rows: int):
        """``buffer`` if it has ``rows`` rows of ``dtype``, else a new device array."""
        if buffer is not None and np.dtype(buffer.dtype) == np.dtype(dtype) and buffer.shape[0] >= rows:
            return buffer
        from numba import cuda

        return cuda.device_array((rows, self.problem.dim), dtype)

    def _box(self, island: int):
        dtype = row_dtype(self.problem, self.engines[island].dtype)
        if dtype not in self._boxes:
            from ..evo import device_operators

            self._boxes[dtype] = tuple(device_operators.place(a) for a in breeding_box(self.view, dtype))
        return self._boxes[dtype]


def rebuild_order(pending: dict, reads: dict) -> list[tuple[int, int, bool]]:
    """The order to rebuild survivors ``pending`` (child -> slot) in place, each reading
    the slots ``reads[child]``: (child, slot, into scratch first) steps. A child is made
    straight into its slot once no child still to be made reads that slot; when every
    one left is read by another (a cycle, or a child that replaces its own parent), the
    lowest is made into a scratch row, copied to its slot after all others.

    Example:
        >>> rebuild_order({0: 5, 1: 6}, {0: (6, 2), 1: (3, 4)})       # 0 reads slot 6 before 1 takes it
        [(0, 5, False), (1, 6, False)]
        >>> rebuild_order({0: 5, 1: 6}, {0: (6, 2), 1: (5, 4)})       # a cycle
        [(0, 5, True), (1, 6, False)]
    """
    pending, steps = dict(pending), []
    while pending:
        readers = Counter(r for c in pending for r in reads[c])
        ready = [c for c, s in pending.items() if not readers[s]]
        if not ready:
            c = min(pending)
            steps.append((c, pending.pop(c), True))
            continue
        steps.extend((c, pending.pop(c), False) for c in ready)
    return steps


def breed_device_rows(plan: BreedPlan, rows, a: int, b: int, box, out, math: str = "exact") -> np.ndarray:
    """Children ``a..b`` of ``plan`` bred on the device from the device archive ``rows``
    into the device rows ``out`` (the bits of :func:`~.breed_local.breed_rows` for the
    same children: the device twins of the counter kernels); returns their mutation counts.

    Example::

        counts = breed_device_rows(plan, replica, 4, 8, placed_box, children[:4])
    """
    from mpievo.kernels.cuda import counter_operators as cuda_counter
    from mpievo.kernels.cuda import half as cuda_half

    from ..evo import device_operators

    lower, upper, scale = box
    n, dim = b - a, rows.shape[1]
    half = is_half(rows.dtype)
    work = device_operators.empty((n, dim), np.float32) if half else out
    if plan.kind == "uniform":
        cuda_counter.uniform_fill(work, lower, upper, plan.key, plan.base + counter_kernels.gene_blocks(a, dim))
        counts = np.zeros(n, np.int64)
    else:
        part = slice(a, b)
        parents, idx_a, idx_b = rows, plan.idx_a[part], plan.idx_b[part]
        if half:          # each parent widened once (what a device island's GA does)
            used, inverse = np.unique(np.concatenate([idx_a, idx_b]), return_inverse=True)
            parents = cuda_half.widen_rows(rows, used, rows.dtype)
            idx_a, idx_b = inverse[:n].astype(np.int64), inverse[n:].astype(np.int64)
        counts = cuda_counter.vary(parents, idx_a, idx_b, plan.omega[part], True, work, plan.steps[part], scale,
                                   lower, upper, plan.code, plan.threshold, plan.inv_log_q, plan.dense,
                                   plan.key, plan.base + counter_kernels.mutation_blocks(a, dim, plan.code),
                                   math=math)
    if half:
        cuda_half.round_rows(work, out, rows.dtype)
    return counts
