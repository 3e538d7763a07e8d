"""Wall time of one CMA-ES island run against pygmo's ``cmaes``: same budget, same fitness.

Both minimise the same built-in function object (``mpievo.evo.make_problem``) from
``popsize`` random points with step 0.3 of the box width until ``evaluations``
fitness calls are spent. The island evaluates its batch in one call, as ``mpievo
run`` does; pygmo calls the function once per genome (a pygmo user-defined problem),
as pygmo users write it. pygmo's cmaes runs with ``force_bounds`` (solutions kept in
the box, like the island) and its early stops switched off, so both spend the whole
budget; the island restarts (IPOP) when one of its criteria holds. Both run with one
BLAS thread, as ``mpievo run`` sets per rank. Runs are interleaved and the medians
reported, so machine noise hits both alike.

Run (pygmo is the optional ``bench`` extra)::

    .venv/bin/python examples/bench_cmaes.py --dim 40 --evaluations 15000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from threadpoolctl import threadpool_limits

from mpievo.evo import EngineConfig, Island, make_problem
from mpievo.evo.algorithms.cmaes_core import default_popsize

SIGMA0 = 0.3


def island_run(name: str, dim: int, evaluations: int, seed: int, dtype: str = "float32") -> dict:
    """One island (archive of ``popsize`` members) until ``evaluations`` are spent."""
    popsize = default_popsize(dim)
    config = EngineConfig(algorithm="cmaes", capacity=popsize, cma_sigma0=SIGMA0, dtype=dtype)
    t0, c0 = time.perf_counter(), time.process_time()
    island = Island(0, make_problem(name, dim), config, seed=seed)
    island.initialize()
    generation = 0
    while island.evaluations < evaluations:
        generation += 1
        island.step(generation)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "evaluations": island.evaluations, "best": island.best()[1],
            "restarts": island.algorithm.restarts}


class _PygmoProblem:
    """A built-in function as a pygmo user-defined problem (one genome per call)."""

    def __init__(self, name: str, dim: int):
        self.problem = make_problem(name, dim)

    def fitness(self, x):
        return [float(self.problem.func(x[None, :])[0])]

    def get_bounds(self):
        return (self.problem.lower.tolist(), self.problem.upper.tolist())


def pygmo_run(name: str, dim: int, evaluations: int, seed: int) -> dict | None:
    """pygmo's cmaes on the same function and budget, or None without pygmo."""
    try:
        import pygmo
    except ImportError:
        return None
    popsize = default_popsize(dim)
    t0, c0 = time.perf_counter(), time.process_time()
    population = pygmo.population(pygmo.problem(_PygmoProblem(name, dim)), popsize, seed=seed)
    algorithm = pygmo.algorithm(pygmo.cmaes(gen=(evaluations - popsize) // popsize, sigma0=SIGMA0,
                                            ftol=0.0, xtol=0.0, force_bounds=True, seed=seed))
    population = algorithm.evolve(population)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "evaluations": int(population.problem.get_fevals()), "best": float(population.champion_f[0])}


def compare(name: str = "sphere", dim: int = 40, evaluations: int = 15000, repeats: int = 5,
            dtype: str = "float32") -> dict:
    """Interleaved island and pygmo runs: medians and the wall-time ratio island / pygmo."""
    ours, theirs = [], []
    with threadpool_limits(limits=1):
        island_run(name, dim, 10 * default_popsize(dim), 0, dtype)   # warm-up: imports, kernels
        for seed in range(repeats):
            ours.append(island_run(name, dim, evaluations, seed, dtype))
            reference = pygmo_run(name, dim, evaluations, seed)
            if reference is not None:
                theirs.append(reference)

    def median(runs, key):
        return statistics.median(r[key] for r in runs) if runs else None

    island_s, pygmo_s = median(ours, "seconds"), median(theirs, "seconds")
    island_cpu, pygmo_cpu = median(ours, "cpu_seconds"), median(theirs, "cpu_seconds")
    return {"problem": name, "dim": dim, "evaluations": evaluations, "repeats": repeats, "dtype": dtype,
            "island_seconds": island_s, "pygmo_seconds": pygmo_s,
            "ratio": island_s / pygmo_s if pygmo_s else None,
            "cpu_ratio": island_cpu / pygmo_cpu if pygmo_cpu else None,
            "island_best": median(ours, "best"), "pygmo_best": median(theirs, "best"),
            "island_restarts": [r["restarts"] for r in ours]}


def main(argv: list[str] | None = None) -> int:
    """Command line: prints one JSON object per problem."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", default="sphere,ellipsoid")
    parser.add_argument("--dim", type=int, default=40)
    parser.add_argument("--evaluations", type=int, default=15000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args(argv)
    for name in args.problems.split(","):
        print(json.dumps(compare(name, args.dim, args.evaluations, args.repeats, args.dtype), default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
