"""``mpievo.minimize``: the island model from Python, with or without ``mpiexec``.

Example::

    import mpievo

    def sphere(X):                       # a batch: (n, dim) -> (n,)
        return (X * X).sum(axis=1)

    result = mpievo.minimize(sphere, bounds=[(-5, 5)] * 10, budget=40_000, target=1e-6)
    print(result.fun, result.x, result.evaluations, result.stop_reason)

``python script.py`` runs every island in this process without MPI (mpi4py is not
even imported). ``mpievo launch -n 4 -- python script.py`` runs the same islands
spread over 4 ranks: every rank calls ``minimize`` and gets the same result, bit for
bit the one-process result (same seed, same island count). It is the engine of
``mpievo run``: any key of a TOML job may come in ``config``.

SciPy's conventions where they apply: ``x0`` (a starting point in every island),
``callback(intermediate_result)`` at each log point (return True, or raise
``StopIteration``, to stop), ``nfev``/``nit`` on the result and ``disp`` for progress.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .config import apply_overrides, load_config, validate
from .evo.problems import Problem, make_problem
from .parallel.job import last_generation, run_job
from .parallel.output import ProgressReporter
from .parallel.threads import limit_blas_threads
from .parallel.world import world_comm

#: islands when neither the call nor the config says: the same result on 1, 2 or 4 ranks
DEFAULT_ISLANDS = 4


@dataclass(frozen=True)
class MinimizeResult:
    """The outcome of :func:`minimize` (the same on every rank).

    Attributes:
        x: the best genome found (the islands' dtype, float32 by default); with several
            objectives the compromise member (lowest sum of objectives).
        fun: its fitness, in the problem's sense (several objectives: that sum).
        evaluations: fitness evaluations over all islands (also ``nfev``).
        generations: generations of the run (rounds; see :mod:`mpievo.rules.budget`;
            also ``nit``).
        stop_reason: "budget", "target", "generations" or "callback": what ended the run.
        best_island: the island that holds ``x``.
        islands: one dict per island: island, best_fitness, evaluations, steps (its
            own generations), nonfinite, immigrants, diversity (several objectives: and
            hypervolume).
        migrations: migrations made.
        wall_s: seconds the run took.
        config: the effective job config (no ``problem`` table for a Problem object
            or a callable).
        front: several objectives: the merged non-dominated set of all islands, a dict of
            ``objectives`` (k, n_obj), ``genomes`` (k, dim) float64, ``islands`` (k,),
            ``reference_point`` and ``hypervolume`` (None without moocore); else None.

    Example::

        result = mpievo.minimize("rastrigin", dim=10, budget=20_000)
        result.fun, result.nfev == result.evaluations, result.stop_reason    # (..., True, 'budget')
        max(result.islands, key=lambda island: island["best_fitness"])       # per-island records
    """

    x: np.ndarray
    fun: float
    evaluations: int
    generations: int
    stop_reason: str
    best_island: int
    islands: list[dict]
    migrations: int
    wall_s: float
    config: dict
    front: dict | None = None

    @property
    def nfev(self) -> int:
        """SciPy's name for :attr:`evaluations`."""
        return self.evaluations

    @property
    def nit(self) -> int:
        """SciPy's name for :attr:`generations`."""
        return self.generations


@dataclass(frozen=True)
class IntermediateResult:
    """What ``callback`` gets at a log point (SciPy's ``intermediate_result``).

    Attributes:
        x: the best genome so far (whole; the islands' dtype).
        fun: its fitness, in the problem's sense.
        nit: the generation just done.
        nfev: fitness evaluations so far over all islands.
        best_island: the island that holds ``x``.
        elapsed_s: seconds since the run started.
    """

    x: np.ndarray
    fun: float
    nit: int
    nfev: int
    best_island: int
    elapsed_s: float


class _Callback:
    """The run loop's ``callback(point, genome)`` from the user's ``callback(intermediate_result)``."""

    def __init__(self, callback: Callable[[IntermediateResult], Any]):
        self.callback = callback

    def __call__(self, point, genome) -> bool:
        best = point.best
        now = IntermediateResult(genome, best.best, point.generation, point.evaluations, best.island,
                                 point.elapsed_s)
        try:
            return bool(self.callback(now))       # numpy's True too (e.g. ``r.fun < 1e-3``)
        except StopIteration:
            return True


def minimize(problem: Problem | Callable | str | None = None, *,
             bounds: Sequence[tuple[float, float]] | None = None, lower=None, upper=None,
             dim: int | None = None, batched: bool | None = None, budget: int | None = None,
             target: float | None = None, generations: int | None = None, islands: int | None = None,
             algorithm: str | None = None, seed: int | None = None,
             config: Mapping[str, Any] | str | Path | None = None, comm=None, x0=None,
             callback: Callable[[IntermediateResult], Any] | None = None,
             disp: bool = False) -> MinimizeResult:
    """Optimise ``problem`` with the island model (collective under MPI: call it on every rank).

    Args:
        problem: a :class:`mpievo.evo.Problem`; a callable with ``bounds`` (or ``dim``,
            ``lower``, ``upper``), taking a batch ``(n, dim) -> (n,)`` or, with
            ``batched=False``, one genome ``(dim,) -> float``; a built-in name
            ("rastrigin") or ``"module:function"`` (with ``dim``; it fills
            ``config``'s ``[problem]`` table); None: ``config``'s ``[problem]`` table.
        bounds: SciPy style, one ``(low, high)`` pair per gene (sets ``dim``).
        lower, upper: the box as scalars or one value per gene (instead of ``bounds``).
        dim: genes per genome.
        batched: a callable takes a whole batch (True) or one genome (default: the
            config's ``problem.batched``, else True).
        budget: evaluations over all islands, initial populations included, never
            exceeded (each island gets an equal share; with ``run.leader_rate`` in
            ``config`` the island with the best fitness takes more at each migration).
        target: stop once some island's best fitness is at least this good (<= when
            minimising), one generation after the one that reached it.
        generations: the most generations (default 200 without a budget, none with one).
        islands: number of islands (default: the config's, else 4).
        algorithm: every island's algorithm: "ga", "de", "cmaes", "shade", "nsga2",
            "smsemoa" or "moead" (a problem with several objectives, e.g. a MultiObjectiveProblem) or
            "module:Class" (per-island lists go in ``config["engine"]``).
        seed: seed of every random stream (default: the config's, else 0).
        config: a job config as a dict (``{"engine": {...}, "migration": {...}}``) or a
            TOML file; the arguments above override its keys.
        comm: the communicator (default: COMM_WORLD under an MPI launcher, else none).
        x0: a starting point, ``(dim,)`` inside the box: one member of every island's
            initial population (the others as without it).
        callback: ``callback(intermediate_result)`` with an :class:`IntermediateResult`
            at each log point (every ``run.log_every`` generations, default 10, and the
            last); returning a true value or raising ``StopIteration`` ends the run there (stop
            reason "callback"). Called on rank 0 only; the decision reaches every rank,
            so the run ends at the same generation on any rank count.
        disp: print progress lines on rank 0 (generation, evaluations, best, speed).

    Returns:
        The :class:`MinimizeResult`, the same on every rank.

    Raises:
        mpievo.config.ConfigError: every problem with the settings, on every rank.
        ValueError, TypeError: a problem that cannot be built, or an ``x0`` outside the box.

    Example::

        import mpievo

        def sphere(X):                               # a batch (n, dim) -> (n,)
            return (X * X).sum(axis=1)

        result = mpievo.minimize(sphere, bounds=[(-5, 5)] * 10, budget=20_000, seed=1)
        print(result.x, result.fun, result.nfev, result.stop_reason)
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"expected a callable callback or None, got {type(callback).__name__}")
    raw, source = _config(config)
    overrides = {"run.budget": budget, "run.target": target, "run.generations": generations,
                 "run.islands": islands, "run.seed": seed, "engine.algorithm": algorithm}
    run_table = raw.get("run")
    if islands is None and not (isinstance(run_table, Mapping) and "islands" in run_table):
        overrides["run.islands"] = DEFAULT_ISLANDS
    lower, upper, dim = _box(bounds, lower, upper, dim)
    built = _built_problem(problem, lower, upper, dim, batched)
    if built is None:       # a name: the config's [problem] table takes it
        overrides.update({"problem.name": problem, "problem.dim": dim, "problem.lower": lower,
                          "problem.upper": upper, "problem.batched": batched})
    comm = world_comm() if comm is None else comm
    job = validate(apply_overrides(raw, overrides), comm.size, source, problem=built)
    guard = contextlib.nullcontext()
    if comm.size > 1:     # a failing rank must not leave the others waiting
        from .comm import abort_on_error

        guard = abort_on_error()
    with guard, contextlib.ExitStack() as stack:
        limit_blas_threads(job.run.blas_threads, stack)
        reporters = [ProgressReporter(last_generation(job), live=False)] if disp and comm.rank == 0 else []
        result = run_job(job, comm, reporters=reporters, start=x0,
                         callback=None if callback is None else _Callback(callback))
    mine = None
    if comm.rank == 0:
        mine = MinimizeResult(result.best_genome, result.best_fitness, result.evaluations, result.generations,
                              result.stop_reason, result.best_island, result.islands, result.migrations,
                              result.wall_s, job.config, result.front)
    with comm.purpose("control"):
        return comm.bcast_object(mine)


def _built_problem(problem, lower, upper, dim, batched) -> Problem | None:
    """The Problem of an object or a callable; None for a name (or none)."""
    if problem is None or isinstance(problem, str):
        return None
    if isinstance(problem, Problem):
        given = {"bounds": lower if upper is None else upper, "dim": dim, "batched": batched}
        if any(value is not None for value in given.values()):
            raise ValueError(f"expected no bounds, dim or batched beside a Problem (it has its own), got "
                             f"{ {k: v for k, v in given.items() if v is not None} }")
        return problem
    return make_problem(problem, dim, lower=lower, upper=upper, batched=batched is not False)


def _config(config) -> tuple[dict, str]:
    """(a deep copy of the config, its name for messages)."""
    if config is None:
        return {}, "minimize() config"
    if isinstance(config, (str, Path)):
        return load_config(config)[0], str(config)
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config)), "minimize() config"
    raise TypeError(f"expected config to be a dict, a TOML file path or None, got {type(config).__name__}")


def _box(bounds, lower, upper, dim):
    """(lower, upper, dim) from SciPy-style ``bounds`` or as given (lists for the config)."""
    if bounds is None:
        return _plain(lower), _plain(upper), dim
    if lower is not None or upper is not None:
        raise ValueError("expected bounds or lower/upper, got both")
    pairs = np.asarray(bounds, dtype=np.float64)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or len(pairs) == 0:
        raise ValueError(f"expected bounds as (low, high) pairs, one per gene, got shape {pairs.shape}")
    if dim is not None and dim != len(pairs):
        raise ValueError(f"expected dim = {len(pairs)} (one pair per gene), got {dim}")
    return pairs[:, 0].tolist(), pairs[:, 1].tolist(), len(pairs)


def _plain(bound):
    """A bound as the config takes it: a float or a list of floats (None stays None)."""
    if bound is None:
        return None
    values = np.asarray(bound, dtype=np.float64)
    return float(values) if values.ndim == 0 else values.tolist()
