"""Choosing a GPU per rank from the node-local rank (testable without a GPU)."""

import pytest

from mpievo.parallel.device_binding import bind_device, choose_device, local_rank, local_rank_from_env


def test_local_rank_from_launcher_variables():
    assert local_rank_from_env({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "SLURM_LOCALID": "1"}) == 3
    assert local_rank_from_env({"SLURM_LOCALID": "1"}) == 1
    assert local_rank_from_env({}) is None
    assert local_rank(None, {}) == 0
    with pytest.raises(ValueError, match="non-negative integer in SLURM_LOCALID"):
        local_rank_from_env({"SLURM_LOCALID": "x"})


@pytest.mark.parametrize("local, n_devices, expected", [
    (0, 0, None), (3, 0, None), (0, 4, 0), (3, 4, 3), (5, 4, 1), (1, 1, 0)])
def test_choose_device(local, n_devices, expected):
    assert choose_device(local, n_devices) == expected


def test_bind_device_selects_the_local_gpu():
    selected = []
    binding = bind_device(None, n_devices=2, select=selected.append,
                          environ={"SLURM_LOCALID": "3"})
    assert (binding.device, binding.local_rank, binding.label) == (1, 3, "gpu:1")
    assert selected == [1]


def test_bind_device_without_gpu_stays_on_cpu():
    binding = bind_device(None, n_devices=0, select=lambda i: pytest.fail("no GPU to select"),
                          environ={"SLURM_LOCALID": "2"})
    assert binding.device is None and binding.label == "cpu"


@pytest.mark.mpi(min_size=1)
def test_local_rank_from_mpi_shared_memory_split(world):
    # every rank of this test runs on one node: local rank == world rank
    assert local_rank(world) == world.Get_rank()
