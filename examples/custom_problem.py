"""A user-defined problem and a user-defined island algorithm on mpievo's engine.

The problem fits a sum of sines to noisy samples: a genome holds (amplitude,
frequency, phase) for each of three terms, and the fitness of a whole batch is
computed at once with numpy. The algorithm is a small particle swarm written
against the island-algorithm protocol (``init/ask/tell/state_dict/load_state_dict/
best``, plus the optional ``migrate_in``).

Two islands run in one process -- the archive GA (with its own interpolation
weight) and the swarm -- and trade their best genomes every 10 generations, the
way ``mpievo run`` does across MPI ranks. Run::

    python examples/custom_problem.py

From a TOML file or the command line the same problem is named by reference, e.g.
``problem = "custom_problem:sine_fit_error"`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import numpy as np

from mpievo.evo import EngineConfig, Island, Problem, stream

TERMS = 3
SAMPLES_T = np.linspace(0.0, 2.0 * np.pi, 200)
TRUE_PARAMS = np.array([1.0, 1.0, 0.0, 0.5, 3.0, 1.0, 0.25, 7.0, 2.0])
SAMPLES_Y = (
    sum(TRUE_PARAMS[3 * k] * np.sin(TRUE_PARAMS[3 * k + 1] * SAMPLES_T + TRUE_PARAMS[3 * k + 2])
        for k in range(TERMS))
    + 0.05 * np.random.default_rng(0).standard_normal(SAMPLES_T.size)
)


def sine_fit_error(genomes: np.ndarray) -> np.ndarray:
    """Mean squared error of each genome's sum of sines; (n, 9) -> (n,)."""
    p = genomes.astype(np.float64).reshape(len(genomes), TERMS, 3)
    amplitude, frequency, phase = p[..., 0:1], p[..., 1:2], p[..., 2:3]
    curves = (amplitude * np.sin(frequency * SAMPLES_T + phase)).sum(axis=1)  # (n, samples)
    return np.mean((curves - SAMPLES_Y) ** 2, axis=1)


def make_sine_problem() -> Problem:
    lower = np.tile([0.0, 0.0, 0.0], TERMS)
    upper = np.tile([2.0, 10.0, 2.0 * np.pi], TERMS)
    return Problem(sine_fit_error, 3 * TERMS, lower, upper, name="sine-fit")


class ParticleSwarm:
    """Global-best particle swarm (inertia ``w``, pulls ``c1`` to own best, ``c2`` to the swarm's)."""

    name = "pso"

    def __init__(self, particles: int = 32, w: float = 0.7, c1: float = 1.5, c2: float = 1.5):
        self.particles, self.w, self.c1, self.c2 = particles, w, c1, c2

    def init(self, problem, archive, rng):
        self.lower = problem.lower.astype(archive.dtype)
        self.upper = problem.upper.astype(archive.dtype)
        self.x = rng.uniform(problem.lower, problem.upper, (self.particles, archive.dim)).astype(archive.dtype)
        self.v = np.zeros_like(self.x)
        self.own_best = self.x.copy()
        self.own_best_f = np.full(self.particles, np.inf)

    def ask(self, rng):
        lead = self.own_best[np.argmin(self.own_best_f)]
        r1, r2 = rng.random((2, *self.x.shape), dtype=np.float32)
        self.v = self.w * self.v + self.c1 * r1 * (self.own_best - self.x) + self.c2 * r2 * (lead - self.x)
        self.x = np.clip(self.x + self.v, self.lower, self.upper).astype(self.x.dtype)
        return self.x

    def tell(self, genomes, fitness):
        improved = fitness < self.own_best_f
        self.own_best[improved] = genomes[improved]
        self.own_best_f[improved] = fitness[improved]

    def migrate_in(self, genomes, fitness):
        worst = np.argsort(self.own_best_f)[::-1][:len(genomes)]
        self.own_best[worst] = genomes[:len(worst)]
        self.own_best_f[worst] = fitness[:len(worst)]

    def best(self):
        i = int(np.argmin(self.own_best_f))
        return self.own_best[i].copy(), float(self.own_best_f[i])

    def state_dict(self):
        return {"x": self.x.copy(), "v": self.v.copy(), "own_best": self.own_best.copy(),
                "own_best_f": self.own_best_f.copy()}

    def load_state_dict(self, state):
        for key in ("x", "v", "own_best", "own_best_f"):
            setattr(self, key, np.array(state[key]))


def main(generations: int = 300, seed: int = 1, verbose: bool = True) -> dict:
    """Run the two islands with ring migration; returns the start and final errors."""
    problem = make_sine_problem()
    # per-island settings, resolved once: the GA's weight (unused by the swarm)
    ga, swarm = EngineConfig(capacity=32, omega=[0.5, None]).resolve_all(2)
    islands = [Island(0, problem, ga, seed=seed), Island(1, problem, swarm, seed=seed, algorithm=ParticleSwarm())]
    for island in islands:
        island.initialize()
    start = min(island.best()[1] for island in islands)
    for g in range(1, generations + 1):
        for island in islands:
            island.step(g)
        if g % 10 == 0:  # ring migration, both directions decided before either receives
            outgoing = [isl.emigrants(2, "best", stream(seed, isl.index, g, "emigrate")) for isl in islands]
            for i, island in enumerate(islands):
                island.immigrate(*outgoing[i - 1], policy="better", unique=True)
    final = [island.best()[1] for island in islands]
    if verbose:
        for island, value in zip(islands, final):
            print(f"island {island.index} ({island.algorithm.name}): error {value:.4g}, "
                  f"{island.evaluations} evaluations, {island.immigrants_accepted} immigrants kept")
        genome = min(islands, key=lambda isl: isl.best()[1]).best()[0]
        print("fitted (amplitude, frequency, phase):", np.round(genome.astype(float).reshape(TERMS, 3), 3).tolist())
    return {"start": start, "final": final}


if __name__ == "__main__":
    main()
