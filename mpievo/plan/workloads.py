"""The workload vocabulary of the cost model and of ``mpievo bench schemes``.

A :class:`Workload` is a fitness cost per child (none, sleep, burn or vary) at a genome
size; :class:`SchemesOptions` the bench job around it (islands, archive, budget per
genome size); :func:`workload_problem` the shifted (rotated up to :data:`ROTATE_MAX_DIM`
genes) rastrigin with that cost; :func:`measure` one timed run of a scheme on it (under
MPI, collective), its row; :func:`measure_workload` the fastest of repeated short runs.
Calibration (:mod:`.calibrate`) measures the model's constants with these runs, and the
bench (:mod:`mpievo.bench.schemes`) sweeps them, so both speak of the same jobs.
"""

from __future__ import annotations

import math
import os
import time
import zlib
from dataclasses import dataclass

import numpy as np

from ..schema import Settings, choice, integer, list_of, number, setting

#: the bench's schemes: run.scheme values, and master_worker with steady evaluation
SCHEMES = ("island", "hybrid", "centralized", "replicated", "master_worker", "master_worker_steady")
#: a bench scheme with this suffix is its run.scheme with engine.evaluation = "steady"
STEADY = "_steady"
#: a bench scheme with this suffix is its run.scheme with run.breed = "evaluator"
#: (:mod:`mpievo.parallel.breed_local`); the others run with run.breed = "leader"
EVALUATOR = "_evaluator"
#: schemes ``mpievo plan --measure`` also runs: evaluator breeding needs rows of the
#: counter-based kernels' size (:data:`mpievo.evo.operators.COUNTER_DIM` genes), which
#: most of the bench's workloads are not
MEASURED_SCHEMES = SCHEMES + ("hybrid" + EVALUATOR,)
MODES = ("sleep", "burn", "vary")
#: rotations above this many genes cost minutes of QR and 8*dim^2 bytes per rank
ROTATE_MAX_DIM = 1000
#: a vary child costs cost * factor, factor uniform in [1, 4] / 2.5 (mean 1, ratio 4)
VARY_RANGE = (1.0, 4.0)


#: a run shorter than this is repeated and its fastest kept: a run of a few milliseconds
#: is at the scale of one scheduler time slice here, and the first run after another
#: workload pays for its memory and caches
SHORT_RUN_S = 0.5
#: a cost-0 run shorter than this is repeated too: its wall time is the run loop's Python
#: and messages, which other work on the machine moves by up to 2x from one run to the
#: next (one 100-gene run here took 0.27 s in one sweep and 0.54 s in another)
SHORT_COST0_RUN_S = 2.0
SHORT_RUN_REPEATS = 5


@dataclass(frozen=True)
class Workload:
    """A fitness cost per child (``mode``: none, sleep, burn or vary) at a genome size."""

    cost_ms: float
    mode: str
    dim: int

    @property
    def label(self) -> str:
        cost = "cost 0" if self.mode == "none" else f"{self.cost_ms:g} ms {self.mode}"
        power = round(math.log10(self.dim))
        return f"{cost}, {f'1e{power}' if 10**power == self.dim and power > 3 else f'{self.dim:,}'} genes"


