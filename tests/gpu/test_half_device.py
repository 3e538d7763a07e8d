"""Half-precision device islands (engine.dtype bfloat16 / float16, engine.device cuda):
the host's bits, on the device (the simulator in CI, a GPU where there is one)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gpu_support import batch_to_host, elementwise_fitness

from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import validate
from mpievo.evo import EngineConfig, Island, Problem, device, make_problem
from mpievo.evo import operators as host_ops
from mpievo.parallel import best_genome_bytes, run_job

HALF = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
CONFIG = dict(capacity=6, batch_size=5, population=6, stagnation_patience=0, mutation_rate=0.4)


def _fitness(x):
    """elementwise_fitness of a batch as it arrives: bfloat16 device rows come as uint16 bits."""
    rows = batch_to_host(x)
    return elementwise_fitness(rows.view(ml_dtypes.bfloat16) if rows.dtype == np.uint16 else rows)


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("crossover, bounds", [("interpolate", "clip"), ("interpolate", "reflect"),
                                               ("uniform", "resample"), ("blend", "reflect"), ("sbx", "clip")])
def test_device_half_islands_breed_the_host_bits(monkeypatch, dtype, crossover, bounds):
    # both in the counter-based regime (forced at a tiny dim): same draws, same float32
    # arithmetic, the same rounding once
    monkeypatch.setattr(host_ops, "COUNTER_DIM", 1)
    runs = []
    for where in ("cuda", "cpu"):
        config = EngineConfig(device=where, dtype=dtype, crossover=crossover, bounds=bounds, unique=True, **CONFIG)
        island = Island(0, Problem(_fitness, 9, -1.0, 1.0, device=where == "cuda"), config, seed=3)
        island.run(4)
        assert island.on_device == (where == "cuda")
        runs.append((device.to_host(island.archive.genomes), island.archive.fitness.copy(),
                     island.archive.ids.copy(), island.diversity()))
    (g_dev, f_dev, i_dev, d_dev), (g_host, f_host, i_host, d_host) = runs
    assert g_dev.dtype == g_host.dtype == HALF[dtype]
    assert np.array_equal(i_dev, i_host) and f_dev.tobytes() == f_host.tobytes()
    assert g_dev.view(np.uint16).tobytes() == g_host.view(np.uint16).tobytes()
    assert d_dev == pytest.approx(d_host, rel=1e-9) and d_dev > 0


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")   # 3e38 -> float16 inf, as intended
@pytest.mark.parametrize("dtype", sorted(HALF))
def test_widen_and_round_kernels_give_numpys_bits(dtype):
    from numba import cuda

    from mpievo.kernels.cuda import half as cuda_half

    values = np.array([[1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-9), 3e38, 65520.0, 1e-6, -0.0, 2.5]], np.float32)
    out = cuda.device_array(values.shape, HALF[dtype])
    cuda_half.round_rows(cuda.to_device(values), out, HALF[dtype])
    with np.errstate(over="ignore"):
        expected = values.astype(HALF[dtype])
    assert out.copy_to_host().view(np.uint16).tobytes() == expected.view(np.uint16).tobytes()
    rows = np.concatenate([np.roll(expected, shift, axis=1) for shift in range(3)])   # distinct rows
    widened = cuda_half.widen_rows(cuda.to_device(rows), [2, 0], HALF[dtype]).copy_to_host()
    assert widened.dtype == np.float32 and widened.tobytes() == rows[[2, 0]].astype(np.float32).tobytes()
    with pytest.raises(TypeError, match="expected a half-precision dtype .*, got float32"):
        cuda_half.round_rows(cuda.to_device(values), cuda.to_device(values), np.float32)


def test_a_device_bfloat16_fitness_gets_the_bits_and_builtins_widen():
    seen = []

    def fitness(x):
        seen.append(np.dtype(x.dtype))
        return _fitness(x)

    config = EngineConfig(device="cuda", dtype="bfloat16", **CONFIG)
    Island(0, Problem(fitness, 4, -1.0, 1.0, device=True), config, seed=1).run(2)
    assert set(seen) == {np.dtype(np.uint16)}
    island = Island(0, make_problem("rastrigin", 5), config, seed=1)
    island.run(2)
    members = device.to_host(island.archive.genomes)
    assert members.dtype == ml_dtypes.bfloat16 and members.nbytes * 2 == 6 * 5 * 4
    np.testing.assert_allclose(island.archive.fitness, make_problem("rastrigin", 5).evaluate(members), rtol=1e-6)


def _raw(devices) -> dict:
    return {"run": {"islands": 4, "generations": 4, "log_every": 2, "seed": 11},
            "problem": {"name": "rastrigin", "dim": 8, "shift": True},
            "engine": {"capacity": 6, "batch_size": 5, "device": devices, "stagnation_patience": 0,
                       "dtype": "bfloat16"},
            "migration": {"interval": 2, "emigrants": 2, "unique": True}}


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("devices", [["cuda", "cpu", "cuda", "cpu"], "cuda"], ids=["mixed", "all-device"])
def test_bfloat16_device_islands_give_the_serial_result_on_any_rank_count(world, devices):
    from mpi_support import all_ranks_agree, on_rank_0

    comm = Communicator(world)
    distributed = run_job(validate(_raw(devices), comm.size), comm)
    serial = on_rank_0(world, lambda: run_job(validate(_raw(devices), 1), SelfComm()))
    ok = distributed.best_fitness == serial.best_fitness and distributed.migrations == serial.migrations > 0
    if comm.rank == 0:
        ok = ok and distributed.best_genome.dtype == ml_dtypes.bfloat16 \
            and best_genome_bytes(distributed) == best_genome_bytes(serial) != b""
    all_ranks_agree(world, ok, f"distributed {distributed.best_fitness} vs serial {serial.best_fitness}")


def _delta_problem(where: str) -> Problem:
    dim = 9
    base = np.random.default_rng(0).uniform(-0.8, 0.8, (1, dim)).astype(np.float32)
    # a box of one value per gene (not half values: rounded inwards)
    return Problem(_fitness, dim, np.linspace(-1.0, -0.5, dim), np.linspace(0.5, 1.0, dim),
                   device=where == "cuda", bases=base)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_delta_genomes_materialise_the_hosts_bits_on_the_device(dtype):
    from mpievo.evo.genomes import encoding_of
    from mpievo.kernels.cuda import delta as cuda_delta

    config = EngineConfig(device="cuda", dtype=dtype, genome="delta", **CONFIG)
    problem = encoding_of(Island(0, _delta_problem("cuda"), config, seed=3).problem)
    rows = np.random.default_rng(1).uniform(-2.5, 2.5, (7, 9)).astype(np.float32).astype(HALF[dtype])
    expected = np.empty(rows.shape, HALF[dtype])
    problem.materialize_into(rows, expected)
    base, lower, upper, _ = problem._device_arrays()
    out = device.to_device(np.zeros(rows.shape, HALF[dtype]))
    cuda_delta.materialize(base, device.to_device(rows), lower, upper, out)
    assert device.to_host(out).view(np.uint16).tobytes() == expected.view(np.uint16).tobytes()
    assert np.any(expected.astype(np.float64) == upper.copy_to_host())      # some genes clipped


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_a_half_delta_device_island_is_the_host_island_bit_for_bit(monkeypatch, dtype):
    monkeypatch.setattr(host_ops, "COUNTER_DIM", 1)
    runs = []
    for where in ("cuda", "cpu"):
        config = EngineConfig(device=where, dtype=dtype, genome="delta", **CONFIG)
        island = Island(0, _delta_problem(where), config, seed=3)
        island.run(4)
        assert island.on_device == (where == "cuda")
        genome, value = island.best()
        runs.append((device.to_host(island.archive.genomes).view(np.uint16).tobytes(),
                     island.archive.fitness.tobytes(), genome.view(np.uint16).tobytes(), value))
    assert runs[0] == runs[1]


def test_half_delta_genomes_want_float32_or_half_bases():
    problem = Problem(_fitness, 4, -1.0, 1.0, bases=np.zeros((1, 4)))
    with pytest.raises(ValueError, match="expected float32 or bfloat16 base models .*, got float64"):
        Island(0, problem, EngineConfig(dtype="bfloat16", genome="delta"), seed=0)
