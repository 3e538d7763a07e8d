"""An ES island with full or low-rank noise on a torch model (``engine.es_noise``).

A small tanh network (torch, float32) is fitted to a sine and a cosine by an ``es`` island: each
generation 16 antithetic members, their noise either a normal per weight (``full``) or,
on each weight matrix, a rank-2 term ``U V^T / sqrt(2)`` and a normal per bias
(``lowrank``, EGGROLL's perturbations). The script runs both from the same start for
the same budget and prints the loss of the island's best member. Run::

    python examples/es_lowrank_island.py

See docs/guides/evolution-strategies.md ("Full or low-rank noise on an island").
"""

from __future__ import annotations

import numpy as np
import torch

from mpievo.evo import EngineConfig, Island
from mpievo.torch import ModelProblem

T = torch.linspace(-3.0, 3.0, 128)[:, None]
X = torch.cat([T, T * T / 3.0], dim=1)                 # two inputs, two outputs: every weight
Y = torch.cat([torch.sin(2.0 * T), torch.cos(2.0 * T)], dim=1)    # matrix has rank >= 2


def problem() -> ModelProblem:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                torch.nn.Tanh(), torch.nn.Linear(32, 2))
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()

    @torch.no_grad()
    def loss(m) -> float:
        return float(((m(X) - Y) ** 2).mean())

    return ModelProblem(model, loss, maximize=False, lower=-10.0, upper=10.0,
                        initial=lambda rng, n: np.tile(start, (n, 1)))


def main(generations: int = 100) -> dict:
    """The best loss after ``generations`` with each kind of noise."""
    losses = {}
    for noise in ("full", "lowrank"):
        config = EngineConfig(algorithm="es", population=2, es_popsize=16, es_sigma=0.05, es_learning_rate=0.02,
                              es_noise=noise, es_rank=2)
        island = Island(0, problem(), config, seed=1)
        island.initialize()
        start = island.best()[1]
        island.run(generations)
        losses[noise] = island.best()[1]
        print(f"{noise:8s} noise: loss {start:.4f} -> {losses[noise]:.4f} after {island.evaluations} evaluations")
    return losses


if __name__ == "__main__":
    main()