@dataclass(frozen=True)
class SchemesOptions(Settings):
    """What to sweep; see :func:`workloads` for how costs, modes and dims combine."""

    TABLE = "bench.schemes"

    ps: tuple = setting((1, 2, 4), list_of(integer(1)), "rank counts, 1 included (the speed-up base)")
    costs_ms: tuple = setting((0.0, 5.0, 50.0), list_of(number(0.0, math.inf)), "fitness costs per child, ms")
    modes: tuple = setting(MODES, list_of(choice(MODES)), "how a cost is spent")
    dims: tuple = setting((100, 100_000, 10_000_000), list_of(integer(1)), "genome sizes")
    budget: int = setting(192, integer(1), "evaluations per run below large_dim genes")
    islands: int = setting(0, integer(0), "islands of every run; 0: the largest P")
    capacity: int = setting(8, integer(1), "archive capacity = GA batch")
    interval: int = setting(2, integer(1), "generations between migrations")
    seed: int = setting(1, integer(0), "seed of every run")
    #: from this many genes: smaller archives and budget, so that the replicated scheme
    #: (every island on every rank) fits in memory and a run takes seconds
    large_dim: int = setting(1_000_000, integer(1), "from this many genes: large_capacity and large_budget")
    large_capacity: int = setting(2, integer(1), "archive capacity = batch from large_dim genes")
    large_budget: int = setting(32, integer(1), "evaluations per run from large_dim genes")
    #: cost-0 runs below this many genes take ``fast_factor`` times the budget: there a
    #: child costs microseconds, and 192 of them take ~10 ms, a few scheduler time
    #: slices, which no throughput model (nor a second run) reproduces
    fast_dim: int = setting(10_000, integer(1), "cost-0 runs below this many genes take fast_factor x the budget")
    fast_factor: int = setting(32, integer(1), "budget factor of cost-0 runs below fast_dim genes")
    #: whole sweeps, one after another (each runs every P in turn); a run's row is the
    #: one of median wall time over them: here a cost-0 run moves by a third from one
    #: quarter hour to the next, in both directions
    sweeps: int = setting(3, integer(1), "whole sweeps, one after another")
    #: a short run is repeated and its fastest kept (:func:`repeats_wanted`)
    short_repeats: int = setting(SHORT_RUN_REPEATS, integer(1), "runs taken of a short run, the fastest kept")

    def _check_together(self, problems: list[str]) -> None:
        if 1 not in self.ps:
            problems.append(f"bench.schemes.ps: expected rank counts including 1 (the speed-up base), "
                            f"got {self.ps}")
        for key, budget, capacity in (("budget", self.budget, self.capacity),
                                      ("large_budget", self.large_budget, self.large_capacity)):
            if budget < self.n_islands * capacity:
                problems.append(f"bench.schemes.{key}: expected at least {self.n_islands * capacity} evaluations "
                                f"(every island's first population), got {budget}")
        if self.islands and self.islands < max(self.ps):
            problems.append(f"bench.schemes.islands: expected at least {max(self.ps)} islands (one per rank), "
                            f"got {self.islands}")

    @property
    def n_islands(self) -> int:
        return self.islands or max(self.ps)

    def capacity_for(self, dim: int) -> int:
        return self.large_capacity if dim >= self.large_dim else self.capacity

    def budget_for(self, dim: int, cost_ms: float) -> int:
        """The run budget at ``dim`` genes and a child cost of ``cost_ms``."""
        if dim >= self.large_dim:
            return self.large_budget
        return self.budget * (self.fast_factor if cost_ms == 0 and dim < self.fast_dim else 1)


def workloads(options: SchemesOptions) -> list[Workload]:
    """The cost axis at the first dim (cost 0 once, every mode for each other cost),
    then the genome axis: every further dim at the first cost (and first mode)."""
    def modes(cost):
        return options.modes if cost > 0 else ("none",)

    first = options.costs_ms[0]
    loads = [Workload(c, m, options.dims[0]) for c in options.costs_ms for m in modes(c)]
    return loads + [Workload(first, modes(first)[0], d) for d in options.dims[1:]]


# ---------------------------------------------------------------- the fitness
def vary_factor(row: np.ndarray) -> float:
    """A child's cost factor in [0.4, 1.6] (mean 1), drawn from its genome's bytes, so
    every scheme and rank count sees the same costs."""
    u = zlib.crc32(np.ascontiguousarray(row).view(np.uint8)) / 2.0**32
    low, high = VARY_RANGE
    return (low + (high - low) * u) / ((low + high) / 2)


