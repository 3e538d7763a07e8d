"""``mpievo bench bbob``: mpievo jobs (and optionally pygmo) on COCO's BBOB suite.

Every run optimises one BBOB problem (function, dimension, instance) with one seed at
a budget of ``budget_per_dim * dim`` evaluations and the target f_opt + 1e-8 (COCO's
final target). Each evaluation goes through COCO's own problem object (``cocoex``),
so COCO's counter is the truth: under ``mpiexec`` every rank builds its own copy of
the problem, evaluates its islands' children through it, and the copies' counts,
summed over ranks, must equal the evaluations the engine reports and the budget
(fewer only when the target stopped the run), else :class:`BbobCheckError`.

Evaluations to reach a target (1e1 .. 1e-8 above f_opt) come from the COCO copy that
reached it first, scaled by that rank's share of all evaluations: exact on one rank,
within about one generation of the islands on several (their ranks interleave). The
peers (pygmo ``sade`` archipelago, pygmo ``cmaes`` with IPOP restarts, pycma's
BIPOP-CMA-ES) run on rank 0 through one COCO problem object each. Only rank 0 writes files
(:mod:`.bbob_report`).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import apply_overrides, load_config, parse_assignment
from ..schema import Settings, boolean, empty_or_list_of, integer, list_of, setting, text
from .bbob_report import TARGETS, read_csv, write_csv, write_report

#: the job without a TOML: the library's defaults (``mpievo.minimize``'s, tuned for cheap
#: problems; ``mpievo run``'s embedded job is tuned for 100-D Rastrigin and its 256-member
#: populations exceed small budgets) with float64 genomes: float32 cannot resolve
#: f - f_opt = 1e-8 on the ill-conditioned functions (condition 1e6)
DEFAULT_JOB = {"engine": {"dtype": "float64"}}
#: the issue's grid: sphere, separable ellipsoid, separable Rastrigin, Rosenbrock,
#: rotated ellipsoid, bent cigar, rotated Rastrigin, Weierstrass, Gallagher 101 peaks
DEFAULT_FUNCTIONS = (1, 2, 3, 8, 10, 12, 15, 16, 21)
FINAL_TARGET = TARGETS[-1]
#: pygmo side: islands of the sade archipelago and generations between its migrations
PEER_ISLANDS = 4
SADE_POPULATION = 20
SADE_EPOCH = 10


class BbobCheckError(RuntimeError):
    """A run whose COCO evaluation count disagrees with the engine or the budget."""


@dataclass(frozen=True)
class BbobOptions(Settings):
    """What to run: jobs x functions x dims x instances x seeds (the issue's grid by default).

    Attributes:
        jobs: TOML job paths, or "default" for :data:`DEFAULT_JOB`; empty: the default.
        assignments: ``table.key=value`` overrides for every job (as ``mpievo run --set``).
        islands: islands of every job (set before ``assignments``).
        peers: also run the peers (:data:`PEERS`: pygmo's ``sade`` archipelago, a single
            ``sade``, IPOP ``cmaes``, pycma's BIPOP-CMA-ES; rank 0, those importable).
        peer_names: only these peers (empty: all of :data:`PEERS`).
    """

    TABLE = "bench.bbob"

    functions: tuple = setting(DEFAULT_FUNCTIONS, list_of(integer(1, 24)), "BBOB function numbers")
    dims: tuple = setting((10, 40), list_of(integer(1)), "dimensions")
    instances: tuple = setting((1, 2, 3), list_of(integer(1)), "instances")
    seeds: tuple = setting((0, 1, 2), list_of(integer(0)), "seeds of every (function, dim, instance)")
    budget_per_dim: int = setting(10_000, integer(1), "evaluations per dimension of every run")
    islands: int = setting(4, integer(1), "islands of every job")
    jobs: tuple = setting((), empty_or_list_of(text), "TOML job paths or 'default'")
    assignments: tuple = setting((), empty_or_list_of(text), "table.key=value overrides of every job")
    peers: bool = setting(False, boolean, "also run pygmo's sade archipelago and cmaes, pycma's BIPOP")
    peer_names: tuple = setting((), empty_or_list_of(text), "only these peers (empty: all)")

    def _check_together(self, problems: list[str]) -> None:
        unknown = [name for name in self.peer_names if name not in PEERS]
        if unknown:
            problems.append(f"bench.bbob.peer_names: expected names among {sorted(PEERS)}, got {unknown}")


# ------------------------------------------------------------------------- COCO side
#: instances the bench may name (COCO's default suite holds only 1-5 and 101-110)
SUITE_INSTANCES = "instances: 1-15"


def _suite():
    import cocoex

    return cocoex.Suite("bbob", SUITE_INSTANCES, "")


def f_opt(function: int, dim: int, instance: int) -> float:
    """f at the optimum, from a separate problem object (the measured one is not touched).

    COCO gives x_opt only as a file in the working directory (``_best_parameter``), so
    it is read in a private temporary directory.
    """
    reference = _suite().get_problem_by_function_dimension_instance(function, dim, instance)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            reference._best_parameter("print")
            x_opt = np.loadtxt("._bbob_problem_best_parameter.txt", ndmin=1)
        finally:
            os.chdir(here)
    return float(reference(x_opt))


class CocoFitness:
    """A batch fitness evaluating row by row through one COCO problem object.

    Records, per target, this object's evaluation count at the first value within it.
    """

    def __init__(self, problem, fopt: float):
        self.problem, self.fopt = problem, fopt
        self.first_hit: list[int | None] = [None] * len(TARGETS)

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        start = self.problem.evaluations
        values = np.array([self.problem(row) for row in np.asarray(genomes, dtype=np.float64)])
        self._record(values - self.fopt, start)
        return values

    def scalar(self, x) -> float:
        """One genome (the peers' calls): as a batch of one, without building one (the
        wrapper cost three times COCO's own evaluation at 40-D). The targets fall, so the
        ones reached are always the first few: only the next one is compared."""
        start = self.problem.evaluations
        value = float(self.problem(np.asarray(x, dtype=np.float64)))
        k = self.first_hit.index(None) if None in self.first_hit else len(TARGETS)
        while k < len(TARGETS) and value - self.fopt <= TARGETS[k]:
            self.first_hit[k] = start + 1
            k += 1
        return value

    def _record(self, excess: np.ndarray, start: int) -> None:
        for k, target in enumerate(TARGETS):
            if self.first_hit[k] is None:
                within = np.flatnonzero(excess <= target)
                if within.size:
                    self.first_hit[k] = start + int(within[0]) + 1

    def state(self) -> dict:
        return {"evaluations": int(self.problem.evaluations), "best": float(self.problem.best_observed_fvalue1),
                "first_hit": list(self.first_hit)}


def coco_problem(function: int, dim: int, instance: int):
    return _suite().get_problem_by_function_dimension_instance(function, dim, instance)


# ------------------------------------------------------------------------- mpievo jobs
def load_jobs(options: BbobOptions) -> list[tuple[str, dict]]:
    """[(solver label, raw config)]: each job with the islands and ``assignments`` applied.

    The ``[problem]`` table and ``run.generations`` go: the bench sets the problem, and
    the budget (or the target) must end every run.

    Raises:
        mpievo.config.ConfigError: an unreadable job or a bad assignment.
    """
    paths = [None if str(p) == "default" else p for p in options.jobs or ("default",)]
    overrides = dict(parse_assignment(text) for text in options.assignments)
    jobs = []
    for path in paths:
        raw = copy.deepcopy(DEFAULT_JOB if path is None else load_config(path)[0])
        raw.pop("problem", None)
        raw.get("run", {}).pop("generations", None)
        raw = apply_overrides(raw, {"run.islands": options.islands, **overrides})
        label = "mpievo:" + ("default" if path is None else Path(path).stem)
        jobs.append((label, raw))
    return jobs


def run_mpievo(comm, config: dict, function: int, dim: int, instance: int, seed: int, budget: int,
               fopt: float) -> dict:
    """One mpievo run (collective), checked against COCO's counters; the same dict on every rank.

    Raises:
        BbobCheckError: COCO's evaluations (summed over ranks) differ from the engine's,
            or from the budget when the target was not reached.
    """
    from ..api import minimize
    from ..evo.problems import Problem

    problem = coco_problem(function, dim, instance)
    fitness = CocoFitness(problem, fopt)
    wrapped = Problem(fitness, dim, problem.lower_bounds, problem.upper_bounds, name=problem.id)
    start = time.perf_counter()
    result = minimize(wrapped, budget=budget, target=fopt + FINAL_TARGET, seed=seed, config=config,
                      comm=comm)
    wall = time.perf_counter() - start
    with comm.purpose("control"):
        states = comm.allgather_object(fitness.state())
    counted = sum(s["evaluations"] for s in states)
    name = f"{problem.id} seed {seed}"
    if counted != result.evaluations:
        raise BbobCheckError(f"{name}: expected COCO's evaluations summed over ranks = the engine's "
                             f"{result.evaluations}, got {counted}")
    if counted != budget and result.stop_reason != "target":
        raise BbobCheckError(f"{name}: expected {budget} COCO evaluations (the budget; stop reason "
                             f"{result.stop_reason!r}), got {counted}")
    return _row(function, dim, instance, seed, budget, counted, states, fopt, wall, result.stop_reason)


def _row(function, dim, instance, seed, budget, counted, states, fopt, wall, stop) -> dict:
    """A CSV row: best f - f_opt over ranks, evaluations to each target (scaled; see module)."""
    best = min(s["best"] for s in states) - fopt
    hits = []
    for k in range(len(TARGETS)):
        scaled = [s["first_hit"][k] * counted / s["evaluations"] for s in states
                  if s["first_hit"][k] is not None]
        hits.append(int(round(min(scaled))) if scaled else None)
    return {"function": function, "dim": dim, "instance": instance, "seed": seed, "budget": budget,
            "evaluations": counted, "stop": stop, "df_best": best,
            "log10_df": float(np.log10(best)) if best > 0 else float("-inf"),
            "evals_to_target": hits, "wall_s": wall}


# ------------------------------------------------------------------------- pygmo peers
class _Udp:
    """A pygmo user-defined problem over a :class:`CocoFitness`."""

    def __init__(self, fitness: CocoFitness, lower, upper):
        self.fitness_function, self.bounds = fitness, (list(lower), list(upper))

    def __deepcopy__(self, memo):
        # pygmo deep-copies its problem (and each population's); every copy must evaluate
        # through this one COCO object (it cannot be copied, and its counter is the truth)
        return self

    def fitness(self, x):
        return [self.fitness_function.scalar(x)]

    def get_bounds(self):
        return self.bounds


def sade_archipelago(pygmo, udp, budget: int, seed: int) -> None:
    """pygmo ``sade`` on :data:`PEER_ISLANDS` islands, each ``budget // islands`` evaluations,
    ring migration of the best over the worst every :data:`SADE_EPOCH` generations.

    Run in this process, island after island per epoch: pygmo's own archipelago would
    run a Python problem in other processes, away from this COCO problem object.
    """
    share = budget // PEER_ISLANDS
    generations = max(0, (share - SADE_POPULATION) // SADE_POPULATION)
    problem = pygmo.problem(udp)
    pops = [pygmo.population(problem, SADE_POPULATION, seed=seed * PEER_ISLANDS + i) for i in range(PEER_ISLANDS)]
    done = 0
    while done < generations:
        epoch = min(SADE_EPOCH, generations - done)
        for i, pop in enumerate(pops):
            algo = pygmo.algorithm(pygmo.sade(gen=epoch, seed=seed * 1000 + done * PEER_ISLANDS + i))
            pops[i] = algo.evolve(pop)
        best = [(p.champion_x, p.champion_f) for p in pops]
        for i, pop in enumerate(pops):   # the left neighbour's best replaces the worst
            x, f = best[i - 1]
            pop.set_xf(int(pop.worst_idx()), x, f)
        done += epoch


def sade_single(pygmo, udp, budget: int, seed: int) -> None:
    """One pygmo ``sade`` population of :data:`SADE_POPULATION` with the whole budget
    (the issue's "single sade"; pygmo's own tolerances may end it early)."""
    problem = pygmo.problem(udp)
    pop = pygmo.population(problem, SADE_POPULATION, seed=seed)
    generations = max(0, (budget - SADE_POPULATION) // SADE_POPULATION)
    pygmo.algorithm(pygmo.sade(gen=generations, seed=seed * 1000)).evolve(pop)


def cmaes_ipop(pygmo, udp, budget: int, seed: int) -> None:
    """pygmo ``cmaes`` (sigma0 0.3, bounds forced) restarted with a doubled population while
    the budget allows (IPOP): pygmo's CMA-ES has no restarts of its own; each run ends at
    its tolerances (1e-12) or its share of what is left; no restart once a run reached the
    final target (as an mpievo run stops there)."""
    problem = pygmo.problem(udp)
    dim = problem.get_nx()
    lam = 4 + int(3 * np.log(dim))
    restart = 0
    fitness = udp.fitness_function
    while budget - fitness.problem.evaluations >= 2 * lam and fitness.first_hit[-1] is None:
        left = budget - udp.fitness_function.problem.evaluations
        pop = pygmo.population(problem, lam, seed=seed * 1000 + restart)
        algo = pygmo.algorithm(pygmo.cmaes(gen=(left - lam) // lam, sigma0=0.3, ftol=1e-12, xtol=1e-12,
                                           force_bounds=True, seed=seed * 1000 + restart))
        algo.evolve(pop)
        lam, restart = 2 * lam, restart + 1


class _BudgetSpent(Exception):
    """Raised by :class:`_Capped` before an evaluation beyond the budget."""


class _Capped:
    """A scalar objective that refuses the evaluation after ``budget`` COCO evaluations
    (pycma's own ``maxfevals`` is checked between generations and may overshoot)."""

    def __init__(self, fitness: CocoFitness, budget: int):
        self.fitness, self.budget = fitness, int(budget)

    def __call__(self, x) -> float:
        if self.fitness.problem.evaluations >= self.budget:
            raise _BudgetSpent
        return self.fitness.scalar(x)


def cma_bipop(cma, udp, budget: int, seed: int) -> None:
    """pycma's BIPOP-CMA-ES (``cma.fmin2(..., restarts=9, bipop=True)``, the reference
    restart strategy): starts uniform in [-4, 4] per gene, step 2 (a fifth of BBOB's box
    width), pycma's boundary handling on the box, every default otherwise, up to the
    budget (an evaluation beyond it is refused, which ends the run) or the final target
    (as an mpievo run stops there).

    Example::

        import cma
        row = run_peer(cma, "cma:bipop", 15, 10, 4, 0, 100_000, f_opt(15, 10, 4))   # through here
    """
    lower, upper = (np.asarray(b, np.float64) for b in udp.bounds)
    rng = np.random.default_rng(seed)
    options = {"bounds": [list(lower), list(upper)], "maxfevals": budget, "seed": seed * 1000 + 1,
               "ftarget": udp.fitness_function.fopt + FINAL_TARGET,
               "verbose": -9, "verb_disp": 0, "verb_log": 0, "verb_filenameprefix": os.devnull}
    start = lambda: rng.uniform(0.8 * lower, 0.8 * upper)   # noqa: E731 (a new start per restart)
    with contextlib.suppress(_BudgetSpent):
        cma.fmin2(_Capped(udp.fitness_function, budget), start, 0.2 * float(np.mean(upper - lower)),
                  options, restarts=9, bipop=True)


PEERS = {"pygmo:sade": sade_archipelago, "pygmo:sade-single": sade_single, "pygmo:cmaes": cmaes_ipop,
         "cma:bipop": cma_bipop}


def peer_module(name: str) -> str:
    """The module a peer is given (its first argument): its name's prefix ("pygmo", "cma")."""
    return name.split(":")[0]


def peer_digest(name: str) -> str:
    """What a peer's run depends on besides the problem, seed and budget (resume's key)."""
    if peer_module(name) == "cma":
        return digest({"peer": name})
    return digest({"peer": name, "islands": PEER_ISLANDS, "population": SADE_POPULATION, "epoch": SADE_EPOCH})


def digest(config: dict) -> str:
    """12 hex digits naming a job's configuration (a row of runs.csv is reused only under it)."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def run_peer(module, name: str, function: int, dim: int, instance: int, seed: int, budget: int,
             fopt: float) -> dict:
    problem = coco_problem(function, dim, instance)
    fitness = CocoFitness(problem, fopt)
    start = time.perf_counter()
    PEERS[name](module, _Udp(fitness, problem.lower_bounds, problem.upper_bounds), budget, seed)
    state = fitness.state()
    if state["evaluations"] > budget:
        raise BbobCheckError(f"{problem.id} seed {seed} {name}: expected at most {budget} COCO "
                             f"evaluations, got {state['evaluations']}")
    return _row(function, dim, instance, seed, budget, state["evaluations"], [state], fopt,
                time.perf_counter() - start, "budget")


def peer_modules(names) -> dict:
    """{peer name: its module} for the peers ``names`` whose module imports.

    Example::

        peer_modules(PEERS)          # {"pygmo:sade": <module 'pygmo'>, ..., "cma:bipop": <module 'cma'>}
    """
    modules = {}
    for name in names:
        with contextlib.suppress(ImportError):
            modules[name] = importlib.import_module(peer_module(name))
    return modules


# ------------------------------------------------------------------------- the grid
def run_key(row: dict) -> tuple:
    """What makes two runs the same run (resume reuses a row under this key)."""
    return tuple(row[k] for k in ("function", "dim", "instance", "seed", "solver", "budget", "job"))


def bench_bbob(comm, options: BbobOptions, out: str | os.PathLike | None = None, *, resume: bool = False,
               log=print) -> dict:
    """Every job (and peer) on every (function, dim, instance, seed); collective.

    With ``out``, rank 0 rewrites ``out/runs.csv`` after every run, so an interrupted
    grid keeps what it measured; ``resume`` reuses the rows of that file whose run key
    (:func:`run_key`: the problem, seed, solver, budget and the job's digest) is in the
    grid and runs only the rest. Without ``resume`` an existing ``runs.csv`` with runs in
    it is refused rather than overwritten.

    Returns:
        {"rows": [...], "notes": [...], "options": {...}} (rank 0 writes it under ``out``);
        ``rows`` are this grid's, reused ones included.

    Raises:
        FileExistsError: ``out/runs.csv`` holds runs and ``resume`` is off.
    """
    jobs = load_jobs(options)
    wanted = (options.peer_names or tuple(PEERS)) if options.peers else ()
    modules = peer_modules(wanted)
    notes = []
    missing_modules = sorted({peer_module(name) for name in wanted if name not in modules})
    if missing_modules:
        notes.append(f"{', '.join(missing_modules)} not importable (the bench extra): their peers skipped")
    kept = _previous_rows(comm, out, resume)
    done = {run_key(row): row for row in kept}
    rows, reused = [], 0

    def record(row: dict) -> None:
        nonlocal reused
        rows.append(row)
        old = run_key(row) in done
        reused += old
        if not old:
            kept.append(row)
            if comm.rank == 0 and out is not None:
                write_csv(kept, Path(out) / "runs.csv")
        _progress(comm, log, row, " (reused)" if old else "")

    jobs = [(label, config, digest(config)) for label, config in jobs]     # each digest once
    peers = {name: peer_digest(name) for name in modules}
    for dim in options.dims:
        budget = options.budget_per_dim * dim
        for function in options.functions:
            for instance in options.instances:
                fopt = []       # f_opt of this problem, computed when a run needs it

                def optimum():
                    if not fopt:
                        fopt.append(f_opt(function, dim, instance))
                    return fopt[0]

                for seed in options.seeds:
                    key = (function, dim, instance, seed)
                    for label, config, job in jobs:
                        found = done.get((*key, label, budget, job))
                        if found is None:
                            found = {**run_mpievo(comm, config, function, dim, instance, seed, budget, optimum()),
                                     "solver": label, "job": job}
                        record(found)
                    previous = {name: done.get((*key, name, budget, job)) for name, job in peers.items()}
                    missing = [name for name, row in previous.items() if row is None]
                    if missing:
                        previous.update(_peers(comm, modules, missing, function, dim, instance, seed, budget,
                                               optimum()))
                    for row in previous.values():
                        record(row)
    if reused:
        notes.append(f"{reused} runs reused from {Path(out) / 'runs.csv'}")
    result = {"rows": rows, "notes": notes, "ranks": comm.size,
              "options": dict(vars(options))}
    if comm.rank == 0:
        for note in notes:
            log(f"note: {note}")
        if out is not None:
            write_report(result, Path(out), all_rows=kept, log=log)
    return result


def _previous_rows(comm, out, resume: bool) -> list[dict]:
    """The rows of ``out/runs.csv`` (rank 0 reads, every rank gets them); refuses to
    overwrite them without ``resume``."""
    rows, error = [], None
    path = None if out is None else Path(out) / "runs.csv"
    if comm.rank == 0 and path is not None and path.exists():
        rows = read_csv(path)
        if rows and not resume:
            error = (f"{path}: expected no earlier runs (or --resume to reuse them), got "
                     f"{len(rows)} runs")
    with comm.purpose("control"):
        rows, error = comm.bcast_object((rows, error))
    if error:
        raise FileExistsError(error)
    return rows


def _peers(comm, modules, names, function, dim, instance, seed, budget, fopt) -> list[tuple[str, dict]]:
    """Rank 0 runs the peers ``names``; every rank gets their rows."""
    rows = None
    if comm.rank == 0:
        rows = []
        for name in names:
            row = run_peer(modules[name], name, function, dim, instance, seed, budget, fopt)
            rows.append((name, {**row, "solver": name, "job": peer_digest(name)}))
    with comm.purpose("control"):
        return comm.bcast_object(rows)


def _progress(comm, log, row, suffix: str) -> None:
    if comm.rank == 0:
        log(f"f{row['function']} d{row['dim']} i{row['instance']} seed {row['seed']} {row['solver']:>17}: "
            f"{row['evaluations']} evals, f-fopt {row['df_best']:.3g}, {row['wall_s']:.1f} s{suffix}")
