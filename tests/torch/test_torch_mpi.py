"""mpievo.torch at 2 ranks: the same result as one process, the sources loaded once per node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import Small  # noqa: E402

import mpievo  # noqa: E402
from mpi_support import all_ranks_agree  # noqa: E402
from mpievo.comm import SelfComm  # noqa: E402
from mpievo.torch.problem import ModelProblem  # noqa: E402
from mpievo.torch.recipes import RecipeProblem  # noqa: E402

X = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))


def loss(model):
    with torch.no_grad():
        return float((model(X) ** 2).mean())


def runs(make, config, comm):
    """The result on ``comm`` and in this process alone (SelfComm), same seed and islands."""
    islands = max(2, comm.size)             # an island per rank at least (the -n 4 stage)
    common = dict(budget=80 * islands, islands=islands, seed=9, config=config)
    return mpievo.minimize(make(), comm=comm, **common), mpievo.minimize(make(), comm=SelfComm(), **common)


@pytest.mark.mpi(min_size=2)
def test_delta_model_merge_matches_one_process():
    from mpievo.parallel.world import world_comm

    comm = world_comm()
    make = lambda: ModelProblem(Small(3), loss, sources=[Small(1), Small(2)], maximize=False)  # noqa: E731
    assert not make().bases.attached        # building the problem loads no source: the job does, per node
    parallel, alone = runs(make, {"engine": {"genome": "delta"}}, comm)
    same = np.array_equal(parallel.x, alone.x) and parallel.fun == alone.fun
    all_ranks_agree(_mpi(), same, f"{parallel.fun} vs {alone.fun}")


@pytest.mark.mpi(min_size=2)
def test_recipe_merge_matches_one_process():
    from mpievo.parallel.world import world_comm

    comm = world_comm()
    make = lambda: RecipeProblem(Small(3), loss, [Small(1), Small(2)], base=Small(0), method="dare",  # noqa: E731
                                 maximize=False)
    parallel, alone = runs(make, {"engine": {"algorithm": "cmaes"}}, comm)
    same = np.array_equal(parallel.x, alone.x) and parallel.fun == alone.fun
    all_ranks_agree(_mpi(), same, f"{parallel.fun} vs {alone.fun}")


def _mpi():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
def test_bfloat16_delta_merge_keeps_its_sources_in_bfloat16_and_matches_one_process():
    import ml_dtypes

    from mpievo.parallel.world import world_comm

    comm = world_comm()
    bf16 = lambda seed: Small(seed).to(torch.bfloat16)   # noqa: E731
    make = lambda: ModelProblem(bf16(3), lambda m: float((m(X.to(torch.bfloat16)).float() ** 2).mean()),  # noqa: E731
                                sources=[bf16(1), bf16(2)], maximize=False)
    seen = make()
    kept = seen.bases.dtype == np.dtype(ml_dtypes.bfloat16) and seen.bases.nbytes == 2 * 2 * seen.dim
    parallel, alone = runs(make, {"engine": {"genome": "delta", "dtype": "bfloat16"}}, comm)
    same = parallel.x.tobytes() == alone.x.tobytes() and parallel.fun == alone.fun
    all_ranks_agree(_mpi(), kept and same, f"bases {seen.bases.dtype}; {parallel.fun} vs {alone.fun}")