def burn(seconds: float) -> None:
    """Keep this thread's CPU busy for ``seconds`` of its own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class WorkloadFitness:
    """A batched fitness: ``base`` evaluated row by row plus the workload's cost per
    child; ``seconds`` adds up the wall time spent inside."""

    def __init__(self, base, workload: Workload):
        self.base = base
        self.workload = workload
        self.seconds = 0.0

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        values = np.empty(len(genomes), np.float64)
        for i, row in enumerate(genomes):
            # one row at a time: a rotation's matrix product rounds by the batch's row
            # count, and the schemes cut batches into different row blocks
            values[i] = self.base(row[None, :])[0]
            self._spend(row)
        self.seconds += time.perf_counter() - start
        return values

    def _spend(self, row: np.ndarray) -> None:
        mode, cost = self.workload.mode, self.workload.cost_ms / 1e3
        if mode == "none" or cost <= 0:
            return
        if mode == "burn":
            burn(cost)
        else:
            time.sleep(cost * (vary_factor(row) if mode == "vary" else 1.0))


def workload_problem(workload: Workload, seed: int):
    """The shifted (rotated up to :data:`ROTATE_MAX_DIM` genes) rastrigin with the
    workload's cost, as ``(Problem, WorkloadFitness)``."""
    from ..evo.problems import Problem, builtin_problem

    base = builtin_problem("rastrigin", workload.dim, shift=True, rotate=workload.dim <= ROTATE_MAX_DIM,
                           seed=seed)
    fitness = WorkloadFitness(base.func, workload)
    return Problem(fitness, workload.dim, base.lower, base.upper, name=base.name), fitness


# ---------------------------------------------------------------- one run (under MPI)
def run_scheme(scheme: str) -> tuple[str, str]:
    """(run.scheme, engine.evaluation) of a bench scheme (see :data:`SCHEMES`,
    :data:`MEASURED_SCHEMES`)."""
    scheme = scheme.removesuffix(EVALUATOR)
    if scheme.endswith(STEADY):
        return scheme[:-len(STEADY)], "steady"
    return scheme, "generational"


def run_breed(scheme: str) -> str:
    """run.breed of a bench scheme: "evaluator" with :data:`EVALUATOR`, else "leader".

    Example:
        >>> run_breed("hybrid_evaluator"), run_scheme("hybrid_evaluator"), run_breed("hybrid")
        ('evaluator', ('hybrid', 'generational'), 'leader')
    """
    return "evaluator" if scheme.endswith(EVALUATOR) else "leader"


def ranks_per_island(scheme: str, ranks: int) -> int:
    """Hybrid: groups of 2 ranks (of all of them on an odd count); else 1."""
    if run_scheme(scheme)[0] != "hybrid" or ranks == 1:
        return 1
    return 2 if ranks % 2 == 0 else ranks


def job_table(options: SchemesOptions, scheme: str, ranks: int, workload: Workload,
              budget: int | None = None) -> dict:
    """The job config of one run (everything but the problem)."""
    dim = workload.dim
    capacity = options.capacity_for(dim)
    run_name, evaluation = run_scheme(scheme)
    return {"run": {"seed": options.seed, "budget": budget or options.budget_for(dim, workload.cost_ms),
                    "islands": options.n_islands, "scheme": run_name, "breed": run_breed(scheme),
                    "ranks_per_island": ranks_per_island(scheme, ranks)},
            "engine": {"capacity": capacity, "batch_size": capacity, "evaluation": evaluation},
            "migration": {"interval": options.interval}}


def scheme_traffic(comm, scheme) -> dict[str, int]:
    """Bytes this rank sent by purpose over ``comm`` and the scheme's own communicators."""
    total: dict[str, int] = {}
    for sub in (comm, getattr(scheme, "group", None), getattr(scheme, "leaders", None)):
        for purpose, nbytes in (sub.traffic if sub is not None else {}).items():
            total[purpose] = total.get(purpose, 0) + int(nbytes)
    return total


def measure(workload: Workload, scheme_name: str, options: SchemesOptions, budget: int | None = None,
            mpi_comm=None) -> dict:
    """One timed run of ``scheme_name`` on every rank of ``mpi_comm`` (default the
    world; collective); the row on every rank."""
    from ..comm import Communicator
    from ..config import validate
    from ..parallel.hybrid import HybridScheme
    from ..parallel.job import build_scheme
    from ..parallel.runner import RunLoop, RunSettings

    comm = Communicator(mpi_comm)      # a fresh duplicate: its traffic counts this run only
    problem, fitness = workload_problem(workload, options.seed)
    job = validate(job_table(options, scheme_name, comm.size, workload, budget), comm.size,
                   problem=problem)
    scheme = build_scheme(comm, job, problem)
    try:
        comm.barrier()
        result = RunLoop(comm, scheme, RunSettings(job.run.generations, job.run.log_every)).run()
        traffic = scheme_traffic(comm, scheme)
        with comm.purpose("control"):
            gathered = comm.allgather_object((result.wall_s, fitness.seconds, traffic))
    finally:
        if isinstance(scheme, HybridScheme):
            scheme.close()
        comm.free()
    return run_row(workload, scheme_name, job, result, gathered)


