"""The standard merges (``mpievo.torch.merge``), their hyperparameters tuned on the
validation split.

Each expert, the plain average, task arithmetic (``lam`` over ``LAMBDAS``) and TIES
(``density`` over ``DENSITIES`` x ``lam`` over ``TIES_LAMBDAS``), each picked by
:func:`scoring.fitness` on the validation split: the same criterion, on the same split,
as the mpievo merge. The test split is left for the report.
"""

from __future__ import annotations

import numpy as np

from mpievo.torch import average, task_arithmetic, ties
from scoring import fitness

LAMBDAS = (0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
DENSITIES = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
TIES_LAMBDAS = (0.5, 0.7, 1.0, 1.5)


def baselines(problem, splits, expert_names) -> dict[str, tuple[np.ndarray, dict]]:
    """{name: (merged genome, chosen hyperparameters)}: each expert, average, task
    arithmetic and TIES, tuned on the validation split. ``problem`` is one of
    ``merge_problems``' (its bases: the base, then the experts; its model the one merged
    into, overwritten)."""
    flat, genomes = problem.flat, problem.bases.array
    base, experts = genomes[0], genomes[1:]

    def tuned(merge, grid):
        """(the genome, the settings) of ``merge(**settings)`` best on the validation split."""
        def score(settings):
            merge(**settings)
            return fitness(flat.model, splits)

        best = max(grid, key=score)
        merge(**best)
        return flat.read(), best

    out = {name: (experts[k].copy(), {}) for k, name in enumerate(expert_names)}
    out["average"] = tuned(lambda: average(flat, experts), [{}])
    out["task arithmetic"] = tuned(lambda lam: task_arithmetic(flat, base, experts, lam),
                                   [{"lam": lam} for lam in LAMBDAS])
    out["TIES"] = tuned(lambda density, lam: ties(flat, base, experts, density, lam),
                        [{"density": d, "lam": lam} for d in DENSITIES for lam in TIES_LAMBDAS])
    return out
