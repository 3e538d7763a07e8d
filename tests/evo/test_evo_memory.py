"""Large genomes: breeding and archive updates make no temporary of genome size.

tracemalloc traces numpy's allocations and Numba's (its runtime allocates through
Python's raw allocator).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from mpievo.bench import engine_vs_pygmo as bench
from mpievo.evo import operators as ops
from mpievo.evo.archive import Archive
from mpievo.evo.streams import stream
from mpievo.kernels.operators import centroid_distances, copy_rows, retain_rows

DIM = ops.COUNTER_DIM
GENOME = DIM * 4  # bytes of one float32 genome


def traced_peak(call) -> int:
    """Peak bytes numpy allocated during ``call()``."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def parents():
    rng = np.random.default_rng(0)
    genomes = rng.uniform(-1, 1, (8, DIM)).astype(np.float32)
    lower, upper = ops.box_arrays(np.full(DIM, -1.0), np.full(DIM, 1.0), np.float32)
    return genomes, lower, upper, rng.integers(0, 8, 8), rng.integers(0, 8, 8)


@pytest.mark.parametrize("rate", [1.0, 1e-4])
def test_breeding_a_large_batch_allocates_no_genome(parents, rate):
    genomes, lower, upper, ia, ib = parents
    out = np.empty((8, DIM), np.float32)
    scale = upper - lower

    def breed():
        ops.breed(genomes, ia, ib, stream(0, 0, 1), lower, upper, out, rate=rate, steps=0.1, scale=scale)

    breed()  # compiled outside the trace
    assert traced_peak(breed) < GENOME / 4


@pytest.mark.parametrize("crossover", [ops.uniform_crossover, ops.blend_crossover, ops.sbx_crossover])
def test_other_crossovers_and_resampling_allocate_no_genome(parents, crossover):
    genomes, lower, upper, ia, ib = parents
    out = np.empty((8, DIM), np.float32)

    def vary():
        rng = stream(0, 0, 1)
        crossover(genomes, ia, ib, rng, lower, upper, out)
        ops.apply_bounds(out, lower, upper, rng, mode="resample")
        ops.gaussian_mutation(out, rng, lower, upper, rate=0.5, steps=0.1, scale=upper - lower,
                              bounds="resample")

    vary()
    assert traced_peak(vary) < GENOME * 1.5  # scale = upper - lower is one genome


def test_archive_updates_copy_no_genomes(parents):
    genomes, *_ = parents
    archive = Archive(8, DIM)
    archive.insert(genomes, np.arange(8.0), np.arange(8), 0, 0)
    better = genomes[::-1].copy()
    done = []
    peak = traced_peak(lambda: done.append(archive.insert(better, np.arange(8.0) - 4.5, np.arange(8, 16),
                                                          0, 1)))
    assert peak < GENOME / 4
    entered, slots, _ = done[0]
    assert entered.tolist() == [0, 1, 2, 3, 4, 5]  # -4.5 .. 0.5 beat members 2 .. 7
    np.testing.assert_array_equal(archive.genomes[slots], better[entered])
    ranking = archive.ranking()
    want = archive.genomes[ranking[:5]].copy()
    retain_rows(np.zeros((2, 1), np.float32), np.array([1]))  # compiled outside the trace
    assert traced_peak(lambda: archive.truncate(5)) < GENOME * 1.25  # one row of scratch
    np.testing.assert_array_equal(archive.genomes, want)


def test_row_moves_match_fancy_indexing():
    rng = np.random.default_rng(2)
    for _ in range(500):
        size = int(rng.integers(1, 12))
        slots = rng.permutation(size)[:rng.integers(0, size + 1)]
        x = rng.random((size, 3))
        want = x[slots]
        retain_rows(x, slots)
        np.testing.assert_array_equal(x[:len(slots)], want)
        dst = rng.random((size, 3))
        rows = rng.permutation(size)[:len(slots)]
        want = dst.copy()
        want[slots] = x[rows]
        copy_rows(x, rows, dst, slots)
        np.testing.assert_array_equal(dst, want)


def test_centroid_distances_match_numpy_without_a_float64_copy(parents):
    genomes, lower, upper, *_ = parents
    width = (upper - lower).astype(np.float64)
    scaled = genomes.astype(np.float64) / width
    spread = scaled - scaled.mean(axis=0)
    want = np.sqrt(np.einsum("ij,ij->i", spread, spread))
    out = np.empty(len(genomes))
    centroid_distances(genomes, width, out)
    np.testing.assert_allclose(out, want, rtol=1e-9)
    assert traced_peak(lambda: centroid_distances(genomes, width, out)) < GENOME / 4


def test_island_peak_memory_benchmark_reports_its_parts():
    result = bench.island_peak_memory(DIM, capacity=4, batch=4, generations=1)
    assert result["data_bytes"] == 8 * GENOME
    assert result["peak_bytes"] >= result["base_bytes"] > 0
    assert result["ratio"] == pytest.approx(
        result["peak_bytes"] / (result["data_bytes"] + result["base_bytes"]))
    assert result["ratio"] <= 1.25
