"""Block mapping of islands to ranks."""

import pytest
from hypothesis import given, strategies as st

from mpievo.rules.mapping import islands_of_rank, rank_of_island


@pytest.mark.parametrize("n_islands, nranks, expected", [
    (1, 1, [[0]]),
    (4, 1, [[0, 1, 2, 3]]),
    (4, 2, [[0, 1], [2, 3]]),
    (5, 2, [[0, 1, 2], [3, 4]]),
    (7, 3, [[0, 1, 2], [3, 4], [5, 6]]),
    (4, 4, [[0], [1], [2], [3]]),
])
def test_block_mapping_examples(n_islands, nranks, expected):
    assert [islands_of_rank(r, n_islands, nranks) for r in range(nranks)] == expected


@given(nranks=st.integers(1, 40), extra=st.integers(0, 100))
def test_mapping_partitions_islands_and_inverts(nranks, extra):
    n_islands = nranks + extra
    blocks = [islands_of_rank(r, n_islands, nranks) for r in range(nranks)]
    assert sum(blocks, []) == list(range(n_islands))
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    for rank, block in enumerate(blocks):
        assert all(rank_of_island(i, n_islands, nranks) == rank for i in block)


@pytest.mark.parametrize("call, message", [
    (lambda: islands_of_rank(0, 2, 3), "at least one island per rank"),
    (lambda: islands_of_rank(3, 4, 3), "rank in [0, 3)"),
    (lambda: rank_of_island(4, 4, 2), "island in [0, 4)"),
    (lambda: islands_of_rank(0, 4, 0), "nranks >= 1"),
])
def test_mapping_rejects_bad_layouts(call, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        call()
