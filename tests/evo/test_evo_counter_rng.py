"""The counter-based generator (mpievo.kernels.random), its keying (mpievo.evo.streams) and
the large-genome kernels (mpievo.kernels.counter_operators) against references."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

from mpievo.evo import streams
from mpievo.kernels import counter_operators as co
from mpievo.kernels import random as kr
from mpievo.kernels.operators import BOUND_MODES, _bound_value

F = np.float32
MASK = 0xFFFFFFFF


# --- references ------------------------------------------------------------------

def philox_reference(counter, key, rounds=10):
    """Philox4x32 from the published algorithm, on Python ints."""
    c, (k0, k1) = list(counter), key
    for _ in range(rounds):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
        k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
    return c


def log_unit_reference(w):
    """numpy float32 version of kernels.random's logarithm (same operations, same order)."""
    c = kr._CONSTANTS
    m = (w >> np.uint64(8)) + np.uint64(1)
    top = (np.frexp(m.astype(np.float64))[1] - 1).astype(np.uint64)
    f = (m << (np.uint64(24) - top)).astype(F) * c["F_UNIT"]
    e = top.astype(F) - F(24)
    big = f > c["F_SQRT2"]
    f, e = np.where(big, f * F(0.5), f), np.where(big, e + F(1), e)
    x = f - F(1)
    z = x * x
    p = c["L0"]
    for name in ("L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8"):
        p = p * x + c[name]
    y = p * x * z + c["LN2_LO"] * e - F(0.5) * z
    return x + y + c["LN2_HI"] * e


def normal_pair_reference(w_radius, w_angle):
    c = kr._CONSTANTS
    r = np.sqrt(F(-2) * log_unit_reference(w_radius))
    t = (w_angle & np.uint64(0xFFFFFF)).astype(F) * c["ANGLE_UNIT"]
    t2 = t * t
    s = t + t * t2 * ((c["S0"] * t2 + c["S1"]) * t2 + c["S2"])
    co_ = F(1) - F(0.5) * t2 + t2 * t2 * ((c["C0"] * t2 + c["C1"]) * t2 + c["C2"])
    bits = w_angle >> np.uint64(29)
    swap = (bits & np.uint64(1)).astype(bool)
    x, y = np.where(swap, s, co_), np.where(swap, co_, s)
    x = np.where(bits & np.uint64(2), -x, x)
    y = np.where(bits & np.uint64(4), -y, y)
    return r * x, r * y


@numba.njit
def _log_units(w, out):
    for i in range(w.shape[0]):
        out[i] = kr.log_unit(w[i])


def log_units(w):
    out = np.empty(len(w), F)
    _log_units(w, out)
    return out


def kolmogorov_smirnov(z):
    z = np.sort(z)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    n = len(z)
    return max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))


# --- the generator ---------------------------------------------------------------

