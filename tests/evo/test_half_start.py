"""Generation 0 of model-sized bfloat16 delta genomes: the one-pass kernels give the bits of
the element-wise numpy / ml_dtypes code they replace (NaN, inf, subnormals, signed zeros,
rounding ties), the finiteness count is numpy's, and a population written into the
archive's own rows is the archive a copied one makes."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo.archive import Archive
from mpievo.evo.half import genome_dtype
from mpievo.evo.operators import box_arrays
from mpievo.evo.problems import nonfinite_count
from mpievo.kernels import half_start

BF16 = genome_dtype("bfloat16")
ALL = np.arange(1 << 16, dtype=np.uint16)          # every bfloat16 bit pattern


def reference_box(lower, upper, base_bits):
    """The element-wise code: float64 shifts rounded inwards by numpy and ml_dtypes."""
    with np.errstate(all="ignore"):
        shift = base_bits.view(BF16).astype(np.float64)
        lo, hi = box_arrays(lower - shift, upper - shift, BF16)
    return lo.view(np.uint16), hi.view(np.uint16)


def reference_deltas(genome_bits, base_bits, lo_bits, hi_bits):
    out = np.empty(genome_bits.shape, BF16)
    with np.errstate(all="ignore"):
        np.subtract(genome_bits.view(BF16), base_bits.view(BF16), out=out, dtype=np.float64, casting="unsafe")
        np.clip(out, lo_bits.view(BF16), hi_bits.view(BF16), out=out)
    return out.view(np.uint16)


def kernel_box(lower, upper, base_bits, uniform=False):
    lo, hi = np.empty_like(base_bits), np.empty_like(base_bits)
    half_start.shifted_box_bf16(lower[:1] if uniform else lower, upper[:1] if uniform else upper, uniform,
                                base_bits, lo, hi)
    return lo, hi


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (-3e38, 3e38), (-1e-39, 2.5), (0.0, 1e-40)])
def test_the_row_box_is_the_element_wise_box_for_every_base(bounds):
    lower, upper = (np.full(ALL.size, b) for b in bounds)
    for uniform in (True, False):
        got, want = kernel_box(lower, upper, ALL, uniform), reference_box(lower, upper, ALL)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_the_row_box_rounds_per_gene_bounds_as_ml_dtypes_does():
    rng = np.random.default_rng(0)
    base = rng.choice(ALL[(ALL & 0x7FFF) < 0x7F80], 200_000)
    scale = 2.0 ** rng.integers(-140, 128, base.size)
    lower = -rng.random(base.size) * scale
    # ties and near-ties of the bfloat16 rounding, through float32 (ml_dtypes' double rounding)
    lower[::3] = base[::3].view(BF16).astype(np.float64) + (1 + 2.0 ** -8 + 2.0 ** -40) * scale[::3]
    upper = lower + rng.random(base.size) * scale + 1e-300
    upper[::5] = base[::5].view(BF16).astype(np.float64)        # a bound equal to the base: zero shift
    got, want = kernel_box(lower, upper, base), reference_box(lower, upper, base)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_deltas_are_the_element_wise_deltas_clipped():
    rng = np.random.default_rng(1)
    finite = ALL[(ALL & 0x7FFF) < 0x7F80]
    n = 300_000
    genome, base = rng.choice(finite, n), rng.choice(finite, n)
    base[::4] = genome[::4] ^ rng.integers(0, 1 << 9, n // 4).astype(np.uint16)   # near each other: ties
    base[1::7] = genome[1::7] ^ 0x8000                                              # x - (-x), -0 - +0
    gap = rng.integers(0, 40, n // 3).astype(np.int32)        # every exponent gap, float32's exactness edge
    shifted = (genome[2::3].astype(np.int32) & 0x7F80) - (gap << 7)
    base[2::3] = np.where(shifted > 0, shifted | (rng.integers(0, 1 << 7, n // 3) | (genome[2::3] & 0x8000)
                                                  ^ rng.integers(0, 2, n // 3) * 0x8000), base[2::3])
    lo, hi = rng.choice(finite, n), rng.choice(finite, n)   # boxes of any order, signed zeros among them
    lo[::2] = np.minimum(lo[::2], 0xFF7F) | 0x8000           # mostly a real box: lo <= 0 <= hi
    hi[::2] &= 0x7FFF
    lo[::11], hi[::13] = 0x8000, 0x0000
    out = np.empty(n, np.uint16)
    bad = half_start.deltas_bf16(genome, base, lo, hi, out)
    unclipped = reference_deltas(genome, base, np.full(n, 0xFF80, np.uint16), np.full(n, 0x7F80, np.uint16))
    finite = (unclipped & 0x7FFF) < 0x7F80              # overflows: counted, the caller refuses them
    assert bad == np.count_nonzero(~finite) > 0
    assert np.array_equal(out[finite], reference_deltas(genome, base, lo, hi)[finite])


def test_non_finite_deltas_are_counted():
    genome = np.array([0x7F80, 0x3F80, 0x7F7F, 0x3F80], np.uint16)     # inf, 1, max, 1
    base = np.array([0x3F80, 0x7FC0, 0xFF7F, 0x3F80], np.uint16)       # 1, NaN, -max, 1
    out = np.empty(4, np.uint16)
    box = np.full(4, 0xC000, np.uint16), np.full(4, 0x4000, np.uint16)
    assert half_start.deltas_bf16(genome, base, *box, out) == 3 and out[3] == 0


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16), np.dtype(np.float32)])
def test_the_non_finite_count_is_numpys(dtype):
    values = (ALL if dtype.itemsize == 2 else (ALL.astype(np.uint32) << 16)).view(dtype)
    assert nonfinite_count(values) == np.count_nonzero(~np.isfinite(values.astype(np.float32))) > 0


def test_a_population_written_in_the_archive_is_the_archive_a_copy_makes():
    rng = np.random.default_rng(2)
    genomes = rng.standard_normal((4, 1000)).astype(np.float32)
    fitness = np.array([3.0, np.nan, 1.0, 2.0])
    copied, in_place = Archive(6, 1000, limit=4), Archive(6, 1000, limit=4)
    copied.insert(genomes, fitness, np.arange(4), 0, 0)
    rows = in_place.population_rows(4)
    rows[:] = genomes
    in_place.insert(rows, fitness, np.arange(4), 0, 0)
    a, b = copied.state_dict(), in_place.state_dict()
    assert all(np.array_equal(a[key], b[key]) for key in a if key != "row_versions")
    assert in_place.population_rows(4) is None                   # members already
    assert Archive(6, 1000, unique=True).population_rows(4) is None
