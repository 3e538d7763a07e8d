"""Fixed binary layout of migrants."""

import numpy as np
import pytest

from mpievo.evo.island import Migrants
from mpievo.parallel.packing import EdgeLayout, HashLayout, concat_migrants, empty_migrants, migrant_count


def _migrants(n, dim, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return Migrants(rng.standard_normal((n, dim)).astype(dtype), rng.standard_normal(n),
                    rng.integers(0, 2**50, n), rng.integers(0, 100, n), rng.integers(0, 9, n))


def _travel(layout, sent):
    """Pack ``sent``, move its genomes as a message would, unpack: (sent genomes array, received)."""
    block = np.full(layout.nbytes, 0xAB, np.uint8)
    out = layout.pack(block, sent)
    into = layout.empty_genomes()
    into[...] = out
    return out, layout.unpack(block, into)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k, n, dim", [(3, 3, 5), (3, 1, 7), (4, 0, 1), (0, 0, 3), (2, 2, 1)])
def test_round_trip(dtype, k, n, dim):
    layout = EdgeLayout(k, dim, dtype)
    assert layout.nbytes % 8 == 0
    sent = _migrants(n, dim, dtype)
    out, got = _travel(layout, sent)
    assert migrant_count(got) == n and out.shape == (k, dim)
    for a, b in zip(sent, got):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_full_edges_send_the_emigrants_genomes_uncopied():
    layout = EdgeLayout(2, 3, np.float32)
    full, short = _migrants(2, 3, np.float32), _migrants(1, 3, np.float32)
    out, got = _travel(layout, full)
    assert out is full.genomes
    out, got = _travel(layout, short)   # fewer than k: a zero-padded copy of k rows
    assert out is not short.genomes and np.array_equal(out, np.vstack([short.genomes, np.zeros((1, 3))]))
    cast_out, _ = _travel(layout, _migrants(2, 3, np.float64))
    assert cast_out.dtype == np.float32


def test_received_genomes_are_handed_on_uncopied():
    layout = EdgeLayout(2, 3, np.float64)
    block = np.zeros(layout.nbytes, np.uint8)
    layout.pack(block, _migrants(2, 3, np.float64))
    into = layout.empty_genomes()
    assert np.shares_memory(layout.unpack(block, into).genomes, into)


def test_records_blocks_concatenate_without_overlap():
    layout, other = EdgeLayout(2, 3, np.float32), EdgeLayout(1, 3, np.float32)
    assert (layout.nbytes, other.nbytes) == (8 + 64, 8 + 32)
    buf = np.zeros(layout.nbytes + other.nbytes, np.uint8)
    a, b = _migrants(2, 3, np.float32, 1), _migrants(1, 3, np.float32, 2)
    layout.pack(buf[:layout.nbytes], a)
    other.pack(buf[layout.nbytes:], b)
    assert np.array_equal(layout.unpack(buf[:layout.nbytes], a.genomes.copy()).ids, a.ids)
    assert np.array_equal(other.unpack(buf[layout.nbytes:], b.genomes.copy()).ids, b.ids)


def test_layout_errors():
    layout = EdgeLayout(2, 3, np.float64)
    block = np.zeros(layout.nbytes, np.uint8)
    genomes = layout.empty_genomes()
    with pytest.raises(ValueError, match="at most 2 migrants"):
        layout.pack(block, _migrants(3, 3, np.float64))
    with pytest.raises(ValueError, match="uint8 block of"):
        layout.unpack(np.zeros(layout.nbytes + 8, np.uint8), genomes)
    with pytest.raises(ValueError, match=r"shape \(2, 3\) and dtype float64, got \(2, 3\) float32"):
        layout.unpack(block, genomes.astype(np.float32))
    block[:8].view(np.int64)[0] = 5
    with pytest.raises(ValueError, match="disagree on the layout"):
        layout.unpack(block, genomes)
    assert migrant_count(empty_migrants(3, np.float32)) == 0


def test_concat_migrants_keeps_order_and_casts():
    a, b = _migrants(2, 3, np.float64, 1), _migrants(1, 3, np.float64, 2)
    both = concat_migrants([a, b], 3, np.float32)
    assert both.genomes.dtype == np.float32 and migrant_count(both) == 3
    assert np.array_equal(both.ids, np.concatenate([a.ids, b.ids]))
    assert migrant_count(concat_migrants([], 3, np.float32)) == 0
    assert concat_migrants([a], 3, np.float64).genomes is a.genomes   # one batch: no copy
    assert concat_migrants([a], 3, np.float32).genomes.dtype == np.float32


def test_hash_layout_round_trip():
    layout = HashLayout(4)
    block = np.zeros(layout.nbytes, np.uint8)
    hashes = np.array([1, 2**63 + 5, 7], np.uint64)
    layout.pack(block, hashes)
    assert np.array_equal(layout.unpack(block), hashes)
    with pytest.raises(ValueError, match="at most 4"):
        layout.pack(block, np.arange(5, dtype=np.uint64))
