"""The standard merges, their hyperparameters tuned on the validation split.

Each expert, the plain average, task arithmetic (``lam`` over ``LAMBDAS``) and TIES
(``density`` over ``DENSITIES`` x ``lam`` over ``TIES_LAMBDAS``), each picked by
:func:`scoring.fitness` on the validation split: the same criterion, on the same split,
as the mpievo merge. The test split is left for the report.
"""

from __future__ import annotations

import numpy as np

from scoring import fitness
from weights import assign, average, task_arithmetic, tensor_slices, ties

LAMBDAS = (0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
DENSITIES = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
TIES_LAMBDAS = (0.5, 0.7, 1.0, 1.5)


def baselines(merger) -> dict[str, tuple[np.ndarray, dict]]:
    """{name: (merged (P,) weights, chosen hyperparameters)}: each expert, average, task
    arithmetic and TIES, tuned on the validation split. ``merger`` is a loaded
    :class:`merge.Merger` (its base, experts and resident model)."""
    merger.load()
    base, experts, model, splits = merger.base, merger.experts, merger.template, merger.zoo.splits

    def score(weights: np.ndarray) -> float:
        assign(model, weights)
        return fitness(model, splits)

    out = {name: (experts[k], {}) for k, name in enumerate(merger.zoo.expert_names)}
    out["average"] = (average(experts), {})
    lam = max(LAMBDAS, key=lambda lam: score(task_arithmetic(base, experts, lam)))
    out["task arithmetic"] = (task_arithmetic(base, experts, lam), {"lam": lam})
    slices = tensor_slices(model)
    candidates = {(d, lam): ties(base, experts, slices, d, lam) for d in DENSITIES for lam in TIES_LAMBDAS}
    density, lam = max(candidates, key=lambda key: score(candidates[key]))
    out["TIES"] = (candidates[density, lam], {"density": density, "lam": lam})
    return out