@pytest.mark.parametrize("counter, key, expected", [  # Random123's known-answer vectors
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([MASK] * 4, [MASK, MASK], [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
])
def test_philox_known_answers(counter, key, expected):
    words = kr.words((key[0], key[1], counter[2], counter[3]), counter[0] | counter[1] << 32, 1)
    assert words[0].tolist() == expected
    assert philox_reference(counter, key) == expected


def test_words_match_the_reference_across_the_high_counter_word():
    key = (0x12345678, 7, 99, 1)
    base = 2**32 - 3  # the block index carries into the counter's second word
    words = kr.words(key, base, 6)
    for i in range(6):
        index = base + i
        want = philox_reference([index & MASK, index >> 32, key[2], key[3]], key[:2])
        assert words[i].tolist() == want


def test_words_are_uniform_and_distinct_keys_independent():
    n = 50_000
    keys = [(1, 2, 3, 1), (2, 2, 3, 1), (1, 3, 3, 1), (1, 2, 4, 1), (1, 2, 3, 2)]
    streams_ = [kr.words(key, 0, n).astype(np.float64).ravel() / 2**32 for key in keys]
    for u in streams_:
        assert u.mean() == pytest.approx(0.5, abs=0.005) and u.var() == pytest.approx(1 / 12, abs=0.002)
        counts = np.bincount((u * 64).astype(int), minlength=64)
        chi2 = float(np.sum((counts - len(u) / 64) ** 2 / (len(u) / 64)))
        assert chi2 < 120  # 63 degrees of freedom: p ~ 1e-5
    for i in range(len(keys)):
        for j in range(i + 1, len(keys)):
            assert abs(np.corrcoef(streams_[i], streams_[j])[0, 1]) < 0.01
            # 2e5 words each: about 2e5**2 / 2**32 = 9 equal by chance; a shared stream: all
            assert len(np.intersect1d(streams_[i], streams_[j])) < 40


def test_log_unit_is_the_reference_formula_and_accurate():
    w = np.random.default_rng(0).integers(0, 2**32, 100_000, dtype=np.uint64)
    w[:4] = [0, 255, 256, MASK]  # u = 2**-24 (twice), 2**-23, 1
    got = log_units(w)
    np.testing.assert_array_equal(got, log_unit_reference(w))
    exact = np.log(((w >> np.uint64(8)) + np.uint64(1)).astype(np.float64) * 2.0**-24)
    assert got[3] == 0.0
    np.testing.assert_allclose(got, exact, rtol=2e-7, atol=1e-7)


def test_normals_are_the_reference_formula_accurate_and_normal():
    key = (5, 0, 11, 1)
    n = 200_000
    z = kr.normals(key, 0, n)
    w = kr.words(key, 0, n).astype(np.uint64)
    z0, z1 = normal_pair_reference(w[:, 1], w[:, 2])
    np.testing.assert_array_equal(z[:, 0], z0)
    np.testing.assert_array_equal(z[:, 1], z1)
    # against exact Box-Muller on the same uniforms: the polynomials are float32-accurate
    u = ((w[:, 1] >> np.uint64(8)) + np.uint64(1)) * 2.0**-24
    t = (w[:, 2] & np.uint64(0xFFFFFF)) * (math.pi / 4 * 2.0**-24)
    r = np.sqrt(-2 * np.log(u))
    bits = w[:, 2] >> np.uint64(29)
    x = np.where(bits & np.uint64(1), np.sin(t), np.cos(t)) * np.where(bits & np.uint64(2), -1, 1)
    np.testing.assert_allclose(z[:, 0], r * x, rtol=1e-6, atol=1e-6)
    flat = z.astype(np.float64).ravel()
    assert flat.mean() == pytest.approx(0, abs=0.005) and flat.std() == pytest.approx(1, abs=0.005)
    assert np.mean(flat**3) == pytest.approx(0, abs=0.02) and np.mean(flat**4) == pytest.approx(3, abs=0.05)
    assert kolmogorov_smirnov(flat[:40_000]) < 1.63 / math.sqrt(40_000)  # p = 0.01
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < 0.01
    assert np.abs(flat).max() < 5.8  # 24-bit radius


# --- keying ----------------------------------------------------------------------

def test_counter_key_is_the_stream_keys_in_32_bit_words():
    assert streams.counter_key(7, 3, 12, "breed") == (7, 3, 12, streams.PURPOSES["breed"])
    assert streams.counter_key(2**32 + 5, 0, 0, 9) == ((2**32 + 5 ^ 0x9E3779B9) & MASK, 0, 0, 9)
    with pytest.raises(ValueError, match="expected seed < 2"):
        streams.counter_key(2**64, 0, 0)


def test_counter_blocks_take_the_next_blocks_of_the_stream():
    rng = streams.stream(4, 2, 9, "breed")
    rng.random(5)  # two numpy Philox blocks used: counter word 0 is 2
    key, base = streams.counter_blocks(rng, 1000)
    assert key == streams.counter_key(4, 2, 9, "breed") and base == 3
    reference = np.random.Philox(counter=[2 + 1000, 0, 9, 1], key=[4, 2])
    np.testing.assert_array_equal(rng.random(4), np.random.Generator(reference).random(4))
    # the next kernel starts after these blocks
    assert streams.counter_blocks(rng, 10) == (key, 1000 + 2 + 1 + 1)


def test_counter_blocks_of_other_generators_draw_the_key():
    a = streams.counter_blocks(np.random.default_rng(3), 10)
    b = streams.counter_blocks(np.random.default_rng(3), 10)
    assert a == b and a[1] == 0 and all(0 <= k <= MASK for k in a[0])
    assert a != streams.counter_blocks(np.random.default_rng(4), 10)


# --- kernels against numpy references ---------------------------------------------

KEY = tuple(np.uint64(k) for k in (9, 1, 5, 1))


def _box(dim, dtype):
    return np.full(dim, -1.0, dtype), np.full(dim, 1.5, dtype)


def _parents(n, dim, dtype, seed=0):
    rng = np.random.default_rng(seed)
    genomes = rng.uniform(-1, 1.5, (5, dim)).astype(dtype)
    return genomes, rng.integers(0, 5, n), rng.integers(0, 5, n), rng.random(n).astype(dtype)


def _vary(genomes, ia, ib, w, x, rate, steps, mode, dense, base=17):
    lower, upper = _box(x.shape[1], x.dtype)
    scale = (upper - lower).astype(x.dtype)
    counts = np.empty(len(x), np.int64)
    inv = 1.0 / math.log1p(-rate) if 0 < rate < 1 else 0.0
    co.vary(genomes, ia, ib, w, True, x, steps, scale, lower, upper, BOUND_MODES[mode],
            np.uint64(co.rate_threshold(rate)), inv, dense, KEY, np.uint64(base), counts)
    return counts


def _interpolated(genomes, ia, ib, w):
    lower, upper = _box(genomes.shape[1], genomes.dtype)
    a, b = genomes[ia], genomes[ib]
    return np.minimum(np.maximum(b + w[:, None] * (a - b), lower), upper)


def _bounded(v, lo, hi, mode, resample_word):
    u = float(resample_word) * 2.0**-32 if mode == "resample" else 0.0
    if mode == "clip":
        return min(max(v, lo), hi)
    return _bound_value(v, lo, hi, BOUND_MODES[mode], u)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["clip", "reflect", "resample"])
def test_dense_mutation_kernel_matches_the_reference(dtype, mode):
    n, dim, rate, base = 3, 2 * co.TILE + 7, 0.4, 17  # two tiles and a bit, odd
    genomes, ia, ib, w = _parents(n, dim, dtype)
    steps = np.array([0.05, 0.5, 3.0], dtype)  # 3.0: many genes leave the box
    x = np.empty((n, dim), dtype)
    counts = _vary(genomes, ia, ib, w, x, rate, steps, mode, True, base)
    pairs = (dim + 1) // 2
    words = kr.words(KEY, base, 2 * n * pairs).astype(np.uint64).reshape(2, n, pairs, 4)
    normals = kr.normals(KEY, base, n * pairs).reshape(n, pairs, 2)
    genes = np.arange(dim)
    mask_words = np.where(genes % 2 == 0, words[0][:, genes // 2, 0], words[0][:, genes // 2, 3])
    mask = mask_words < co.rate_threshold(rate)
    z = normals[:, genes // 2, genes % 2]
    lower, upper = _box(dim, dtype)
    scale = upper - lower
    want = _interpolated(genomes, ia, ib, w)
    moved = want + steps[:, None] * scale * z.astype(dtype)
    resample_words = np.where(genes % 2 == 0, words[1][:, genes // 2, 0], words[1][:, genes // 2, 3])
    for c, g in zip(*np.nonzero(mask)):
        want[c, g] = _bounded(moved[c, g], lower[g], upper[g], mode, resample_words[c, g])
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(counts, mask.sum(axis=1))


def test_sparse_mutation_kernel_matches_the_reference():
    n, dim, rate, base = 2, 2 * co.TILE + 7, 2e-3, 3
    genomes, ia, ib, w = _parents(n, dim, np.float32)
    steps = np.array([0.1, 0.01], np.float32)
    x = np.empty((n, dim), np.float32)
    counts = _vary(genomes, ia, ib, w, x, rate, steps, "clip", False, base)
    pairs = (dim + 1) // 2
    words = kr.words(KEY, base, n * pairs).astype(np.uint64).reshape(n, pairs, 4)
    normals = kr.normals(KEY, base, n * pairs).reshape(n, pairs, 2)
    gap_logs = log_units(words[:, :, [0, 3]].reshape(n, 2 * pairs)[:, :dim].ravel()).reshape(n, dim)
    lower, upper = _box(dim, np.float32)
    want = _interpolated(genomes, ia, ib, w)
    inv = 1.0 / math.log1p(-rate)
    for c in range(n):
        mutated = []
        for g0 in range(0, dim, co.TILE):
            g, end = g0, min(g0 + co.TILE, dim)
            while g < end:
                gap = float(gap_logs[c, g]) * inv
                if gap >= end - g:
                    break
                g += int(gap)
                mutated.append(g)
                g += 1
        for g in mutated:
            v = want[c, g] + steps[c] * (upper[g] - lower[g]) * normals[c, g // 2, g % 2]
            want[c, g] = min(max(v, lower[g]), upper[g])
        assert counts[c] == len(mutated) > 0
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("dense, rate", [(True, 0.3), (False, 0.01)])
def test_mutation_kernel_statistics(dense, rate):
    n, dim = 4, 3 * co.TILE
    genomes = np.zeros((1, dim), np.float64)
    zeros = np.zeros(n, np.int64)
    x = np.empty((n, dim))
    counts = _vary(genomes, zeros, zeros, np.zeros(n), x, rate, np.full(n, 0.05), "clip", dense)
    mutated = x != 0
    assert np.array_equal(mutated.sum(axis=1), counts)
    assert counts.sum() / (n * dim) == pytest.approx(rate, rel=0.03)
    # every tile, and both halves of each, at the rate
    halves = mutated.reshape(n, 6, co.TILE // 2).mean(axis=(0, 2))
    np.testing.assert_allclose(halves, rate, rtol=0.12)
    z = x[mutated] / (0.05 * 2.5)  # the box is 8 steps away: nothing is clipped
    assert z.mean() == pytest.approx(0, abs=4 / math.sqrt(len(z)))
    assert z.std() == pytest.approx(1, abs=4 / math.sqrt(len(z)))


def test_kernels_do_not_depend_on_the_thread_count():
    genomes, ia, ib, w = _parents(6, co.TILE + 10, np.float32)
    runs = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            x = np.empty((6, co.TILE + 10), np.float32)
            counts = _vary(genomes, ia, ib, w, x, 0.01, np.full(6, 0.3, np.float32), "clip", False)
            out = np.empty_like(x)
            co.cross(genomes, ia, ib, co.CROSS_SBX, np.uint64(0), F(0), F(1), 15.0, KEY, np.uint64(0), out)
        finally:
            numba.set_num_threads(previous)
        runs.append((x, counts, out))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def _gene_words(n, dim, base):
    quads = (dim + 3) // 4
    words = kr.words(KEY, base, n * quads).astype(np.uint64).reshape(n, 4 * quads)
    return words[:, :dim]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["uniform", "blend", "sbx"])
def test_crossover_kernel_matches_the_reference(dtype, kind):
    n, dim, base = 3, co.TILE + 5, 8
    genomes, ia, ib, _ = _parents(n, dim, dtype)
    alpha, eta, swap = 0.5, 15.0, 0.3
    out = np.empty((n, dim), dtype)
    co.cross(genomes, ia, ib, co.CROSSOVER_CODES[kind], np.uint64(co.rate_threshold(swap)),
             dtype(alpha), dtype(1 + 2 * alpha), eta, KEY, np.uint64(base), out)
    w = _gene_words(n, dim, base)
    a, b = genomes[ia], genomes[ib]
    if kind == "uniform":
        want = np.where(w < co.rate_threshold(swap), b, a)
    elif kind == "blend":
        u = (w >> np.uint64(8)).astype(F) * F(2.0**-24)
        low, span = np.minimum(a, b), np.abs(a - b)
        want = low - alpha * span + u * ((1 + 2 * alpha) * span)
    else:
        u = (w & np.uint64(0xFFFFFF)) * 2.0**-24
        power = 1 / (eta + 1)
        beta = np.where(u <= 0.5, (2 * u) ** power, (0.5 / (1 - u)) ** power)
        beta = np.where(w >> np.uint64(31), beta, -beta)
        want = 0.5 * ((1 + beta) * a.astype(np.float64) + (1 - beta) * b.astype(np.float64))
    # SBX: numpy's power and libm's pow (Numba) may differ in the last bit
    tolerance = {"rtol": 1e-13, "atol": 1e-15} if kind == "sbx" else {"rtol": 0, "atol": 0}
    np.testing.assert_allclose(out, want.astype(dtype), **tolerance)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_resample_kernel_matches_the_reference(dtype):
    n, dim, base = 2, co.TILE + 3, 5
    lower, upper = _box(dim, dtype)
    x = np.random.default_rng(1).uniform(-3, 3, (n, dim)).astype(dtype)
    x[0, 1] = np.nan
    outside = ~((x >= lower) & (x <= upper))
    u = _gene_words(n, dim, base).astype(np.float64) * 2.0**-32
    values = np.minimum(lower + (u * (upper - lower)).astype(dtype), upper)
    want = np.where(outside, values, x)
    moved = co.resample_outside(x, lower, upper, KEY, np.uint64(base))
    assert moved == outside.sum()
    np.testing.assert_array_equal(x, want)
