"""Device islands (engine.device = "cuda"): archive, breeding and evaluation on the GPU.

Runs under the simulator (CI) and on a real GPU. Sizes are tiny for the simulator.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import elementwise_fitness

from mpievo.evo import EngineConfig, Island, Problem, make_problem
from mpievo.evo import device
from mpievo.evo import operators as host_ops

CONFIG = dict(capacity=6, batch_size=5, population=6, stagnation_patience=0)


def _island(problem, *, where="cuda", index=0, seed=3, **settings):
    return Island(index, problem, EngineConfig(device=where, **{**CONFIG, **settings}), seed=seed)


def test_a_device_island_keeps_its_genomes_on_the_device_and_improves():
    island = _island(make_problem("sphere", 10))
    island.initialize()
    first = float(island.archive.fitness.min())
    island.run(6)
    assert island.on_device and island.archive.on_device
    assert device.is_device_array(island.archive.genomes)
    genome, value = island.best()
    assert isinstance(genome, np.ndarray) and genome.shape == (10,)
    assert value == pytest.approx(float(np.sum(genome.astype(np.float64) ** 2)), rel=1e-6)
    assert value <= first and island.evaluations == 6 + 6 * 5
    # the archive's fitness is that of its genomes, as the host computes it
    members = device.to_host(island.archive.genomes)
    host = make_problem("sphere", 10).evaluate(members)
    np.testing.assert_allclose(island.archive.fitness, host, rtol=1e-6)
    assert 0.0 < island.diversity() < 1.0


@pytest.mark.parametrize("crossover", ["interpolate", "uniform", "blend", "sbx"])
@pytest.mark.parametrize("bounds", ["clip", "reflect", "resample"])
def test_device_breeding_is_the_host_counter_path_bit_for_bit(monkeypatch, crossover, bounds):
    # A device island and a host island in the counter-based regime (forced here at a
    # tiny dim) start from the same genomes and breed the same children: same draws,
    # same arithmetic.
    monkeypatch.setattr(host_ops, "COUNTER_DIM", 1)
    settings = dict(crossover=crossover, bounds=bounds, dtype="float64" if bounds == "reflect" else "float32",
                    mutation_rate=0.4)
    runs = []
    for where in ("cuda", "cpu"):
        problem = Problem(elementwise_fitness, 9, -1.0, 1.0, device=where == "cuda")
        island = _island(problem, where=where, **settings)
        island.run(4)
        runs.append((device.to_host(island.archive.genomes), island.archive.fitness.copy(),
                     island.archive.ids.copy()))
    (g_dev, f_dev, i_dev), (g_host, f_host, i_host) = runs
    assert np.array_equal(i_dev, i_host)
    assert g_dev.tobytes() == g_host.tobytes() and f_dev.tobytes() == f_host.tobytes()


def test_the_user_fitness_receives_the_batch_on_the_device_without_a_copy():
    seen = []

    def fitness(x):
        seen.append(x)
        # return it on the device: the engine copies the values back
        from numba import cuda

        return cuda.to_device(np.arange(x.shape[0], dtype=np.float64))

    island = _island(Problem(fitness, 8, -1.0, 1.0, device=True))
    island.initialize()
    batch = island.ask(1)
    island.tell(island.evaluate(batch))
    received = seen[-1]
    assert device.is_device_array(received) and tuple(received.shape) == (5, 8)
    from mpievo.kernels.cuda.reduce import simulator_enabled

    if simulator_enabled():  # simulator arrays export no CAI: the very array is handed over
        assert received is batch
    else:  # a CuPy (or Numba) array over the same device memory
        cai = received.__cuda_array_interface__
        assert cai["data"][0] == batch.__cuda_array_interface__["data"][0]


def test_a_checkpoint_restores_a_device_island_exactly_and_on_the_host():
    problem = make_problem("rastrigin", 7, shift=True)
    reference = _island(problem)
    reference.run(5)
    saved = _island(problem)
    saved.run(2)
    state = saved.state_dict()
    assert isinstance(state["archive"]["genomes"], np.ndarray)
    restored = _island(problem)
    restored.load_state_dict(state)
    restored.run(3)
    for key in ("genomes", "fitness", "ids"):
        assert np.array_equal(restored.state_dict()["archive"][key],
                              reference.state_dict()["archive"][key])
    # the shifted problem on the device (its shift uploaded once) gives the host's values
    members = device.to_host(restored.archive.genomes)
    np.testing.assert_allclose(restored.archive.fitness, problem.evaluate(members), rtol=1e-9)
    on_host = _island(problem, where="cpu")
    on_host.load_state_dict(state)  # the checkpoint format does not depend on the device
    assert np.array_equal(on_host.archive.genomes, state["archive"]["genomes"])


def test_device_and_host_islands_trade_migrants():
    problem = make_problem("sphere", 6)
    gpu, cpu = _island(problem, index=0), _island(problem, where="cpu", index=1)
    for island in (gpu, cpu):
        island.run(2)
    to_cpu = gpu.emigrants(2, "best")
    assert device.is_device_array(to_cpu.genomes)
    cpu.immigrate(*to_cpu, policy="worst")
    assert set(to_cpu.ids) <= set(cpu.archive.ids)
    to_gpu = cpu.emigrants(2, "best", exclude=gpu.member_hashes())
    gpu.immigrate(*to_gpu, policy="worst", unique=True)
    held = {tuple(row) for row in device.to_host(gpu.archive.genomes)}
    assert all(tuple(row) in held for row in to_gpu.genomes)
    # hashes agree across devices: the device archive's are the host's of the same rows
    from mpievo.evo.archive_records import row_hashes

    assert np.array_equal(gpu.member_hashes(), row_hashes(device.to_host(gpu.archive.genomes)))


def test_device_settings_are_checked():
    with pytest.raises(ValueError, match="engine.algorithm among"):
        _island(make_problem("sphere", 4), algorithm="de")
    with pytest.raises(Exception, match="expected one of|expected"):
        EngineConfig(device="gpu")
    auto = _island(make_problem("sphere", 4), where="auto")
    from mpievo.kernels.cuda.reduce import simulator_enabled

    assert auto.on_device is (not simulator_enabled())  # auto means a real GPU
    assert not _island(make_problem("sphere", 4), where="auto", algorithm="cmaes").on_device
