"""Single-rank engine throughput, and the pygmo ``sade`` reference on the same function.

``engine_throughput`` runs one island on the sphere (1000-D by default) for a fixed
wall time or evaluation budget and reports evaluations per second;
``pygmo_sade_throughput`` does the same for pygmo's self-adaptive DE (population 20,
the sphere as a Python problem, as pygmo users write it) and returns None when pygmo
(the optional ``bench`` extra) is not installed. ``compare`` interleaves the two
(repeats, medians) so that machine noise hits both alike, and reports the ratio of
wall-clock rates and, for loaded machines, of rates per CPU second.

Run: ``python -m mpievo.evo.bench --dim 1000 --seconds 2 --repeats 3``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from .config import EngineConfig
from .island import Island
from .problems import make_problem


def engine_throughput(dim: int = 1000, seconds: float = 2.0, *, evaluations: int | None = None,
                      config: EngineConfig | None = None, seed: int = 0,
                      problem: str = "sphere") -> dict:
    """Evaluations per second of one island (default settings unless ``config``).

    Args:
        dim: genes.
        seconds: wall-time budget (ignored when ``evaluations`` is given).
        evaluations: evaluation budget instead of a time budget.
        config: engine settings.
        seed: run seed.
        problem: built-in problem name.

    Returns:
        dict with evals_per_s, evals_per_cpu_s, evaluations, seconds, generations,
        best, dim, algorithm, batch_size, dtype.
    """
    config = EngineConfig() if config is None else config
    island = Island(0, make_problem(problem, dim=dim), config, seed=seed)
    island.initialize()
    island.run(3)  # compile/load the kernels outside the timed part
    start_evals, start_gen = island.evaluations, island.generation
    t0, c0 = time.perf_counter(), time.process_time()
    generation = island.generation
    while True:
        for _ in range(10):
            generation += 1
            island.step(generation)
        elapsed = time.perf_counter() - t0
        done = island.evaluations - start_evals
        if (evaluations is not None and done >= evaluations) or (evaluations is None and elapsed >= seconds):
            break
    cpu = time.process_time() - c0
    return {
        "evals_per_s": done / elapsed, "evals_per_cpu_s": done / cpu, "evaluations": done,
        "seconds": elapsed,
        "generations": island.generation - start_gen, "best": island.best()[1], "dim": dim,
        "algorithm": island.algorithm.name, "batch_size": island.config.batch_size,
        "dtype": island.config.dtype,
    }


class _PygmoSphere:
    """The sphere as a pygmo user-defined problem."""

    def __init__(self, dim: int):
        self.dim = dim

    def fitness(self, x):
        return [float(np.dot(x, x))]

    def get_bounds(self):
        return ([-5.12] * self.dim, [5.12] * self.dim)


def pygmo_sade_throughput(dim: int = 1000, seconds: float = 2.0, *, population: int = 20,
                          seed: int = 0) -> dict | None:
    """Evaluations per second of pygmo's ``sade`` on the sphere, or None without pygmo."""
    try:
        import pygmo
    except ImportError:
        return None
    problem = pygmo.problem(_PygmoSphere(dim))
    pop = pygmo.population(problem, population, seed=seed)
    algo = pygmo.algorithm(pygmo.sade(gen=200, seed=seed))
    start_evals = pop.problem.get_fevals()
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        pop = algo.evolve(pop)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    done = pop.problem.get_fevals() - start_evals
    return {"evals_per_s": done / elapsed, "evals_per_cpu_s": done / cpu, "evaluations": done,
            "seconds": elapsed,
            "best": float(pop.champion_f[0]), "dim": dim, "population": population}


def compare(dim: int = 1000, seconds: float = 2.0, repeats: int = 3,
            config: EngineConfig | None = None) -> dict:
    """Interleaved engine and sade runs; medians and their ratio (None without pygmo)."""
    engine, sade = [], []
    for r in range(repeats):
        engine.append(engine_throughput(dim, seconds, config=config, seed=r))
        ref = pygmo_sade_throughput(dim, seconds, seed=r)
        if ref is not None:
            sade.append(ref)
    def median(runs, key):
        return statistics.median(r[key] for r in runs) if runs else None

    engine_rate, sade_rate = median(engine, "evals_per_s"), median(sade, "evals_per_s")
    engine_cpu, sade_cpu = median(engine, "evals_per_cpu_s"), median(sade, "evals_per_cpu_s")
    return {
        "dim": dim, "seconds": seconds, "repeats": repeats,
        "engine_evals_per_s": engine_rate,
        "sade_evals_per_s": sade_rate,
        "ratio": engine_rate / sade_rate if sade_rate else None,
        # per CPU second: fairer on a shared, loaded machine (both run on one core)
        "engine_evals_per_cpu_s": engine_cpu,
        "sade_evals_per_cpu_s": sade_cpu,
        "cpu_ratio": engine_cpu / sade_cpu if sade_cpu else None,
        "engine_best": [e["best"] for e in engine],
        "sade_best": [s["best"] for s in sade],
        "engine": engine[-1],
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: prints the comparison as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                        help="engine setting, e.g. --set batch_size=512 --set dtype='\"float64\"'")
    args = parser.parse_args(argv)
    settings = {}
    for item in args.set:
        key, _, value = item.partition("=")
        settings[key] = json.loads(value)
    result = compare(args.dim, args.seconds, args.repeats, EngineConfig.from_dict(settings))
    print(json.dumps(result, indent=2, default=float))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
