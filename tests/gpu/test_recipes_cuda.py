"""Seed-encoded genomes materialised on the device: the host's bits, and a seeded
island whose children are materialised and evaluated on the GPU runs like the host's."""

import numpy as np
import pytest
from conftest import SIMULATOR

from mpievo.evo import EngineConfig, Island, Problem
from mpievo.kernels.cuda import recipes as cuda_recipes
from mpievo.kernels import recipes

# the simulator runs every CUDA thread in Python: a few hundred genes there
DIM = 300 if SIMULATOR else 3 * recipes.TILE + 11


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_device_recipes_are_the_host_recipes_bit_for_bit(dtype, rng):
    from numba import cuda

    bases = rng.normal(size=(3, DIM)).astype(dtype)
    weights = np.array([0.7, 0.0, -0.45])
    terms = np.array([[11, 0.3, 0.02], [2 ** 52 + 5, -1.5, 0.5], [77, 0.02, 1.0]])
    scale = np.full(DIM, 3.0, dtype)
    lower, upper = np.full(DIM, -1.5, dtype), np.full(DIM, 1.5, dtype)
    host = np.empty(DIM, dtype)
    recipes.materialize(bases, weights, terms, scale, lower, upper, host)
    out = cuda.device_array((2, DIM), dtype)
    placed = [cuda.to_device(a) for a in (bases, scale, lower, upper)]
    cuda_recipes.materialize(placed[0], weights, terms, *placed[1:], out, 1)
    device = out.copy_to_host()[1]
    assert np.array_equal(device, host)
    assert 0 < np.count_nonzero(host == upper) < DIM     # the clip and the terms did something
    # a uniform scale and box travel as one element each (bound_to_device): the same bits
    from mpievo.kernels.cuda.reduce import bound_to_device

    uniform = [bound_to_device(np.broadcast_to(a[:1], (DIM,))) for a in (scale, lower, upper)]
    assert all(u.shape == (1,) for u in uniform)
    out[1] = 0
    cuda_recipes.materialize(placed[0], weights, terms, *uniform, out, 1)
    assert np.array_equal(out.copy_to_host()[1], host)


def _host_values(X):
    genomes = X.copy_to_host() if hasattr(X, "copy_to_host") else np.asarray(X.get() if hasattr(X, "get") else X)
    return ((genomes - 0.25) ** 2).sum(axis=1)


def test_a_seeded_island_materialises_on_the_device_like_the_host(rng):
    bases = rng.normal(size=(2, DIM)).astype(np.float32)
    settings = dict(genome="seeded", capacity=4, batch_size=4, stagnation_patience=0, mutation_rate=0.2)
    runs = {}
    for where in ("cpu", "cuda"):
        problem = Problem(_host_values, DIM, -3, 3, bases=bases, device=where == "cuda")
        island = Island(0, problem, EngineConfig(device=where, **settings), seed=4).run(3)
        runs[where] = island
    host, device = runs["cpu"], runs["cuda"]
    assert device.problem.on_device and not host.problem.on_device and not device.on_device
    assert np.array_equal(host.archive.genomes, device.archive.genomes)
    assert np.array_equal(host.archive.fitness, device.archive.fitness)
