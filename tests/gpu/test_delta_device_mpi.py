"""Delta genomes on device islands in a job over ranks: the base shared once per node,
device delta rows migrating to and from host delta islands, and groups of ranks
materialising their blocks on their own GPUs -- the one-process result on any rank
count (tiny sizes: the simulator in CI, a shared GPU on a GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_support import on_rank_0

from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.parallel import best_genome_bytes, build_problem, run_job

pytestmark = pytest.mark.mpi(min_size=1)


def _raw(path, devices, **run) -> dict:
    return {
        "run": {"islands": 4, "generations": 6, "log_every": 3, "seed": 11, **run},
        "problem": {"name": "rastrigin", "dim": 8, "shift": True, "bases": str(path)},
        "engine": {"capacity": 6, "batch_size": 5, "device": devices, "stagnation_patience": 0,
                   "genome": "delta"},
        "migration": {"interval": 2, "emigrants": 2, "unique": True},
    }


@pytest.fixture
def base_path(tmp_path):
    path = tmp_path / "base.npy"   # every rank writes the same bases to its own file
    np.save(path, np.random.default_rng(0).uniform(-2, 2, (1, 8)).astype(np.float32))
    return path


@pytest.mark.parametrize("devices, run", [
    (["cuda", "cpu", "cuda", "cpu"], {}),
    ("cuda", {}),
    ("cuda", {"scheme": "hybrid", "ranks_per_island": 2}),
], ids=["mixed", "all-device", "hybrid"])
def test_delta_device_islands_give_the_serial_result_on_any_rank_count(world, base_path, devices, run,
                                                                      monkeypatch):
    if run and world.size % 2:
        pytest.skip("groups of 2 ranks need an even rank count")
    from mpievo.kernels.cuda import delta as cuda_delta

    blocks = []   # rows of every block this rank materialised on its device
    real = cuda_delta.materialize
    monkeypatch.setattr(cuda_delta, "materialize", lambda base, rows, *a: blocks.append(rows.shape[0])
                        or real(base, rows, *a))
    comm = Communicator(world)
    job = validate(_raw(base_path, devices, **run), comm.size)
    distributed = run_job(job, comm)
    monkeypatch.undo()
    serial = on_rank_0(world, lambda: run_job(validate(_raw(base_path, devices), 1), SelfComm()))
    # every rank of an all-device run materialises (hybrid: blocks of fewer rows than a batch)
    everywhere = world.allgather(bool(blocks))
    ok = all(everywhere) if devices == "cuda" else any(everywhere)
    if run:
        ok = ok and max(blocks) < 5
    if comm.rank == 0 and ok:
        # the best genome (decoded on the host: base + delta) has the fitness the device
        # computed on the genome it materialised
        value = float(build_problem(job.problem)(distributed.best_genome[None])[0])
        ok = (best_genome_bytes(distributed) == best_genome_bytes(serial) != b""
              and value == pytest.approx(distributed.best_fitness, rel=1e-9)
              and distributed.best_fitness == serial.best_fitness
              and distributed.evaluations == serial.evaluations
              and distributed.migrations == serial.migrations >= 2)
    flags = world.allgather(bool(ok))
    comm.free()
    assert all(flags), f"rank 0: {distributed.best_fitness} vs serial {serial.best_fitness}"
