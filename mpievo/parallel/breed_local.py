"""Breed where you evaluate (``run.breed = "evaluator"``): a group's ranks breed their
own children of model-sized genomes from the island's archive held once per node.

In the hybrid and centralized schemes (:mod:`.hybrid`) a group leader holds the
group's islands. By default (``run.breed = "leader"``) it breeds every child and
ships each rank its block of rows (:class:`~.groups.GroupProblem`): for a genome of
gigabytes the leader makes ``batch`` children one after the other and the group's
links carry ``batch - batch / K`` genomes a generation. With ``"evaluator"``:

* each island's archive rows live once per node, in a node-shared array
  (:func:`mpievo.comm.shm.array.node_shared_array`) that the leader's archive
  uses as its storage (:class:`SharedArchive`);
* the leader's GA draws the generation's *decisions* as the island model does --
  parents, interpolation weights, step sizes and the counter-based stream's key and
  first block (:class:`PlannedGA`, from ``stream(seed, island, generation, "breed")``)
  -- and broadcasts them: a few numbers per child, never a child;
* every rank of the group breeds its block of children (rows ``a..b`` of the batch
  are rows ``a..b`` of the whole batch: child ``c`` takes the counter blocks
  ``base + c * pairs + ...``, :mod:`mpievo.kernels.counter_operators`) straight from
  the shared rows into its own buffer, evaluates them and returns their fitness and
  mutation counts (what the GA's step-size rule needs);
* the leader's archive merge decides which children enter which slots; the slots go
  back to the group, and the rank that bred a child that entered writes its row into
  the shared archive, once.

So only fitness values and the small decisions cross ranks (``comm.traffic`` under
"breeding" and "evaluation"), the leader breeds a K-th of the children, and the
result is the island model's, bit for bit (same decisions, same kernels, same
counter blocks), on any group size and across a resume: the checkpoints are the
island model's. Generation 0 and immigrants go through the leader as before. Where the
problem pipelines (:func:`makes_children`), a rank breeds child ``i + 1`` of its block
on the pipeline's helper thread while child ``i`` is evaluated (:meth:`EvaluatorBreeding.breed_block`).
Master-worker breeds on its workers from the same pieces, point to point (:mod:`.breed_pool`).

What it needs (``"auto"`` takes it when all hold and a row is at least
:data:`AUTO_ROW_BYTES`; ``"evaluator"`` refuses settings without it): the GA with
interpolation crossover on host islands, dense or delta rows of the counter-based
kernels' size (``dim >= mpievo.evo.operators.COUNTER_DIM``), ``bounds`` clip or
reflect (resampling numbers its draws by the whole batch), ``unique = false``, and
every group of ranks inside one node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mpievo.kernels import counter_operators as counter_kernels
from mpievo.kernels import half_rows

from ..comm.shm.array import node_shared_array
from ..evo import device, pipeline
from ..evo import operators as ops
from ..evo.algorithms.ga import GeneticAlgorithm, breeding_box
from ..evo.archive import Archive, fresh_versions
from ..evo.fidelity import fidelity_of
from ..evo.genomes import encoding_of, row_dtype
from ..evo.half import HalfBreeding, bits, is_half, round_into
from ..evo.streams import counter_blocks
from ..kernels.host import BFLOAT16
from .groups import GroupProblem, evaluate_block, row_blocks

#: the values of ``run.breed``
BREEDING = ("leader", "evaluator", "auto")
#: ``run.breed = "auto"`` breeds on the evaluators from rows of this many bytes (64 MiB:
#: 16 M float32 genes; below, shipping a row costs less than a generation's set-up)
AUTO_ROW_BYTES = 64 << 20


# ------------------------------------------------------------------ the decision
def breeding_problems(engines, problem, group) -> list[str]:
    """What keeps ``engines`` over ``problem`` (encoded rows) on ``group`` (a group's
    Communicator) from breeding on the evaluators: [] when nothing does.

    Example:
        >>> from mpievo.comm import SelfComm
        >>> from mpievo.evo import EngineConfig, make_problem
        >>> breeding_problems([EngineConfig(algorithm="ga")], make_problem("sphere", dim=10), SelfComm())[0]
        'rows of at least 100000 genes (the counter-based kernels), got 10'
    """
    found = []
    if not ops.counter_based(problem.dim):
        found.append(f"rows of at least {ops.COUNTER_DIM} genes (the counter-based kernels), got {problem.dim}")
    encoded = encoding_of(problem)
    if encoded is not None and encoded.genome not in ("dense", "delta"):
        found.append(f"engine.genome 'dense' or 'delta', got {encoded.genome!r}")
    if fidelity_of(problem) is not None:
        found.append("no problem.fidelity_sample")
    for index, engine in enumerate(engines):
        for name, ok, want in (("algorithm", engine.algorithm == "ga", "'ga'"),
                               ("crossover", engine.crossover == "interpolate", "'interpolate'"),
                               ("bounds", engine.bounds in ("clip", "reflect"), "'clip' or 'reflect'"),
                               ("unique", not engine.unique, "false"),
                               ("device", _on_host(engine, problem), "'cpu' (host islands)")):
            if not ok:
                found.append(f"engine.{name} {want}, got {getattr(engine, name)!r} on island {index}")
    nodes = getattr(group, "nodes", ((0,),))
    if len(nodes) > 1:
        found.append(f"every group of ranks on one node, got a group over {len(nodes)} nodes")
    return found


def _on_host(engine, problem) -> bool:
    """Whether ``engine``'s island keeps its rows on the host."""
    if engine.device == "cpu":
        return True
    return engine.device == "auto" and not (engine.algorithm == "ga"
                                            and device.resolve_device("auto", "ga", problem))


