"""From a validated job config to a running island model (what ``mpievo run`` and
:func:`mpievo.minimize` run).

Example (on every rank, e.g. under ``mpiexec -n 2``)::

    from mpievo.config import validate
    from mpievo.parallel import run_job
    from mpievo.parallel.world import world_comm

    comm = world_comm()                  # MPI under a launcher, else one process without it
    job = validate({"run": {"islands": 4, "budget": 20000},
                    "problem": {"name": "sphere", "dim": 10}}, comm.size)
    result = run_job(job, comm)          # result.best_genome on rank 0
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..config import ProblemConfig
from ..evo import genomes
from ..evo.fidelity import fidelity_of, with_fidelity
from ..evo.genomes import BaseModels
from ..evo.moo.problems import MultiObjectiveProblem, moo_problem
from ..evo.problem_wrappers import RowFitness, TimeLimitedFitness
from ..evo.problems import Problem, integer_genes, load_object, make_problem
from ..rules.budget import plan
from .shared_bases import share_bases
from .runner import Reporter, RunLoop, RunResult, RunSettings
from .groups import scheme_layout
from .hybrid import HybridScheme
from .master_worker import MasterWorkerScheme
from .replicated import ReplicatedScheme
from .scheme import IslandScheme, Scheme


def build_problem(problem: ProblemConfig | Problem, stack: contextlib.ExitStack | None = None) -> Problem:
    """The :class:`Problem` of a validated ``[problem]`` table (a Problem: itself).

    With ``time_limit > 0`` each genome is evaluated under
    :class:`mpievo.evo.problem_wrappers.TimeLimitedFitness` (a late evaluation counts as failed, +inf);
    its worker is closed when ``stack`` closes. ``bases`` (a .npy path) become the
    problem's base models (replacing a problem object's own, on a copy of it); ``integer``
    its integer genes (on a copy).
    """
    if isinstance(problem, Problem):
        return problem
    built = _problem_of_table(problem, stack)
    if problem.bases is not None:
        built = copy.copy(built)          # a problem object named by the job stays as it is
        built.bases = BaseModels(problem.bases)
    if problem.integer is not None:
        columns = integer_genes(list(problem.integer), built.dim, built.lower, built.upper)
        own = getattr(built, "integer", None)
        if own is None or not np.array_equal(own, columns):
            built = copy.copy(built)      # the table's integer genes (validated with the table)
            built.integer = columns
    return with_fidelity(built, problem.fidelity_sample, problem.fidelity_margin)


def _problem_of_table(problem: ProblemConfig, stack: contextlib.ExitStack | None) -> Problem:
    limit = problem.time_limit
    common = dict(lower=problem.lower, upper=problem.upper, maximize=problem.maximize)
    if problem.n_obj > 1:
        return objectives_problem(problem)
    if not problem.user_function:
        built = make_problem(problem.name, problem.dim, shift=problem.shift, rotate=problem.rotate,
                             seed=problem.seed, **common)
        if limit <= 0:
            return built
        func, batched = built.func, True
    else:
        func, batched = load_object(problem.name), problem.batched
        if isinstance(func, Problem):
            return func
        if limit <= 0:
            return make_problem(func, problem.dim, batched=batched, **common)
    limited = TimeLimitedFitness(RowFitness(func) if batched else func, limit, method=problem.time_limit_method)
    if stack is not None:
        stack.callback(limited.close)
    lower, upper = (common["lower"], common["upper"]) if problem.user_function else (built.lower, built.upper)
    return Problem(limited.evaluate_many, problem.dim, lower, upper, maximize=problem.maximize,
                   name=f"{problem.name} (time limit {limit:g} s)", batched=True)


def objectives_problem(problem: ProblemConfig) -> MultiObjectiveProblem:
    """The multi-objective problem of a ``[problem]`` table with ``n_obj >= 2``."""
    point = problem.reference_point
    if not problem.user_function:
        built = moo_problem(problem.name, problem.dim, problem.n_obj)
        if point is not None:
            built.reference_point = np.asarray(point, dtype=np.float64)
        return built
    func = load_object(problem.name)
    if isinstance(func, Problem):
        return func
    return MultiObjectiveProblem(func, problem.dim, problem.lower, problem.upper, n_obj=problem.n_obj,
                                 reference_point=point, name=problem.name, batched=problem.batched)


def job_problem(job, problem: Problem) -> Problem:
    """``problem`` over the rows of the job's ``engine.genome`` (dense: ``problem`` itself;
    an already encoded problem as it is), after checking every island agrees on them."""
    genomes.check_shared(job.engines)
    return genomes.encode(problem, job.engines[0])


def build_scheme(comm, job, problem: Problem | None = None) -> Scheme:
    """The scheme of a validated :class:`mpievo.config.JobConfig` (its resolved engines,
    policy and schedule, as they are): the :class:`IslandScheme`, or the
    :class:`HybridScheme` when ``run.ranks_per_island`` (scheme "hybrid") or the
    "centralized" scheme make groups of several ranks (call its ``close()`` when done),
    or the :class:`ReplicatedScheme`, or the :class:`MasterWorkerScheme` ("master_worker"
    on several ranks)."""
    problem = job_problem(job, build_problem(job.problem) if problem is None else problem)
    common = dict(seed=job.run.seed, policy=job.policy, schedule=job.schedule, budget=job.run.budget)
    if job.run.scheme == "master_worker" and comm.size > 1:
        if fidelity_of(problem) is not None:
            raise ValueError("problem.fidelity_sample: expected run.scheme 'island', got 'master_worker'")
        return MasterWorkerScheme(comm, problem, job.engines, breed=job.run.breed, **common)
    layout = scheme_layout(comm, job.run)
    if fidelity_of(problem) is not None and not layout.trivial:
        raise ValueError(f"problem.fidelity_sample: expected run.scheme 'island' (one rank per island group), "
                         f"got {job.run.scheme!r}")
    if layout.trivial:      # one rank per group: the plain island model
        return IslandScheme(comm, problem, job.engines, leader_rate=job.run.leader_rate,
                            leader_rate_final=job.run.leader_rate_final,
                            leader_margin=job.run.leader_margin, finish_diversity=job.run.finish_diversity,
                            finish_reserve=job.run.finish_reserve, progress_rate=job.run.progress_rate,
                            restart_after=job.run.restart_after, **common)
    if job.run.scheme == "replicated":
        return ReplicatedScheme(comm, problem, job.engines, **common)
    return HybridScheme(comm, layout, problem, job.engines, breed=job.run.breed, **common)


def run_job(job, comm, *, reporters: Sequence[Reporter] = (), checkpointer: Any = None,
            stop: Any = None, restored: Any = None, generations: int | None = None,
            start=None, callback=None) -> RunResult:
    """Run a validated job until its generations, budget or target end it (collective).

    Args:
        job: a :class:`mpievo.config.JobConfig`.
        comm: an mpievo Communicator.
        reporters: rank 0's observers (progress, output files).
        checkpointer: mpievo.io.Checkpointer or None.
        stop: a flag with ``requested`` (mpievo.faults.StopRequest) or None.
        restored: a loaded checkpoint (``.islands`` for this rank, ``.run_state``) or None.
        generations: override ``run.generations``.
        start: a starting genome (SciPy's ``x0``): row 0 of every island's generation 0
            (:meth:`mpievo.evo.Problem.starting_from`); None: none.
        callback: rank 0's ``callback(point, genome) -> bool`` at each log point; True
            ends the run there (see :class:`mpievo.parallel.runner.RunLoop`).

    Returns:
        The :class:`RunResult` (genome and per-island list on rank 0).
    """
    with contextlib.ExitStack() as stack:
        problem = build_problem(job.problem, stack)
        if start is not None:
            if job.engines[0].genome == "seeded":
                raise ValueError("expected no starting genome with engine.genome = 'seeded' (its islands "
                                 "start from the base models), got one")
            problem = problem.starting_from(start)
        # the bases of any encoding, and of dense problems that read them (merge recipes)
        if problem.bases is not None and not problem.bases.attached:
            stack.callback(share_bases(comm, problem.bases))    # one copy per node, freed at the end
            stack.callback(problem.bases.detach)                # (callbacks run last-in first-out)
        problem = job_problem(job, problem)       # build_scheme takes it as it is
        encoded = genomes.encoding_of(problem)
        scheme = build_scheme(comm, job, problem)
        if isinstance(scheme, (HybridScheme, MasterWorkerScheme)):
            stack.callback(scheme.close)
        extra = {}
        if restored is not None:
            scheme.restore(restored.islands, restored.run_state)
            extra["wall_s_before"] = float(np.asarray(restored.run_state.get("wall_s_before", 0.0)))
        run = job.run
        settings = RunSettings(run.generations if generations is None else generations, run.log_every,
                               run.checkpoint_every, run.checkpoint_seconds, run.target)
        loop = RunLoop(comm, scheme, settings, reporters=reporters, checkpointer=checkpointer,
                       config=job.config, stop=stop, extra_run_state=extra,
                       decode=None if encoded is None else encoded.decode, callback=callback)
        return loop.run()


def last_generation(job) -> int:
    """The run's last generation: ``run.generations`` or the budget's, whichever comes first."""
    budget_generation = plan(job.engines, job.problem.dim, job.run.budget).budget_generation
    return min(g for g in (job.run.generations, budget_generation) if g is not None)


def best_genome_bytes(result: RunResult) -> bytes:
    """The best genome's raw bytes (for comparing runs bit for bit); b"" off rank 0."""
    return b"" if result.best_genome is None else np.ascontiguousarray(result.best_genome).tobytes()


#: what in an output directory marks a run (a checkpoint directory, a finished run's summary)
RUN_MARKERS = ("checkpoints", "summary.json")
#: what ``--overwrite`` removes: everything a run writes there, and nothing else
RUN_OUTPUTS = (*RUN_MARKERS, "islands", "best_genome.npy", "convergence.png")


def make_default_out_dir(now=None, root: Path = Path("runs")) -> Path:
    """Create and return a new ``runs/<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ... when taken):
    made with one ``mkdir`` that fails when the name exists, so two runs started in the
    same second get different directories (rank 0 makes it; broadcast it to the others)."""
    import time

    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    for attempt in range(1, 10_000):
        path = root / (stamp if attempt == 1 else f"{stamp}-{attempt}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"expected a free name for {root / stamp}, got 9999 taken ones")


def holds_run(out: Path) -> bool:
    """Whether ``out`` holds a run: a ``checkpoints`` directory with anything in it, or a
    summary.json (a directory left by a run stopped before its first checkpoint does not)."""
    checkpoints = out / "checkpoints"
    return (out / "summary.json").exists() or (checkpoints.is_dir() and any(checkpoints.iterdir()))


def claim_out_dir(out: Path, *, resuming: bool, overwrite: bool) -> None:
    """Make ``out`` ready for a run: create it; refuse one that holds another run unless
    ``resuming`` (the run continues there) or ``overwrite`` (its run is removed first).

    Raises:
        ValueError: ``out`` holds a run, and neither way out was chosen; or both were.
    """
    out = Path(out)
    if overwrite and resuming:
        raise ValueError("expected --overwrite or --resume, got both (a resume keeps the run it continues)")
    if not resuming and holds_run(out):
        if not overwrite:
            raise ValueError(f"expected a new or empty output directory, got {out}, which holds another run; "
                             f"continue it with `mpievo run --resume {out}`, choose a new --out, or add "
                             "--overwrite to remove it first")
        _remove_run(out)
    out.mkdir(parents=True, exist_ok=True)


def _remove_run(out: Path) -> None:
    import shutil

    for name in RUN_OUTPUTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
