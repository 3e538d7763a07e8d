"""A low-rank ES island over ranks (``engine.es_noise = "lowrank"``, the replicated scheme:
each rank of an island's group evaluates its share of the members): the one-process
result bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpievo  # noqa: E402
from mpi_support import all_ranks_agree  # noqa: E402
from mpievo.comm import SelfComm  # noqa: E402
from mpievo.torch import ModelProblem  # noqa: E402

X = torch.linspace(-1, 1, 24, dtype=torch.float64).reshape(8, 3)
Y = torch.sin(2 * X).sum(dim=1, keepdim=True)
CONFIG = {"run": {"scheme": "replicated"},
          "engine": {"algorithm": "es", "population": 2, "dtype": "float64", "es_popsize": 8, "es_sigma": 0.05,
                     "es_learning_rate": 0.05, "es_noise": "lowrank", "es_rank": 2},
          "migration": {"interval": 3, "emigrants": 1}}


def problem():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()

    @torch.no_grad()
    def loss(m):
        return float(((m(X)[:, :1] - Y) ** 2).mean())

    return ModelProblem(model, loss, maximize=False, lower=-5.0, upper=5.0,
                        initial=lambda rng, n: np.tile(start, (n, 1)))


@pytest.mark.mpi(min_size=2)
def test_a_low_rank_island_over_ranks_is_the_one_process_run_bit_for_bit():
    from mpi4py import MPI

    from mpievo.parallel.world import world_comm

    comm = world_comm()
    common = dict(budget=2 * 2 + 2 * 8 * 6, islands=2, seed=5, config=CONFIG)   # start, then 6 generations
    parallel = mpievo.minimize(problem(), comm=comm, **common)
    alone = mpievo.minimize(problem(), comm=SelfComm(), **common)
    start = problem().evaluate(problem().initial(None, 1))[0]
    same = parallel.x.tobytes() == alone.x.tobytes() and parallel.fun == alone.fun and alone.fun < start
    all_ranks_agree(MPI.COMM_WORLD, same, f"{parallel.fun} over {comm.size} ranks vs {alone.fun} alone "
                                          f"(start {start})")