def choose_breeding(setting: str, engines, problem, group) -> str:
    """``"leader"`` or ``"evaluator"`` for ``run.breed = setting`` (module docstring).

    Raises:
        ValueError: an unknown setting, or ``"evaluator"`` with settings it cannot
            run (naming each).

    Example:
        >>> from mpievo.comm import SelfComm
        >>> from mpievo.evo import EngineConfig, make_problem
        >>> choose_breeding("auto", [EngineConfig(algorithm="ga")], make_problem("sphere", dim=10), SelfComm())
        'leader'
    """
    if setting not in BREEDING:
        raise ValueError(f"run.breed: expected one of {BREEDING}, got {setting!r}")
    if setting == "leader" or (setting == "auto" and max(
            problem.dim * row_dtype(problem, e.dtype).itemsize for e in engines) < AUTO_ROW_BYTES):
        return "leader"
    found = breeding_problems(engines, problem, group)
    if setting == "evaluator" and found:
        raise ValueError("run.breed = 'evaluator': expected " + "; ".join(found))
    return "leader" if found else "evaluator"


# ------------------------------------------------------------------ the leader's side
@dataclass
class BreedPlan:
    """One island's generation as decisions (what travels instead of children).

    ``kind`` "vary": interpolation of rows ``idx_a``, ``idx_b`` with weights ``omega``,
    then mutation with ``steps`` (:func:`mpievo.evo.operators.vary_plan`'s ``threshold``,
    ``inv_log_q``, ``dense``, ``key``, ``base``; bound mode ``code``). "uniform": the
    refill after a restart (``key``, ``base`` of :func:`counter_kernels.uniform_fill`).
    ``counts``: the leader's array the GA reads its mutation counts from (filled by
    :meth:`EvaluatorBreeding.lead`; not sent).

    Example::

        group.bcast_object(("breed", plan.wire(), evaluated), root=0)   # a few numbers per child
    """

    island: int
    kind: str
    n: int
    key: tuple
    base: int
    idx_a: np.ndarray | None = None
    idx_b: np.ndarray | None = None
    omega: np.ndarray | None = None
    steps: np.ndarray | None = None
    code: int = 0
    threshold: int = 0
    inv_log_q: float = 0.0
    dense: bool = False
    counts: np.ndarray | None = None

    def wire(self) -> "BreedPlan":
        """This plan without the leader's ``counts`` (what the broadcast carries)."""
        return BreedPlan(**{**self.__dict__, "counts": None})


class _PlanningOps:
    """:mod:`mpievo.evo.operators` for a :class:`PlannedGA`: ``breed`` and
    ``uniform_genomes`` take their draws from the stream exactly as the real ones do
    (:func:`ops.breed`'s counter path, :func:`ops.uniform_genomes`'s) and record a
    :class:`BreedPlan` instead of breeding; everything else is the module's."""

    def __init__(self, ga: "PlannedGA"):
        self._ga = ga

    def __getattr__(self, name):
        return getattr(ops, name)

    def breed(self, genomes, idx_a, idx_b, rng, lower, upper, out=None, *, omega, rate, steps, scale,
              bounds="clip"):
        return out, self._ga.vary(genomes.dtype, idx_a, idx_b, rng, omega, rate, steps, bounds)

    def uniform_genomes(self, rng, lower, upper, out):
        key, base = counter_blocks(rng, counter_kernels.gene_blocks(*out.shape))
        self._ga.record(BreedPlan(self._ga.archive.island, "uniform", out.shape[0], ops.key_words(key), base))
        return out


