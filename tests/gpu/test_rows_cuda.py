"""Device row utilities (mpievo.kernels.cuda.rows) against the host kernels."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo.archive_records import row_hashes
from mpievo.kernels.cuda import rows as cuda_rows
from mpievo.kernels import operators as host_ops

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaWarning",
                                        "ignore:overflow encountered:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")

DTYPES = [np.float32, np.float64]


def _device(host):
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(host))


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_and_take_rows_match_host(dtype, rng):
    src = rng.standard_normal((7, 11)).astype(dtype)
    dst = rng.standard_normal((9, 11)).astype(dtype)
    rows, slots = np.array([6, 0, 3, 3, 5]), np.array([8, 2, 0, 4, 7])
    want = dst.copy()
    host_ops.copy_rows(src, rows, want, slots)
    d_dst = _device(dst)
    cuda_rows.copy_rows(_device(src), rows, d_dst, _device(slots))  # device slots too
    np.testing.assert_array_equal(d_dst.copy_to_host(), want)
    np.testing.assert_array_equal(cuda_rows.take_rows(_device(src), rows).copy_to_host(), src[rows])
    assert cuda_rows.take_rows(_device(src), np.zeros(0, np.int64)).shape == (0, 11)


def test_row_moves_refuse_bad_arguments(rng):
    src, dst = _device(np.zeros((4, 3), np.float32)), _device(np.zeros((4, 3), np.float32))
    with pytest.raises(TypeError, match="expected src to be a numba device array"):
        cuda_rows.copy_rows(np.zeros((4, 3), np.float32), [0], dst, [0])
    with pytest.raises(TypeError, match="expected dst of dtype float32"):
        cuda_rows.copy_rows(src, [0], _device(np.zeros((4, 3))), [0])
    with pytest.raises(ValueError, match=r"expected rows in \[0, 4\), got values in \[0, 4\]"):
        cuda_rows.copy_rows(src, [0, 4], dst, [0, 1])
    with pytest.raises(ValueError, match="expected distinct slots, got 1 repeated"):
        cuda_rows.copy_rows(src, [0, 1], dst, [2, 2])
    with pytest.raises(ValueError, match="expected rows and slots of the same length"):
        cuda_rows.copy_rows(src, [0, 1], dst, [2])
    with pytest.raises(ValueError, match="the same number of genes, got 3 and 2"):
        cuda_rows.copy_rows(src, [0], _device(np.zeros((4, 2), np.float32)), [0])
    with pytest.raises(TypeError, match="expected src of dtype float32 or float64, got int32"):
        cuda_rows.take_rows(_device(np.zeros((4, 3), np.int32)), [0])
    with pytest.raises(ValueError, match="expected distinct slots"):
        cuda_rows.retain_rows(src, [1, 1])


def _host_retain(genomes, slots):
    want = genomes.copy()
    host_ops.retain_rows(want, slots)
    return want


@pytest.mark.parametrize("scratch_rows", [None, 1, 2])
def test_retain_rows_matches_host_for_any_order(scratch_rows, rng):
    dim, dtype = 3, np.float64
    scratch = {} if scratch_rows is None else {"scratch_bytes": scratch_rows * dim * 8}
    cases = [np.array([3, 4, 5, 6, 7]),                       # a compaction: one long chain
             np.array([1, 2, 0, 3, 9, 4]),                    # a 3-cycle, a fixed point, a chain
             np.array([5, 4, 3, 2, 1, 0]),                    # three swaps
             np.array([1, 2, 3, 4, 5, 0]),                    # one 6-cycle
             rng.permutation(10)[:7]]
    for slots in cases:
        genomes = rng.standard_normal((10, dim)).astype(dtype)
        d = _device(genomes)
        cuda_rows.retain_rows(d, slots, **scratch)
        got = d.copy_to_host()
        np.testing.assert_array_equal(got[:len(slots)], _host_retain(genomes, slots)[:len(slots)],
                                      err_msg=f"slots {slots}")


def test_retain_plan_is_overlap_safe_with_any_scratch(rng):
    # the plan replayed on the host: every batch reads before it writes, and a
    # later batch never reads a row an earlier one wrote
    for _ in range(3000):
        n = int(rng.integers(1, 13))
        slots = rng.permutation(n)[:int(rng.integers(0, n + 1))]
        if rng.random() < 0.3:
            slots = np.sort(slots)
        batch = int(rng.integers(1, 5))
        genomes = np.arange(n, dtype=np.float64)[:, None]
        scratch = np.full((batch + 1, 1), np.nan)
        for into_scratch, rows, staged in cuda_rows.retain_plan(slots, batch):
            assert staged.max() <= batch and (len(rows) <= batch or not into_scratch)
            if into_scratch:
                scratch[staged] = genomes[rows]
            else:
                genomes[rows] = scratch[staged]
        np.testing.assert_array_equal(genomes[:len(slots), 0], slots, err_msg=f"{slots} {batch}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_equal_compares_like_numpy(dtype):
    a = np.array([[0.0, 1.0, 2.0], [np.nan, 1.0, 2.0], [-0.0, 5.0, 6.0]], dtype)
    b = np.array([[0.0, 5.0, 6.0], [0.0, 1.0, 2.0], [np.nan, 1.0, 2.0]], dtype)
    ia, ib = np.array([0, 1, 2, 0, 2]), np.array([1, 2, 0, 0, 1])
    want = np.all(a[ia] == b[ib], axis=1)
    got = cuda_rows.rows_equal(_device(a), ia, _device(b), _device(ib))
    assert got.dtype == bool
    np.testing.assert_array_equal(got, want)
    assert list(want) == [True, False, True, False, False]  # NaN != NaN, -0.0 == 0.0
    assert cuda_rows.rows_equal(_device(a), [], _device(b), []).shape == (0,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_hash_rows_equal_host_row_hashes(dtype, rng):
    bits = np.uint32 if dtype == np.float32 else np.uint64
    genomes = rng.standard_normal((6, 9)).astype(dtype)
    genomes[1] = genomes[0]
    genomes[1, 3] = -0.0
    genomes[0, 3] = 0.0
    genomes[2, :2] = [np.nan, -np.inf]
    signalling = np.array([0x7F800001 if dtype == np.float32 else 0x7FF0000000000001], bits)
    genomes[3, 4] = signalling.view(dtype)[0]  # the host's ``x + 0`` quiets it
    genomes[4, :] = 0.0
    genomes[5, :] = 2.0                        # differs from row 4 only in exponent bits
    want = row_hashes(genomes)
    got = cuda_rows.hash_rows(_device(genomes))
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, want)
    assert got[0] == got[1] and len(set(got[2:].tolist())) == 4
    assert cuda_rows.hash_rows(_device(genomes[:0])).shape == (0,)


@pytest.mark.parametrize("dtype", DTYPES)
def test_centroid_distances_match_host(dtype, rng):
    genomes = rng.uniform(-3, 7, (5, 37)).astype(dtype)
    width = rng.uniform(1, 10, 37)
    want = np.empty(5)
    host_ops.centroid_distances(genomes, width, want)
    got = cuda_rows.centroid_distances(_device(genomes), width)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    np.testing.assert_array_equal(cuda_rows.centroid_distances(_device(genomes), _device(width)),
                                  got)  # the same bits every run
    assert cuda_rows.centroid_distances(_device(genomes[:0]), width).shape == (0,)
    with pytest.raises(ValueError, match=r"expected width of shape \(37,\) float64"):
        cuda_rows.centroid_distances(_device(genomes), width[:5])


@pytest.mark.parametrize("chunk_bytes", [1, 40, 1 << 20])
def test_to_host_and_from_host_copy_in_chunks(chunk_bytes, rng):
    host = rng.standard_normal((5, 7))
    dev = cuda_rows.from_host(host, chunk_bytes=chunk_bytes)
    np.testing.assert_array_equal(dev.copy_to_host(), host)
    out = np.zeros_like(host)
    assert cuda_rows.to_host(dev, out, chunk_bytes=chunk_bytes) is out
    np.testing.assert_array_equal(out, host)
    again = cuda_rows.from_host(host[::-1].copy(), dev, chunk_bytes=chunk_bytes)
    assert again is dev
    np.testing.assert_array_equal(cuda_rows.to_host(dev, chunk_bytes=chunk_bytes), host[::-1])


def test_host_transfers_refuse_bad_arguments():
    host = np.zeros((4, 3))
    dev = _device(host)
    with pytest.raises(ValueError, match="expected src to be C-contiguous"):
        cuda_rows.from_host(host[:, :2])
    with pytest.raises(TypeError, match="expected src to be a numpy array"):
        cuda_rows.from_host(dev)
    with pytest.raises(ValueError, match=r"expected dst of shape \(4, 2\)"):
        cuda_rows.from_host(np.zeros((4, 2)), dev)
    with pytest.raises(ValueError, match=r"of shape \(4, 3\) and dtype float64, got ndarray of "
                                         r"shape \(4, 3\) and dtype float32"):
        cuda_rows.to_host(dev, np.zeros((4, 3), np.float32))
    with pytest.raises(TypeError, match="expected src to be a numba device array"):
        cuda_rows.to_host(host)
    with pytest.raises(ValueError, match="expected chunk_bytes >= 1, got 0"):
        cuda_rows.to_host(dev, chunk_bytes=0)
