"""Model and recipe runs stop at generation k, checkpoint, and resume bit for bit (1 and 2 ranks)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from torch_runs import ENGINES, GENERATIONS, same_run, stopped_and_resumed  # noqa: E402

from mpi_support import all_ranks_agree  # noqa: E402
from mpievo.comm import Communicator, SelfComm  # noqa: E402


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_a_run_stopped_and_resumed_is_the_straight_run(kind, tmp_path):
    resumed, straight = stopped_and_resumed(kind, SelfComm(), str(tmp_path))
    assert resumed.generations == GENERATIONS
    assert same_run(resumed, straight), f"{resumed.best_fitness} vs {straight.best_fitness}"
    want = np.float64 if kind.startswith("recipe") else ml_dtypes.bfloat16
    assert resumed.best_genome.dtype == np.dtype(want)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_a_run_stopped_and_resumed_on_two_ranks_is_the_straight_and_serial_run(kind, world, tmp_path_factory):
    from torch_runs import job_for

    from mpievo.parallel import run_job

    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    resumed, straight = stopped_and_resumed(kind, comm, directory)
    ok = resumed.generations == GENERATIONS and same_run(resumed, straight)
    if comm.rank == 0:      # and as the same islands in one process
        ok = ok and same_run(resumed, run_job(job_for(kind, 1), SelfComm()))
    all_ranks_agree(world, ok, f"{kind}: resumed {resumed.best_fitness} vs straight {straight.best_fitness}")
