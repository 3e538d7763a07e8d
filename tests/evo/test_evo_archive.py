"""Archive semantics: keep-the-best merge, ties, non-finite fitness, uniqueness, ids."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpievo.evo import ID_STRIDE, Archive, make_ids, sanitize_fitness


def filled(capacity=4, dim=3, unique=False, fitness=(4.0, 3.0, 2.0, 1.0)):
    archive = Archive(capacity, dim, "float64", unique=unique)
    genomes = np.arange(len(fitness) * dim, dtype=float).reshape(len(fitness), dim)
    archive.insert(genomes, fitness, np.arange(len(fitness)), 0, 0)
    return archive


def test_fills_free_slots_first_then_replaces_worst_only_when_better():
    archive = filled()
    assert archive.size == 4 and list(archive.fitness) == [4.0, 3.0, 2.0, 1.0]
    result = archive.insert(np.full((2, 3), 9.0), [5.0, 3.5], [10, 11], 0, 1)
    assert len(result.entered) == 1 and list(result.entered) == [1]
    assert sorted(archive.fitness) == [1.0, 2.0, 3.0, 3.5] and 11 in archive.ids and 0 not in archive.ids
    worse = archive.insert(np.full((1, 3), 7.0), [100.0], [12], 0, 2)
    assert len(worse.entered) == 0 and 12 not in archive.ids


def test_ties_keep_incumbents_and_earlier_candidates():
    archive = filled(fitness=(1.0, 2.0, 2.0, 2.0))
    result = archive.insert(np.full((1, 3), 9.0), [2.0], [99], 0, 1)  # equal to the worst: stays out
    assert len(result.entered) == 0
    result = archive.insert(np.array([[7.0] * 3, [8.0] * 3]), [1.5, 1.5], [100, 101], 0, 1)
    assert list(result.entered) == [0, 1]
    # the two evicted 2.0-members are the later slots
    assert sorted(archive.ids.tolist()) == [0, 1, 100, 101]
    archive = filled(capacity=2, fitness=(1.0,))
    archive.insert(np.array([[5.0] * 3, [6.0] * 3, [7.0] * 3]), [3.0, 3.0, 3.0], [7, 8, 9], 0, 1)
    assert sorted(archive.ids.tolist()) == [0, 7]


@given(st.lists(st.one_of(st.floats(-1e3, 1e3), st.just(np.nan), st.just(np.inf), st.just(-np.inf)),
                min_size=1, max_size=40),
       st.integers(1, 10))
def test_merge_matches_a_reference_sort(values, capacity):
    archive = Archive(capacity, 2, "float64")
    genomes = np.arange(len(values) * 2, dtype=float).reshape(-1, 2)
    half = len(values) // 2
    archive.insert(genomes[:half], values[:half], np.arange(half), 0, 0)
    archive.insert(genomes[half:], values[half:], np.arange(half, len(values)), 0, 1)
    clean, _ = sanitize_fitness(values)
    assert np.array_equal(np.sort(archive.fitness), np.sort(clean)[:capacity])
    assert len(set(archive.ids.tolist())) == archive.size == min(capacity, len(values))
    assert np.all(archive.genomes[:, 0] == 2 * archive.ids)  # rows stay with their records


def test_nonfinite_fitness_counted_and_ranked_worst():
    f, bad = sanitize_fitness([1.0, np.nan, -np.inf, np.inf, 2.0])
    assert bad == 3 and list(f) == [1.0, np.inf, np.inf, np.inf, 2.0]
    archive = Archive(3, 1, "float64")
    archive.insert(np.array([[0.0], [1.0], [2.0]]), [np.nan, -np.inf, 5.0], [0, 1, 2], 0, 0)
    assert archive.best_index() == 2
    archive.insert(np.array([[3.0], [4.0]]), [7.0, 8.0], [3, 4], 0, 1)
    assert sorted(archive.ids.tolist()) == [2, 3, 4]


def test_uniqueness_drops_duplicates_of_members_and_of_earlier_candidates():
    archive = filled(capacity=6, unique=True)
    dup_member = archive.genomes[2].copy()
    batch = np.array([dup_member, [50.0, 50.0, 50.0], [50.0, 50.0, 50.0], [-0.0, 1.0, 2.0]])
    result = archive.insert(batch, [0.1, 0.2, 0.3, 0.4], [20, 21, 22, 23], 0, 1)
    # genome 0 of the archive is [0, 1, 2]; -0.0 equals 0.0
    assert result.duplicates == 3 and list(result.entered) == [1]
    plain = filled(capacity=6)
    assert len(plain.insert(batch, [0.1, 0.2, 0.3, 0.4], [20, 21, 22, 23], 0, 1).entered) == 4


def test_duplicate_mask_survives_hash_order():
    archive = Archive(50, 4, "float32", unique=True)
    rng = np.random.default_rng(0)
    genomes = rng.normal(size=(50, 4)).astype(np.float32)
    archive.insert(genomes, rng.random(50), np.arange(50), 0, 0)
    probe = np.concatenate([genomes[::-1], rng.normal(size=(5, 4)).astype(np.float32)])
    assert archive.duplicate_mask(probe).tolist() == [True] * 50 + [False] * 5


def test_ids_layout_and_overflow():
    ids = make_ids(3, 10, 4)
    assert ids.dtype == np.int64 and list(ids - 3 * ID_STRIDE) == [10, 11, 12, 13]
    with pytest.raises(OverflowError, match="expected fewer than"):
        make_ids(0, ID_STRIDE - 1, 2)


def test_shape_errors():
    archive = Archive(4, 3)
    with pytest.raises(ValueError, match=r"expected genomes of shape \(n, 3\), got \(2, 4\)"):
        archive.insert(np.zeros((2, 4)), [1, 2], [0, 1], 0, 0)
    with pytest.raises(ValueError, match=r"expected fitness of shape \(2,\), got \(3,\)"):
        archive.insert(np.zeros((2, 3)), [1, 2, 3], [0, 1], 0, 0)
    with pytest.raises(TypeError, match="expected genome dtype float32, float64, bfloat16 or float16"):
        Archive(4, 3, "int32")


def test_state_round_trip_exact():
    archive = Archive(5, 2, "float32", unique=True)
    archive.insert(np.random.default_rng(0).normal(size=(4, 2)), [3.0, 1.0, np.nan, 2.0], [5, 6, 7, 8], 9, [1, 2, 3, 4])
    state = archive.state_dict()
    other = Archive(5, 2, "float32", unique=True)
    other.load_state_dict({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()})
    for key in ("genomes", "fitness", "ids", "births", "origins"):
        assert np.array_equal(getattr(other, key), getattr(archive, key))
    probe = archive.genomes[:1]
    assert other.duplicate_mask(probe).tolist() == [True]
    with pytest.raises(ValueError, match="expected archive capacity 6, got 5"):
        Archive(6, 2, "float32").load_state_dict(state)


def test_row_hashes_tell_apart_rows_that_differ_in_high_bits_only():
    # float64 words that differ only in exponent bits ([0, 0] vs [2, 2], ...): a plain
    # FNV multiply carries bits upwards only, and these collided
    from itertools import product

    from mpievo.evo.archive_records import row_hashes

    values = [0.0, 2.0, 4.0, -2.0, 0.5, 1.0]
    for dtype in (np.float64, np.float32):
        rows = np.array(list(product(values, repeat=2)), dtype)
        hashes = row_hashes(rows)
        assert len(set(hashes.tolist())) == len(rows), dtype
    same = row_hashes(np.array([[0.0, 1.0], [-0.0, 1.0]]))
    assert same[0] == same[1]   # -0.0 and 0.0 hash alike


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_children_merged_in_one_call_equal_insert_rows(dtype):
    rng = np.random.default_rng(5)
    one, rows = (Archive(6, 3, dtype, limit=5, island=2) for _ in range(2))
    assert one.merges_in_one_call and not Archive(6, 3, unique=True).merges_in_one_call
    next_id = 0
    for birth in range(1, 8):
        n = int(rng.integers(1, 5))
        genomes = one.as_rows(rng.normal(size=(n, 3)))
        fitness = np.round(rng.normal(size=n), 1)       # ties with members and each other
        best = rows.fitness.min() if rows.size else np.inf
        expected = rows.insert_rows(genomes, fitness, make_ids(2, next_id, n), 2, birth)
        entered, before, after = one.insert_children(genomes, fitness, 2 * ID_STRIDE + next_id, birth)
        next_id += n
        assert entered == len(expected.entered) and before == best and after == rows.fitness.min()
        for column in ("genomes", "fitness", "ids", "origins", "births"):
            assert np.array_equal(getattr(one, column).view(np.uint8), getattr(rows, column).view(np.uint8))


def test_children_of_a_subclass_or_unique_archive_take_insert_rows():
    class Other(Archive):
        def _write(self, *args):
            super()._write(*args)

    for archive in (Other(4, 2), Archive(4, 2, unique=True)):
        assert not archive.merges_in_one_call
        with pytest.raises(TypeError, match="expected an archive that merges in one call"):
            archive.insert_children(np.zeros((1, 2), np.float32), np.zeros(1), 0, 1)
