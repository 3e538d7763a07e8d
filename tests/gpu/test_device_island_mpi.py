"""Device islands in a job over ranks: the same result on 1, 2 and 4 ranks as in one
process, with device islands migrating to and from host islands (tiny sizes: the
simulator in CI, a shared GPU on a GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_support import on_rank_0

from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.parallel import best_genome_bytes, run_job

pytestmark = pytest.mark.mpi(min_size=1)


def _raw(devices="cuda") -> dict:
    return {
        "run": {"islands": 4, "generations": 6, "log_every": 3, "seed": 11},
        "problem": {"name": "rastrigin", "dim": 8, "shift": True},
        "engine": {"capacity": 6, "batch_size": 5, "device": devices, "stagnation_patience": 0},
        "migration": {"interval": 2, "emigrants": 2, "unique": True},
    }


def _job(nranks: int, devices):
    return validate(_raw(devices), nranks)


@pytest.mark.parametrize("devices", [["cuda", "cpu", "cuda", "cpu"], "cuda"], ids=["mixed", "all-device"])
def test_device_islands_give_the_serial_result_on_any_rank_count(world, devices):
    comm = Communicator(world)
    distributed = run_job(_job(comm.size, devices), comm)
    serial = on_rank_0(world, lambda: run_job(_job(1, devices), SelfComm()))
    ok = True
    if comm.rank == 0:
        ok = (best_genome_bytes(distributed) == best_genome_bytes(serial) != b""
              and distributed.best_fitness == serial.best_fitness
              and distributed.evaluations == serial.evaluations
              and distributed.migrations == serial.migrations >= 2)
    flags = world.allgather(bool(ok))
    comm.free()
    assert all(flags), f"rank 0: {distributed.best_fitness} vs serial {serial.best_fitness}"


def test_a_device_island_run_differs_from_the_host_run_only_by_its_draws(world):
    # the job really ran on the device: a host-only run of the same seed breeds other children
    comm = Communicator(world)
    device_run = run_job(_job(comm.size, "cuda"), comm)
    host_run = run_job(_job(comm.size, "cpu"), comm)
    ok = comm.rank != 0 or (best_genome_bytes(device_run) != best_genome_bytes(host_run)
                            and np.isfinite(device_run.best_fitness))
    flags = world.allgather(bool(ok))
    comm.free()
    assert all(flags)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("scheme", [{"scheme": "hybrid", "ranks_per_island": 2}, {"scheme": "replicated"}],
                         ids=["hybrid", "replicated"])
def test_device_islands_over_groups_of_ranks_give_the_one_rank_result(world, scheme, monkeypatch):
    # hybrid: each group's ranks evaluate row blocks of the leader's device batch on their
    # own GPU (blocks move on the device path of exchange); replicated: every rank breeds
    # every device island and evaluates its block on its GPU
    if world.size % 2 and scheme["scheme"] == "hybrid":
        pytest.skip("groups of 2 ranks need an even rank count")
    from mpievo.parallel import groups, replicated

    blocks = []  # (rows, on the device) of every block this rank evaluated

    def spy(problem, genomes, on_device=False, _real=groups.evaluate_block):
        blocks.append((genomes.shape[0], on_device))
        return _real(problem, genomes, on_device)

    monkeypatch.setattr(groups, "evaluate_block", spy)
    monkeypatch.setattr(replicated, "evaluate_block", spy)
    comm = Communicator(world)
    grouped = validate({**_raw(), "run": {**_raw()["run"], **scheme}}, comm.size)
    hybrid = run_job(grouped, comm)
    monkeypatch.undo()
    # every rank evaluated blocks of fewer rows than a batch, all on its device
    split = bool(blocks) and all(on for _, on in blocks) and max(rows for rows, _ in blocks) < 5
    serial = on_rank_0(world, lambda: run_job(_job(1, "cuda"), SelfComm()))
    ok = split and (comm.rank != 0 or (best_genome_bytes(hybrid) == best_genome_bytes(serial)
                                       and hybrid.evaluations == serial.evaluations))
    flags = world.allgather(bool(ok))
    comm.free()
    assert all(flags)