def repeats_wanted(workload: Workload, first_wall_s: float, repeats: int = SHORT_RUN_REPEATS) -> int:
    """How many runs :func:`measure_workload` takes of a scheme, given its first one's wall time."""
    limit = SHORT_COST0_RUN_S if workload.mode == "none" else SHORT_RUN_S
    return repeats if first_wall_s < limit else 1


def measure_workload(workload: Workload, schemes: tuple[str, ...], options: SchemesOptions) -> list[dict]:
    """Each scheme's row at ``workload`` (collective): a run of each, then rounds over the
    schemes whose first run was short (:func:`repeats_wanted`: every rank sees the same
    wall time, the slowest rank's, so every rank repeats alike), and of each scheme
    its fastest run, with ``repeats``. Other work on this shared machine only adds
    time, in spells of seconds: the rounds spread a scheme's runs over the whole
    workload, and the fastest of them is the machine without that work (five launches
    of five 100-gene runs at 2 ranks, interleaved like this: the fastest spread 1.4x
    between launches, the median 1.5-1.8x)."""
    runs = {scheme: [measure(workload, scheme, options)] for scheme in schemes}
    wanted = {scheme: repeats_wanted(workload, first[0]["wall_s"], options.short_repeats)
              for scheme, first in runs.items()}
    for round_ in range(1, max(wanted.values())):
        for scheme in schemes:
            if wanted[scheme] > round_:
                runs[scheme].append(measure(workload, scheme, options))
    return [{**min(runs[scheme], key=lambda row: row["wall_s"]), "repeats": len(runs[scheme])}
            for scheme in schemes]


def run_row(workload: Workload, scheme_name: str, job, result, gathered) -> dict:
    """The measured row of one run from every rank's (wall, fitness seconds, traffic)."""
    wall = max(w for w, _, _ in gathered)
    by_purpose: dict[str, int] = {}
    for _, _, traffic in gathered:
        for purpose, nbytes in traffic.items():
            by_purpose[purpose] = by_purpose.get(purpose, 0) + nbytes
    generations = max(result.generations, 1)
    utilisation = [f / wall for _, f, _ in gathered]
    return {
        "workload": workload.label, "cost_ms": workload.cost_ms, "mode": workload.mode, "dim": workload.dim,
        "scheme": scheme_name, "ranks": len(gathered), "ranks_per_island": job.run.ranks_per_island,
        "islands": job.n_islands, "capacity": job.engines[0].capacity, "budget": job.run.budget,
        "generations": result.generations,
        "evaluations": result.evaluations, "wall_s": wall, "evals_per_s": result.evaluations / wall,
        "bytes_per_generation": sum(by_purpose.values()) / generations,
        "bytes_per_generation_by_purpose": {p: n / generations for p, n in sorted(by_purpose.items())},
        "utilisation": utilisation, "utilisation_mean": sum(utilisation) / len(utilisation),
        "utilisation_min": min(utilisation), "utilisation_max": max(utilisation),
        "best_fitness": float(result.best_fitness), "stop_reason": result.stop_reason,
        "loadavg_1min": os.getloadavg()[0],     # other work on the machine shows here
    }


def warm_up(options: SchemesOptions, schemes: tuple[str, ...]) -> None:
    """Untimed runs that compile the kernels and set up MPI paths before the timed ones."""
    from ..evo.operators import COUNTER_DIM

    def run(scheme, dim):
        budget = 2 * options.n_islands * options.capacity_for(dim)
        measure(Workload(0.0, "none", dim), scheme, options, budget)

    for scheme in schemes:
        run(scheme, min(options.dims))
    if max(options.dims) >= COUNTER_DIM:      # the counter-based breeding kernels
        run("island", COUNTER_DIM)


def sleep_until_all_arrive(mpi_comm) -> None:
    """A barrier on the MPI communicator whose waiting ranks sleep between tests: MPI's
    blocking barrier spins and would steal the cores being measured."""
    request = mpi_comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)