class _PlanningHalf(HalfBreeding):
    """:class:`HalfBreeding` of a :class:`PlannedGA`: its fused ``breed`` records a plan
    (the draws of :meth:`HalfBreeding.breed`), ``work`` and ``round_into`` touch no row."""

    def __init__(self, dtype, ga: "PlannedGA"):
        super().__init__(dtype)
        self._ga = ga

    def work(self, shape):
        return np.broadcast_to(np.zeros((1, 1), np.float32), tuple(shape))

    def breed(self, genomes, idx_a, idx_b, rng, lower, upper, out, *, omega, rate, steps, scale,
              bounds="clip", defer=False):
        # ``defer`` (pipelined breeding) has nothing to defer here: the evaluating ranks breed the rows
        return out, self._ga.vary(np.float32, idx_a, idx_b, rng, omega, rate, steps, bounds)

    def round_into(self, work, out):
        return out


class PlannedGA(GeneticAlgorithm):
    """The GA of a group leader's island under ``run.breed = "evaluator"``: ``ask``
    draws what the island model's GA draws, in the same order, and hands the
    :class:`EvaluatorBreeding` a :class:`BreedPlan`; the batch it returns is a
    placeholder of the batch's shape (no genome-sized buffer).

    Example::

        ga = PlannedGA.from_config(island.config)     # then ga.sink = EvaluatorBreeding(...)
    """

    sink = None     # the EvaluatorBreeding that takes the plans

    def init(self, problem, archive, rng) -> None:
        super().init(problem, archive, rng)
        self._children = np.broadcast_to(np.zeros((1, 1), archive.dtype), self._children.shape)
        self.ops = _PlanningOps(self)
        if self._half is not None:
            self._half = _PlanningHalf(archive.dtype, self)

    def vary(self, dtype, idx_a, idx_b, rng, omega, rate, steps, bounds) -> np.ndarray:
        """Draw and record a "vary" plan (the draws of ``ops.breed``); returns the counts array."""
        n, code = len(idx_a), ops.bound_code(bounds)
        w = ops.draw_omega(rng, n, omega, dtype)
        plan = ops.vary_plan(rng, n, self.archive.dim, rate, code)
        counts = np.zeros(n, np.int64)
        self.record(BreedPlan(self.archive.island, "vary", n, plan.key, plan.base,
                              np.asarray(idx_a, np.int64), np.asarray(idx_b, np.int64), w,
                              ops.steps_array(steps, n, dtype), code, plan.threshold, plan.inv_log_q,
                              plan.dense, counts))
        return counts

    def record(self, plan: BreedPlan) -> None:
        self.sink.pending = plan


class SharedArchive(Archive):
    """An :class:`Archive` whose rows are a node-shared array, and whose merge of the
    island's own children writes the columns here and leaves the rows to the ranks
    that bred them (:meth:`EvaluatorBreeding.write`).

    Example::

        island.archive = SharedArchive(shared.array, breeding, limit=4, island=0)
    """

    def __init__(self, rows: np.ndarray, breeding: "EvaluatorBreeding", **settings):
        self._rows = rows
        self.breeding = breeding
        super().__init__(rows.shape[0], rows.shape[1], rows.dtype, **settings)

    def _allocate(self):
        self._rows[...] = 0
        return self._rows

    def insert_children(self, genomes, fitness, first: int, birth: int) -> tuple[int, float, float]:
        """:meth:`Archive.insert_children` (the same merge, ids, origins, births), the rows
        written by the ranks that bred them; ``genomes`` is not read."""
        before = float(self.fitness.min()) if self.size else math.inf
        entered, slots = self._merge_slots(fitness)
        if len(entered):
            self._fitness[slots] = fitness[entered]
            self._ids[slots] = first + entered
            self._origins[slots] = self.island
            self._births[slots] = birth
            self._versions[slots] = fresh_versions(len(slots))
            self.size = max(self.size, int(slots.max()) + 1)
        self.breeding.write(self.island, entered, slots)
        return len(entered), before, float(self.fitness.min())


class BreedingGroupProblem(GroupProblem):
    """The leader's :class:`GroupProblem` under evaluator breeding: a batch a
    :class:`PlannedGA` planned is bred and evaluated by the group from its plan; any
    other batch (generation 0) travels as rows.

    Example::

        IslandScheme(leaders, BreedingGroupProblem(problem, group, breeding), engines)
    """

    def __init__(self, problem, group, breeding: "EvaluatorBreeding"):
        super().__init__(problem, group)
        self.breeding = breeding

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        plan, self.breeding.pending = self.breeding.pending, None
        if plan is None:
            return super().evaluate(genomes)
        return self.breeding.lead(plan, genomes.shape[0])


