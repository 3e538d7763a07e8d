"""Your own island algorithm, run by ``mpievo.minimize`` like a built-in one.

``HillClimber`` follows the island-algorithm protocol (``mpievo/evo/algorithms/base.py``):
each generation it samples ``children`` genomes around the best it has seen, with one
Gaussian step size for all genes, and adapts that step by the 1/5th success rule (wider
after a generation that improved the best, narrower after one that did not). The
island keeps the archive, evaluates the batch, migrates and checkpoints; the algorithm
only proposes batches (``ask``) and learns from their fitness (``tell``). Everything it
must carry across a resume is in ``state_dict``. Run::

    python examples/custom_algorithm.py                             # 4 islands, one process
    mpievo launch -n 2 -- python examples/custom_algorithm.py       # the same result, 2 ranks

From a TOML job, name it ``engine.algorithm = "custom_algorithm:HillClimber"`` with this
directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import numpy as np


# --8<-- [start:algorithm]
class HillClimber:
    """A (1, lambda) hill climber with a 1/5th-success step size (an island algorithm).

    Example::

        result = mpievo.minimize(sphere, bounds=[(-5, 5)] * 10, budget=20_000,
                                 algorithm="custom_algorithm:HillClimber")
    """

    name = "hill"

    def __init__(self, children: int = 16, step: float = 0.1):
        self.children, self.initial_step = children, step

    def init(self, problem, archive, rng):
        """Start from the archive's best member (the island's evaluated initial population)."""
        self.lower, self.upper = problem.lower, problem.upper
        self.step = self.initial_step * float(np.max(problem.upper - problem.lower))
        best = archive.best_index()
        self.centre = archive.genomes[best].astype(np.float64)
        self.centre_f = float(archive.fitness[best])
        self.dtype = archive.dtype

    def ask(self, rng):
        """``children`` genomes around the centre, inside the box, of the archive's dtype."""
        steps = rng.standard_normal((self.children, self.centre.size)) * self.step
        return np.clip(self.centre + steps, self.lower, self.upper).astype(self.dtype)

    def tell(self, genomes, fitness):
        """Move to the best child when it is better; widen or narrow the step."""
        best = int(np.argmin(fitness))
        improved = fitness[best] < self.centre_f
        if improved:
            self.centre, self.centre_f = genomes[best].astype(np.float64), float(fitness[best])
        self.step *= 1.5 if improved else 1.5 ** -0.25      # the 1/5th rule

    def migrate_in(self, genomes, fitness):
        """Immigrants the island accepted: jump to a better one."""
        best = int(np.argmin(fitness))
        if fitness[best] < self.centre_f:
            self.centre, self.centre_f = np.asarray(genomes[best], np.float64), float(fitness[best])

    def best(self):
        return self.centre.astype(self.dtype), self.centre_f

    def state_dict(self):
        return {"centre": self.centre.copy(), "centre_f": self.centre_f, "step": self.step}

    def load_state_dict(self, state):
        self.centre = np.array(state["centre"], np.float64)
        self.centre_f, self.step = float(state["centre_f"]), float(state["step"])


def sphere(X):
    """A batch (n, dim) -> (n,)."""
    return (X.astype(np.float64) ** 2).sum(axis=1)
# --8<-- [end:algorithm]


def main(budget: int = 20_000, seed: int = 1, verbose: bool = True):
    import mpievo

    # by "module:Class": this file's directory is on sys.path when it runs as a script
    result = mpievo.minimize(sphere, bounds=[(-5, 5)] * 10, budget=budget, seed=seed,
                             algorithm="custom_algorithm:HillClimber")
    if verbose:
        print(f"best {result.fun:.3g} after {result.nfev} evaluations on {len(result.islands)} islands")
    return result


if __name__ == "__main__":
    main()
