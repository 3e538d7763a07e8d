"""``mpievo bench moo``: hypervolume of mpievo's NSGA-II islands against pygmo's ``nsga2``
and ``moead`` archipelagos, at equal evaluation budget.

Every run optimises one built-in problem (ZDT1-4, ZDT6, DTLZ1-7 with 2 or 3 objectives)
with one seed and ``budget`` evaluations over ``islands`` islands of ``population``
members each, initial populations included, migration on a ring every ``interval``
generations (``emigrants`` per edge; a migrant replaces a resident only when that
resident does not dominate it):

* mpievo: each of ``algorithms`` (``nsga2``, ``smsemoa``, ``moead``) on every island,
  capacity = batch = ``population``, the run's budget split equally over the islands
  (:func:`mpievo.parallel.run_job`), with pygmo ``nsga2``'s variation settings
  (:data:`LIKE_PYGMO`: crossover 0.95, eta_c 10, eta_m 50, mutation 0.01 per gene of every
  child), so
  that the two NSGA-II differ in their code, not their parameters; ``moead`` with pygmo
  ``moead``'s (:data:`LIKE_PYGMO_MOEAD`: DE variation, not mpievo's default SBX);
* pygmo ``nsga2`` and ``moead`` (Tchebycheff, 20 neighbours; grid weights for 2
  objectives, low-discrepancy ones for more): one population per island, evolved
  ``interval`` generations at a time in this process (its ``archipelago`` would run a
  Python problem in other processes), then the ring migration above (the
  ``emigrants`` best by ``select_best_N_mo`` replace the worst by
  ``sort_population_mo``). Each island evaluates at most ``budget // islands``.

``defaults`` (``mpievo bench moo --defaults``) runs both sides as a user would, at their
defaults: mpievo's job gives only the islands, the budget, the seed, the problem (name and
objectives) and ``engine.algorithm`` (population, batch, variation and migration: the
library's defaults); pygmo runs ``nsga2`` at its defaults on ``islands`` populations of
``population``, unconnected (an ``archipelago``'s default topology: no migration); where
pymoo is installed, its ``NSGA2`` at its defaults runs beside them the same way
(:func:`run_pymoo_defaults`), the reference of mpievo's defaults. The table then compares
the medians with pygmo's (:func:`defaults_table`).

Checks (:class:`MooCheckError` otherwise): every final point is evaluated again and must
give the objectives the solver reported, and no solver may pass the budget (pygmo's
evaluations are counted in the problem it calls). The score is the hypervolume
(moocore) of the non-dominated set of all islands' members at the problem's reference
point, 1.1 x the nadir of its true front (points beyond it add nothing).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np

from ..config import MULTI_OBJECTIVE_ALGORITHMS, validate
from ..evo.moo.indicators import hypervolume, merged_front
from ..evo.moo.problems import BUILTIN_MOO, moo_problem
from ..schema import Settings, boolean, choice, integer, list_of, setting, text

DEFAULT_PROBLEMS = ("zdt1", "zdt2", "zdt3", "zdt4", "zdt6", "dtlz1:2", "dtlz2:2", "dtlz7:2",
                    "dtlz1:3", "dtlz2:3", "dtlz4:3", "dtlz5:3", "dtlz7:3")
PEERS = ("nsga2", "moead")
#: mpievo's engine settings equal to pygmo nsga2's defaults (cr, eta_c, eta_m, m; every child mutated)
LIKE_PYGMO = {"sbx_prob": 0.95, "sbx_eta": 10.0, "pm_eta": 50.0, "mutation_rate": 0.01, "pm_prob": 1.0}
#: pygmo moead's default neighbourhood (fewer for populations below 21)
MOEAD_NEIGHBOURS = 20
#: mpievo's moead settings equal to pygmo moead's defaults (DE, eta_m, mutation 1/dim of every
#: child, neighbours)
LIKE_PYGMO_MOEAD = {"moead_variation": "de", "pm_eta": 20.0, "mutation_rate": None, "pm_prob": 1.0,
                    "moead_neighbours": MOEAD_NEIGHBOURS}


class MooCheckError(RuntimeError):
    """A run whose points do not re-evaluate to their objectives, or that passed its budget."""


def parse_problem(spec: str) -> tuple[str, int]:
    """``"dtlz2:3"`` -> ("dtlz2", 3); ``"zdt1"`` -> ("zdt1", 2); ``"wfg4:3"`` as DTLZ.

    Raises:
        ValueError: an unknown problem or a bad objective count.
    """
    name, _, count = spec.partition(":")
    if name not in BUILTIN_MOO:
        raise ValueError(f"expected a problem among {sorted(BUILTIN_MOO)} (':m' for DTLZ and WFG objectives), got {spec!r}")
    if count and not (count.isdigit() and int(count) >= 2 and (not name.startswith("zdt") or count == "2")):
        raise ValueError(f"expected ':2' or more objectives for a DTLZ or WFG (ZDT: 2 only), got {spec!r}")
    return name, int(count or 2)


@dataclass(frozen=True)
class MooBenchOptions(Settings):
    """What to run: problems x seeds x solvers, at one budget."""

    TABLE = "bench.moo"

    problems: tuple = setting(DEFAULT_PROBLEMS, list_of(text), "built-in problems, 'name' or 'dtlzN:m'")
    seeds: tuple = setting((0, 1, 2), list_of(integer(0)), "seeds of every problem")
    algorithms: tuple = setting(("nsga2",), list_of(choice(MULTI_OBJECTIVE_ALGORITHMS)), "mpievo's island algorithms")
    budget: int = setting(40_000, integer(8), "evaluations of every run, all islands together")
    islands: int = setting(4, integer(1), "islands of every solver")
    population: int = setting(100, integer(8, 100_000), "members per island (pygmo nsga2: a multiple of 4)")
    interval: int = setting(10, integer(1), "generations between migrations")
    emigrants: int = setting(4, integer(0), "migrants per ring edge and migration")
    peers: bool = setting(True, boolean, "also run pygmo's nsga2 and moead (needs pygmo)")
    defaults: bool = setting(False, boolean, "both sides at their defaults (mpievo: only the algorithm, "
                             "islands and budget; pygmo: nsga2 at its defaults, unconnected islands of population)")

    def _check_together(self, problems: list[str]) -> None:
        for spec in self.problems:
            try:
                parse_problem(spec)
            except ValueError as err:
                problems.append(f"{self.TABLE}.problems: {err}")
        if self.population % 4:
            problems.append(f"{self.TABLE}.population: expected a multiple of 4 (pygmo's nsga2), "
                            f"got {self.population}")
        if self.emigrants > self.population:
            problems.append(f"{self.TABLE}.emigrants: expected at most the population {self.population}, "
                            f"got {self.emigrants}")
        if self.budget < 2 * self.islands * self.population:
            problems.append(f"{self.TABLE}.budget: expected at least two generations of every island "
                            f"({2 * self.islands * self.population}), got {self.budget}")


def run_mpievo(comm, problem, name: str, n_obj: int, seed: int, options: MooBenchOptions,
               algorithm: str = "nsga2") -> dict:
    """One mpievo run; its merged front (every island's members) and evaluations."""
    from ..parallel import run_job

    job = validate({"run": {"islands": options.islands, "budget": options.budget, "seed": seed,
                            "log_every": 1 << 30},
                    "problem": {"name": name, "dim": problem.dim, "n_obj": n_obj},
                    "engine": {"algorithm": algorithm, "capacity": options.population,
                               "batch_size": options.population,
                               **(LIKE_PYGMO_MOEAD if algorithm == "moead" else LIKE_PYGMO)},
                    "migration": {"interval": options.interval, "emigrants": options.emigrants}}, comm.size)
    result = run_job(job, comm)
    front = result.front
    return {"points": None if front is None else front["objectives"],
            "genomes": None if front is None else front["genomes"], "evaluations": result.evaluations}


def run_mpievo_defaults(comm, problem, name: str, n_obj: int, seed: int, options: MooBenchOptions,
                        algorithm: str = "nsga2") -> dict:
    """One mpievo run as a user would start it: islands, budget, seed, problem, algorithm.

    Example::

        run = run_mpievo_defaults(SelfComm(), moo_problem("zdt1"), "zdt1", 2, 0, MooBenchOptions(defaults=True))
    """
    from ..parallel import run_job

    job = validate({"run": {"islands": options.islands, "budget": options.budget, "seed": seed,
                            "log_every": 1 << 30},
                    "problem": {"name": name, "n_obj": n_obj}, "engine": {"algorithm": algorithm}}, comm.size)
    if job.problem.dim != problem.dim:
        raise MooCheckError(f"{name}: expected the default job's dim {problem.dim}, got {job.problem.dim}")
    result = run_job(job, comm)
    front = result.front
    return {"points": None if front is None else front["objectives"],
            "genomes": None if front is None else front["genomes"], "evaluations": result.evaluations}


def run_peer_defaults(pygmo, problem, seed: int, options: MooBenchOptions) -> dict:
    """pygmo ``nsga2`` at its defaults on ``islands`` unconnected populations (an archipelago's
    default topology), each evolved once over its share of the budget.

    Example::

        run = run_peer_defaults(pygmo, moo_problem("zdt1"), 0, MooBenchOptions(defaults=True))
    """
    prob = pygmo.problem(_PygmoProblem(problem))
    size, n = options.population, options.islands
    generations = (options.budget // n - size) // size
    pops = [pygmo.algorithm(pygmo.nsga2(gen=generations, seed=seed * n + i + 1)).evolve(
        pygmo.population(prob, size, seed=seed * n + i)) for i in range(n)]
    return {"points": np.concatenate([p.get_f() for p in pops]),
            "genomes": np.concatenate([p.get_x() for p in pops]),
            "evaluations": sum(int(p.problem.get_fevals()) for p in pops)}


def pymoo_available() -> bool:
    """Whether pymoo (the moo extra) can be imported, for :func:`run_pymoo_defaults`.

    Example::

        if pymoo_available():
            run = run_pymoo_defaults(moo_problem("zdt1"), 0, MooBenchOptions(defaults=True))
    """
    try:
        import pymoo.algorithms.moo.nsga2  # noqa: F401
    except ImportError:
        return False
    return True


def run_pymoo_defaults(problem, seed: int, options: MooBenchOptions) -> dict:
    """pymoo's ``NSGA2`` at its defaults (SBX 15 at 0.9, mutation 20 at 1/dim, duplicates
    eliminated) with a population of ``population``, as ``islands`` independent runs of
    ``budget // islands // population`` generations each (the initial one included), so
    no run passes its share of the budget.

    Example::

        run = run_pymoo_defaults(moo_problem("zdt1"), 0, MooBenchOptions(defaults=True))
    """
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.problem import Problem
    from pymoo.optimize import minimize

    class _Problem(Problem):
        def __init__(self):
            super().__init__(n_var=problem.dim, n_obj=problem.n_obj,
                             xl=np.asarray(problem.lower, np.float64), xu=np.asarray(problem.upper, np.float64))

        def _evaluate(self, x, out, *args, **kwargs):
            out["F"] = problem(np.asarray(x, dtype=np.float64))

    size, n = options.population, options.islands
    runs = [minimize(_Problem(), NSGA2(pop_size=size), ("n_gen", options.budget // n // size), seed=seed * n + i)
            for i in range(n)]
    return {"points": np.concatenate([r.pop.get("F") for r in runs]),
            "genomes": np.concatenate([r.pop.get("X") for r in runs]),
            "evaluations": sum(int(r.algorithm.evaluator.n_eval) for r in runs)}


class _PygmoProblem:
    """pygmo's view of a built-in problem (pygmo counts the evaluations of each population's copy)."""

    def __init__(self, problem):
        self.problem = problem

    def fitness(self, x):
        return self.problem(np.asarray(x, dtype=np.float64)[None])[0]

    def get_nobj(self):
        return self.problem.n_obj

    def get_bounds(self):
        return (np.asarray(self.problem.lower, np.float64).copy(), np.asarray(self.problem.upper, np.float64).copy())


def peer_algorithm(pygmo, peer: str, generations: int, n_obj: int, seed: int, population: int):
    """pygmo's ``nsga2`` or ``moead`` for ``generations`` generations."""
    if peer == "nsga2":
        return pygmo.algorithm(pygmo.nsga2(gen=generations, seed=seed))
    weights = "grid" if n_obj == 2 else "low discrepancy"
    return pygmo.algorithm(pygmo.moead(gen=generations, weight_generation=weights, seed=seed,
                                       neighbours=min(MOEAD_NEIGHBOURS, population - 1)))


def run_peer(pygmo, peer: str, problem, seed: int, options: MooBenchOptions) -> dict:
    """A pygmo archipelago (see the module docstring) in this process."""
    udp = _PygmoProblem(problem)
    prob = pygmo.problem(udp)
    size, n = options.population, options.islands
    pops = [pygmo.population(prob, size, seed=seed * n + i) for i in range(n)]
    generations = (options.budget // n - size) // size
    done = 0
    while done < generations:
        epoch = min(options.interval, generations - done)
        for i in range(n):
            algo = peer_algorithm(pygmo, peer, epoch, problem.n_obj, seed * 100_003 + done * n + i, size)
            pops[i] = algo.evolve(pops[i])
        done += epoch
        if done < generations and options.emigrants:
            _ring_migration(pygmo, pops, options.emigrants)
    xs = np.concatenate([p.get_x() for p in pops])
    fs = np.concatenate([p.get_f() for p in pops])
    evaluations = sum(int(p.problem.get_fevals()) for p in pops)
    return {"points": fs, "genomes": xs, "evaluations": evaluations}


def _ring_migration(pygmo, pops, k: int) -> None:
    """Each island's ``k`` best (by non-dominated rank and crowding) go to its right
    neighbour, where each replaces one of the worst residents unless that resident dominates it."""
    chosen = [(p.get_x()[idx], p.get_f()[idx])
              for p in pops for idx in [pygmo.select_best_N_mo(p.get_f(), k)]]
    for i, pop in enumerate(pops):
        xs, fs = chosen[i - 1]
        worst = pygmo.sort_population_mo(pop.get_f())[::-1][:len(fs)]
        residents = pop.get_f()
        for slot, x, f in zip(worst, xs, fs):
            if not pygmo.pareto_dominance(residents[slot], f):
                pop.set_xf(int(slot), x, f)


def check_run(label: str, problem, run: dict, budget: int) -> float:
    """Re-evaluate every final point, check the budget; the hypervolume of the merged front."""
    points, genomes = run["points"], run["genomes"]
    if run["evaluations"] > budget:
        raise MooCheckError(f"{label}: expected at most {budget} evaluations, got {run['evaluations']}")
    if points is None or len(points) == 0:
        raise MooCheckError(f"{label}: expected final points, got none")
    again = problem(genomes)
    if not np.allclose(again, points, rtol=1e-12, atol=1e-12):
        worst = float(np.max(np.abs(again - points)))
        raise MooCheckError(f"{label}: expected re-evaluated objectives equal to the reported ones, got a "
                            f"difference of {worst:g}")
    front, = merged_front(points)
    return hypervolume(front, problem.reference_point)


def bench_moo(comm, options: MooBenchOptions, pygmo=None, log=print) -> list[dict]:
    """Every (problem, seed, solver) run: one row each (rank 0 gets them all, checked)."""
    rows = []
    for spec in options.problems:
        name, n_obj = parse_problem(spec)
        problem = moo_problem(name, n_obj=n_obj)
        for seed in options.seeds:
            ours = run_mpievo_defaults if options.defaults else run_mpievo
            solvers = [(f"mpievo {a}", lambda a=a: ours(comm, problem, name, n_obj, seed, options, a))
                       for a in options.algorithms]
            if pygmo is not None and comm.rank == 0 and options.defaults:
                solvers.append(("pygmo nsga2", lambda: run_peer_defaults(pygmo, problem, seed, options)))
            elif pygmo is not None and comm.rank == 0:
                solvers += [(f"pygmo {peer}", lambda peer=peer: run_peer(pygmo, peer, problem, seed, options))
                            for peer in PEERS]
            if options.defaults and options.peers and comm.rank == 0 and pymoo_available():
                solvers.append(("pymoo nsga2", lambda: run_pymoo_defaults(problem, seed, options)))
            for solver, run in solvers:
                start = time.perf_counter()
                result = run()
                wall = time.perf_counter() - start
                if comm.rank != 0:
                    continue
                hv = check_run(f"{solver} on {spec} seed {seed}", problem, result, options.budget)
                rows.append({"problem": spec, "n_obj": n_obj, "dim": problem.dim, "seed": seed,
                             "solver": solver, "hypervolume": hv, "evaluations": result["evaluations"],
                             "wall_s": wall, "reference_point": problem.reference_point.tolist()})
                log(f"{spec:8s} seed {seed}  {solver:13s} hypervolume {hv:.6f}  "
                    f"{result['evaluations']} evaluations  {wall:.1f} s")
    return rows


def _grouped(rows: list[dict]) -> tuple[list[str], list[str], dict]:
    """(mpievo's solvers, the peers, {problem: (its first row, {solver: hypervolumes})}), in order."""
    solvers = list(dict.fromkeys(r["solver"] for r in rows))
    grouped = {}
    for row in rows:
        grouped.setdefault(row["problem"], (row, {s: [] for s in solvers}))[1][row["solver"]].append(row["hypervolume"])
    return ([s for s in solvers if s.startswith("mpievo")], [s for s in solvers if not s.startswith("mpievo")],
            {spec: (first, {s: np.array(v) for s, v in values.items()}) for spec, (first, values) in grouped.items()})


def _spread(values: np.ndarray) -> str:
    return f"{np.median(values):.4f} [{values.min():.4f}, {values.max():.4f}]"


def _verdicts(cells: list[str], wins: dict, solvers, won) -> None:
    """A "yes"/"no" cell per solver of ``solvers`` by ``won(solver)``, counted in ``wins``."""
    for solver in solvers:
        verdict = bool(won(solver))
        wins[solver] += verdict
        cells.append("yes" if verdict else "no")


def _markdown(head: list[str], body: list[list[str]], conditions: str) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(c) + " |" for c in body]
    return "\n".join(lines) + "\n\n" + conditions + "\n"


def summary_table(rows: list[dict], options: MooBenchOptions) -> str:
    """A markdown table: per problem, mpievo's medians (and ranges) against each peer's best and median."""
    ours, peers, grouped = _grouped(rows)
    head = ["problem", "m", "dim", "reference point"] + [f"{s} median [min, max]" for s in ours]
    head += [f"{s} best (median)" for s in peers] + [f"{s} median >= best peer" for s in ours if peers]
    body, wins = [], dict.fromkeys(ours, 0)
    for spec, (first, values) in grouped.items():
        cells = [spec, str(first["n_obj"]), str(first["dim"]),
                 "(" + ", ".join(f"{v:.4g}" for v in first["reference_point"]) + ")"]
        cells += [_spread(values[s]) for s in ours] + [f"{values[p].max():.4f} ({np.median(values[p]):.4f})"
                                                      for p in peers]
        _verdicts(cells, wins, ours if peers else (),
                  lambda s: all(float(np.median(values[s])) >= values[p].max() for p in peers))
        body.append(cells)
    conditions = (f"{options.budget} evaluations per run over {options.islands} islands of {options.population}, "
                  f"ring migration of {options.emigrants} every {options.interval} generations, "
                  f"seeds {list(options.seeds)}; hypervolume (moocore) of all islands' non-dominated points "
                  f"at the reference point (1.1 x the true front's nadir)")
    for s in ours if peers else ():
        conditions += f"; {s}'s median >= every peer's best on {wins[s]} of {len(grouped)} problems"
    return _markdown(head, body, conditions)


def defaults_table(rows: list[dict], options: MooBenchOptions) -> str:
    """The ``defaults`` mode's markdown table: per problem, every solver's median [min, max]
    and whether each mpievo algorithm's median reaches pygmo's; the count, and the conditions.

    Example::

        print(defaults_table(bench_moo(comm, options, pygmo), options))
    """
    ours, peers, grouped = _grouped(rows)
    peer = "pygmo nsga2" if "pygmo nsga2" in peers else (peers[0] if peers else None)
    head = ["problem", "m", "dim"] + [f"{s} median [min, max]" for s in ours + peers]
    head += [f"{s} >= {peer}" for s in ours if peer]
    body, wins = [], dict.fromkeys(ours, 0)
    for spec, (first, values) in grouped.items():
        cells = [spec, str(first["n_obj"]), str(first["dim"])] + [_spread(values[s]) for s in ours + peers]
        _verdicts(cells, wins, ours if peer else (), lambda s: np.median(values[s]) >= np.median(values[peer]))
        body.append(cells)
    conditions = (f"at defaults: {options.budget} evaluations per run over {options.islands} islands, seeds "
                  f"{list(options.seeds)}; mpievo: only engine.algorithm, run.islands, run.budget and the "
                  f"problem given (population, batch, variation, ring migration: the library's defaults)"
                  + ("" if "pygmo nsga2" not in peers else f"; pygmo: nsga2() at its defaults, {options.islands} "
                     f"unconnected islands (an archipelago's default topology) of {options.population}")
                  + ("" if "pymoo nsga2" not in peers else f"; pymoo: NSGA2 at its defaults, {options.islands} "
                     f"independent runs of {options.population}")
                  + "; hypervolume (moocore) of all islands' non-dominated points at 1.1 x the true front's nadir")
    for s in ours if peer else ():
        conditions += f"; {s}'s median >= {peer}'s median on {wins[s]} of {len(grouped)} problems"
    return _markdown(head, body, conditions)


def write_json(path, rows: list[dict], options: MooBenchOptions) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"options": options.to_dict(), "rows": rows}, handle, indent=1)
