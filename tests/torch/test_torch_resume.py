"""Model and recipe runs stop at generation k, checkpoint, and resume bit for bit (1, 2 and 4 ranks)."""

from __future__ import annotations

import json

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
def test_a_run_stopped_and_resumed_on_several_ranks_is_the_straight_and_serial_run(kind, world, tmp_path_factory):
    from torch_runs import job_for

    from mpievo.parallel import run_job

    comm = Communicator(world)
    directory = comm.bcast_object(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    islands = max(2, comm.size)             # an island per rank at least
    resumed, straight = stopped_and_resumed(kind, comm, directory, islands)
    ok = resumed.generations == GENERATIONS and same_run(resumed, straight)
    if comm.rank == 0:      # and as the same islands in one process
        ok = ok and same_run(resumed, run_job(job_for(kind, 1, islands), SelfComm()))
    all_ranks_agree(world, ok, f"{kind}: resumed {resumed.best_fitness} vs straight {straight.best_fitness}")


def test_mpievo_run_stops_and_resumes_a_bfloat16_model_run_bit_for_bit(tmp_path, monkeypatch):
    from mpi4py import MPI

    from mpievo.cli.main import main

    if MPI.COMM_WORLD.Get_size() > 1:
        pytest.skip("runs `mpievo run` on COMM_WORLD in this process: one rank only")
    (tmp_path / "bf16_merge.py").write_text('from torch_runs import make_problem\n'
                                            'problem = make_problem("bf16-delta")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "merge.toml"      # the Problem object brings its dim, box and sense
    config.write_text(f'[run]\nislands = 2\ngenerations = {GENERATIONS}\nseed = 5\n'
                      '[problem]\nname = "bf16_merge:problem"\n'
                      '[engine]\ndtype = "bfloat16"\ngenome = "delta"\ncapacity = 6\nbatch_size = 4\n')
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main(["run", str(config), "--out", str(straight), "--progress", "none"]) == 0
    assert main(["run", str(config), "--out", str(stopped), "--generations", "3", "--progress", "none"]) == 0
    assert main(["run", str(config), "--resume", str(stopped), "--progress", "none"]) == 0
    summaries = [json.loads((out / "summary.json").read_text()) for out in (straight, stopped)]
    assert summaries[1]["resumed_from"] and summaries[1]["evaluations_this_run"] < summaries[0]["evaluations"]
    assert summaries[0]["best_fitness"] == summaries[1]["best_fitness"]
    assert (straight / "best_genome.npy").read_bytes() == (stopped / "best_genome.npy").read_bytes()