# ------------------------------------------------------------------ every rank's side
class EvaluatorBreeding:
    """One rank's part of evaluator breeding for its group's islands (collective over
    ``group`` to build: one node-shared array of rows per island).

    Args:
        problem: the encoded problem (rows), the same on every rank.
        group: the group's Communicator (rank 0 leads).
        engines: every island's resolved EngineConfig.
        islands: the group's islands.

    Example::

        breeding = EvaluatorBreeding(problem, group, engines, [0, 1])   # every rank of the group
        breeding.adopt(inner.islands)        # the leader; the others: serve(..., breeding.handle)
    """

    def __init__(self, problem, group, engines, islands):
        self.problem, self.group = problem, group
        self.view = GroupProblem(problem, group)    # the leader's islands breed in its box
        self.engines = engines
        self.shared = {i: node_shared_array(group, (engines[i].capacity, problem.dim),
                                            row_dtype(problem, engines[i].dtype)) for i in islands}
        self._boxes: dict = {}
        self._children = None          # this rank's block of the last batch
        self._last = (None, 0, 0)      # (island, first child, children) of that block
        self.pending: BreedPlan | None = None

    def adopt(self, islands) -> None:
        """Give the leader's ``islands`` (Island objects, not initialised yet) their
        shared archives and planned GAs."""
        for index, island in islands.items():
            old = island.archive
            island.archive = SharedArchive(self.shared[index].array, self, unique=old.unique,
                                           limit=old.limit, island=index)
            ga = PlannedGA.from_config(island.config)
            ga.sink = self
            island.algorithm = ga

    def close(self) -> None:
        """Free the shared rows (collective over the group's node)."""
        for shared in self.shared.values():
            shared.free()
        self.shared = {}

    # --- the protocol -------------------------------------------------------------
    def lead(self, plan: BreedPlan, evaluated: int) -> np.ndarray:
        """The leader's side of a planned batch: the plan to the group, its own block,
        the others' fitness and counts; returns the fitness of the first ``evaluated``."""
        group = self.group
        with group.purpose("breeding"):
            group.bcast_object(("breed", plan.wire(), evaluated), root=0)
        blocks = row_blocks(plan.n, group.size)
        fitness = np.empty(evaluated, np.float64)
        mine = self._breed(plan, evaluated)
        packs = {r: np.empty(self._pack_size(a, b, evaluated)) for r, (a, b) in enumerate(blocks) if r and b > a}
        with group.purpose("evaluation"):
            group.exchange(recvs=list(packs.items()))
        for r, pack in [(0, mine), *packs.items()]:
            a, b = blocks[r]
            if b > a:
                if plan.counts is not None:      # a refill's are the GA's zeros
                    plan.counts[a:b] = pack[:b - a]
                fitness[a:min(b, evaluated)] = pack[b - a:]
        return fitness

    def write(self, island: int, entered: np.ndarray, slots: np.ndarray) -> None:
        """The leader's merge decided ``entered`` children go to ``slots``: every rank
        writes those it bred (collective over the group)."""
        with self.group.purpose("breeding"):
            self.group.bcast_object(("write", island, entered, slots), root=0)
        self._write(island, entered, slots)

    def handle(self, order) -> bool:
        """A serving rank's part of ``order`` (a "breed" or "write"); False for others."""
        if order[0] == "breed":
            pack = self._breed(order[1], order[2])
            if pack.size:
                with self.group.purpose("evaluation"):
                    self.group.exchange(sends=[(0, pack)])
            return True
        if order[0] == "write":
            self._write(*order[1:])
            return True
        return False

    @staticmethod
    def _pack_size(a: int, b: int, evaluated: int) -> int:
        return (b - a) + max(0, min(b, evaluated) - a)

    def _breed(self, plan: BreedPlan, evaluated: int) -> np.ndarray:
        """Breed and evaluate this rank's block of ``plan``; returns its counts then the
        fitness of its children among the first ``evaluated`` (float64)."""
        shared = self.shared[plan.island]
        shared.sync()         # the leader's writes (generation 0, immigrants, restarts) are seen
        a, b = row_blocks(plan.n, self.group.size)[self.group.rank]
        self._last = (plan.island, a, b - a)
        if b == a:
            return np.empty(0)
        return self.breed_block(plan, a, b, evaluated, self._block(shared.array.dtype, b - a))

    def breed_block(self, plan: BreedPlan, a: int, b: int, evaluated: int, children: np.ndarray) -> np.ndarray:
        """Children ``a..b`` of ``plan`` bred from the shared rows into ``children`` and
        those among the first ``evaluated`` evaluated, child ``i + 1`` bred on the
        pipeline's helper thread while child ``i`` is evaluated where the problem
        pipelines (:func:`makes_children`); returns the counts then the fitness (float64)."""
        rows, box, count = self.shared[plan.island].array, self._box(plan.island), max(0, min(b, evaluated) - a)
        if count < 2 or not makes_children(self.problem):
            counts = breed_rows(plan, rows, a, b, box, children)
            fitness = evaluate_block(self.problem, children[:count])
            return np.concatenate([counts.astype(np.float64), fitness])
        counts = np.zeros(b - a, np.int64)

        def breed_one(c: int) -> None:      # child a + c, its bits as in the block (counter blocks by index)
            counts[c:c + 1] = breed_rows(plan, rows, a + c, a + c + 1, box, children[c:c + 1])

        pipeline.defer(children, breed_one)     # child c + 1 bred on the helper while child c is evaluated
        try:
            fitness = evaluate_block(self.problem, children[:count])
        finally:
            pipeline.settle()                   # the rest (and counts) before anyone reads them
        return np.concatenate([counts.astype(np.float64), fitness])

    def _write(self, island: int, entered, slots) -> None:
        shared = self.shared[island]
        last, a, count = self._last
        if last == island:
            for c, s in zip(entered, slots):
                if a <= c < a + count:
                    shared.array[s] = self._children[c - a]
        shared.sync()

    def _block(self, dtype, rows: int) -> np.ndarray:
        dim = self.problem.dim
        if self._children is None or self._children.dtype != dtype or self._children.shape[0] < rows:
            self._children = np.empty((rows, dim), dtype)
        return self._children[:rows]

    def _box(self, island: int):
        dtype = row_dtype(self.problem, self.engines[island].dtype)
        if dtype not in self._boxes:
            self._boxes[dtype] = breeding_box(self.view, dtype)    # as the leader's GA has it
        return self._boxes[dtype]


