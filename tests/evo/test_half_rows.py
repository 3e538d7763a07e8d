"""The one-pass half-precision kernels (mpievo.kernels.half_rows) against the passes they
replace: the same draws and the same bits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mpievo.evo import half
from mpievo.evo import operators as ops
from mpievo.kernels import operators as kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
DIM = ops.COUNTER_DIM + 3          # counter-based, an odd tail


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
@pytest.mark.parametrize("bounds, rate", [("clip", 0.5), ("reflect", None), ("resample", 0.3)])
def test_one_pass_breeding_gives_the_children_of_widening_breeding_and_rounding(dtype, bounds, rate):
    rng = np.random.default_rng(7)
    archive = (rng.standard_normal((5, DIM)) * 2).astype(dtype)
    lower = np.full(DIM, -3.0, np.float32) - rng.random(DIM, np.float32)
    upper = -lower
    scale = upper - lower
    idx_a, idx_b = np.array([0, 3, 4]), np.array([2, 2, 1])
    rate = 10.0 / DIM if rate is None else rate                      # sparse gaps, or dense mask words
    common = dict(omega=None, rate=rate, steps=np.array([0.1, 0.2, 0.3]), scale=scale, bounds=bounds)
    breeding = half.HalfBreeding(dtype)
    assert breeding.fuses(DIM)
    fused, counts = breeding.breed(archive, idx_a, idx_b, np.random.default_rng(1), lower, upper,
                                   np.empty((3, DIM), dtype), **common)
    parents, a, b = breeding.parents(archive, idx_a, idx_b)       # the passes it replaces
    work, expected_counts = ops.breed(parents, a, b, np.random.default_rng(1), lower, upper,
                                      np.empty((3, DIM), np.float32), **common)
    expected = half.round_into(work, np.empty((3, DIM), dtype))
    assert fused.tobytes() == expected.tobytes()
    assert np.array_equal(counts, expected_counts) and counts.sum() > 0


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
def test_diversity_of_half_rows_is_that_of_the_widened_rows(dtype):
    rng = np.random.default_rng(2)
    rows = rng.standard_normal((4, 20_003)).astype(dtype)
    width = rng.random(20_003) + 0.5
    expected = np.empty(4)
    kernels.centroid_distances(rows.astype(np.float32), width, expected)
    assert half.centroid_distances(rows, width, np.empty(4)).tobytes() == expected.tobytes()
