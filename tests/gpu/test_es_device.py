"""ES on the device (engine.device = "cuda", full noise): the members and the update
rebuilt from the key by mpievo.kernels.cuda.es_noise are the host's bits, and a device ES
island follows the host island bit for bit. Tiny sizes for the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import elementwise_fitness

from mpievo.evo import EngineConfig, Island, Problem
from mpievo.evo import device
from mpievo.kernels import es_noise
from mpievo.kernels.cuda import es_noise as cuda_es_noise

KEY, BASE = (7, 2, 5, 1), 3


def _box(dim, dtype, low=-0.9, high=0.8):
    return np.full(dim, low, dtype), np.full(dim, high, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_members_are_the_host_members_clipped(dtype):
    from numba import cuda

    dim, popsize, sigma = 11, 6, 0.7          # odd dim: a last block of three genes; sigma large: clips
    mean = np.random.default_rng(0).uniform(-0.5, 0.5, dim).astype(dtype)
    lower, upper = _box(dim, dtype)
    host = np.empty((popsize, dim), dtype)
    es_noise.members(host, mean, sigma, KEY, BASE)
    np.clip(host, lower, upper, out=host)
    rows = cuda.device_array((popsize, dim), dtype)
    cuda_es_noise.members(rows, cuda.to_device(mean), sigma, KEY, BASE, lower, upper)
    got = rows.copy_to_host()
    assert got.tobytes() == host.tobytes()
    assert (got == lower).any() and (got == upper).any()        # the clip was exercised


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimizer", ["adam", "sgd", "plain"])
def test_device_update_rebuilt_from_the_key_is_the_host_update(dtype, optimizer):
    from numba import cuda

    dim, pairs = 9, 3
    rng = np.random.default_rng(1)
    mean = rng.uniform(-0.5, 0.5, dim).astype(dtype)
    m = rng.normal(0, 0.1, dim if optimizer != "plain" else 0).astype(dtype)
    v = rng.uniform(0, 0.1, dim if optimizer == "adam" else 0).astype(dtype)
    coeffs = rng.normal(0, 3, pairs)
    lower, upper = _box(dim, dtype, -0.45, 0.45)
    stride = es_noise.pair_stride(dim)
    hm, hv, hmean = m.copy(), v.copy(), mean.copy()
    dm, dv, dmean = cuda.to_device(m), cuda.to_device(v), cuda.to_device(mean)
    for step in (1, 2):
        if optimizer == "adam":
            settings = dict(decay=0.01, lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8, step=step)
            es_noise.adam_update(hmean, hm, hv, coeffs, KEY, BASE, stride=stride, start=0, **settings)
            cuda_es_noise.adam_update(dmean, dm, dv, coeffs, KEY, BASE, lower, upper, **settings)
        else:
            settings = dict(decay=0.01, lr=0.05, momentum=0.9)
            es_noise.sgd_update(hmean, hm, coeffs, KEY, BASE, stride=stride, start=0, **settings)
            cuda_es_noise.sgd_update(dmean, dm, coeffs, KEY, BASE, lower, upper, **settings)
        np.clip(hmean, lower, upper, out=hmean)
    assert dmean.copy_to_host().tobytes() == hmean.tobytes()
    assert dm.copy_to_host().tobytes() == hm.tobytes() and dv.copy_to_host().tobytes() == hv.tobytes()
    assert not np.array_equal(hmean, mean)


START = np.linspace(-0.6, 0.7, 10).astype(np.float32)


def _island(where, **settings):
    # the same start on both (a device island's uniform start is drawn otherwise than the host's)
    problem = Problem(elementwise_fitness, 10, -1.0, 1.0, device=where == "cuda",
                      initial=lambda rng, n: np.tile(START, (n, 1)))
    config = EngineConfig(algorithm="es", device=where, population=2,
                          **{"es_popsize": 6, "es_sigma": 0.3, "dtype": "float32", **settings})
    return Island(0, problem, config, seed=4)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_device_es_island_is_the_host_island_bit_for_bit_and_resumes(optimizer):
    runs = []
    for where in ("cuda", "cpu"):
        island = _island(where, es_optimizer=optimizer)
        island.run(3)
        runs.append((island, island.algorithm.state_dict(), device.to_host(island.archive.genomes),
                     island.archive.fitness.copy()))
    (dev, dev_state, dev_rows, dev_fit), (_, host_state, host_rows, host_fit) = runs
    assert dev.on_device and device.is_device_array(dev.algorithm.mean)
    for name in ("mean", "moment1", "moment2"):
        assert dev_state[name].tobytes() == host_state[name].tobytes(), name
    assert dev_rows.tobytes() == host_rows.tobytes() and dev_fit.tobytes() == host_fit.tobytes()
    # a device island restored from the host island's state continues as the host one does
    resumed = _island("cuda", es_optimizer=optimizer)
    resumed.load_state_dict(runs[1][0].state_dict())
    resumed.run(1)
    runs[1][0].run(1)
    assert resumed.algorithm.state_dict()["mean"].tobytes() == runs[1][0].algorithm.state_dict()["mean"].tobytes()


def test_low_rank_noise_on_a_device_island_is_refused():
    with pytest.raises(ValueError, match="es_noise: expected 'full' on the device .* got 'lowrank'"):
        _island("cuda", es_noise="lowrank")


def test_a_better_immigrant_becomes_the_device_mean_and_resets_the_moments():
    from numba import cuda

    island = _island("cuda")
    island.run(2)
    es = island.algorithm
    better = np.full((2, 10), 0.25, np.float32)
    better[1] = 0.5
    es.migrate_in(better, np.array([es.last_best + 1.0, es.last_best - 1.0]))        # host rows
    state = es.state_dict()
    assert state["mean"].tobytes() == better[1].tobytes()
    assert not state["moment1"].any() and not state["moment2"].any()
    es.migrate_in(cuda.to_device(better), np.array([es.last_best - 1.0, np.inf]))    # device rows
    assert es.state_dict()["mean"].tobytes() == better[0].tobytes()
    es.migrate_in(better, np.array([es.last_best + 1.0, es.last_best]))            # not better: kept
    assert es.state_dict()["mean"].tobytes() == better[0].tobytes()