def makes_children(problem) -> bool:
    """Whether ``problem`` makes each child on the pipeline's helper thread while the one
    before is evaluated (:mod:`mpievo.evo.pipeline`; e.g. ``ModelProblem(pipeline=True)``
    on the CPU): then a rank breeds child ``i + 1`` there too, the predicate
    :meth:`mpievo.evo.island.Island.step` uses.

    Example:
        >>> from mpievo.evo import make_problem
        >>> makes_children(make_problem("sphere", dim=10))
        False
    """
    made_there = getattr(type(problem), "evaluates_deferred_rows", None)
    return made_there is not None and bool(made_there(problem))


def breed_rows(plan: BreedPlan, rows: np.ndarray, a: int, b: int, box, out: np.ndarray) -> np.ndarray:
    """Children ``a..b`` of ``plan`` bred from the archive ``rows`` into ``out`` (their
    bits are those of the same children in the whole batch); returns their mutation counts.

    Example::

        counts = breed_rows(plan, shared_rows, 4, 8, breeding_box(problem, dtype), out[:4])
    """
    lower, upper, scale = box
    n, dim = b - a, rows.shape[1]
    counts = np.zeros(n, np.int64)
    half = is_half(rows.dtype)
    if plan.kind == "uniform":
        work = np.empty((n, dim), np.float32) if half else out
        counter_kernels.uniform_fill(work, lower, upper, plan.key,
                                     np.uint64(plan.base + counter_kernels.gene_blocks(a, dim)))
        if half:
            round_into(work, out)
        return counts
    part = slice(a, b)
    base = np.uint64(plan.base + counter_kernels.mutation_blocks(a, dim, plan.code))
    draws = (plan.idx_a[part], plan.idx_b[part], plan.omega[part])
    if half:
        half_rows.vary_half(bits(rows), *draws, plan.steps[part], scale, lower, upper, plan.code,
                            np.uint64(plan.threshold), plan.inv_log_q, plan.dense, plan.key, base, counts,
                            bits(out), rows.dtype == BFLOAT16)
    else:
        counter_kernels.vary(rows, *draws, True, out, plan.steps[part], scale, lower, upper, plan.code,
                             np.uint64(plan.threshold), plan.inv_log_q, plan.dense, plan.key, base, counts)
    return counts
