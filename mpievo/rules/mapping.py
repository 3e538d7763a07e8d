"""Placement of logical islands on MPI ranks.

Islands are numbered 0..N-1 and spread over P ranks in contiguous blocks (N >= P):
the first ``N % P`` ranks host one island more than the others. The mapping is a
pure function of (N, P), so every rank computes the same placement without talking.
"""

from __future__ import annotations


def _check_layout(n_islands: int, nranks: int) -> None:
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"expected nranks >= 1, got {nranks!r}")
    if isinstance(n_islands, bool) or not isinstance(n_islands, int) or n_islands < nranks:
        raise ValueError(f"expected at least one island per rank (n_islands >= {nranks}), "
                         f"got n_islands={n_islands!r}")


def island_block(rank: int, n_islands: int, nranks: int) -> range:
    """The contiguous range of islands hosted by ``rank``.

    Raises:
        ValueError: fewer islands than ranks, or a rank outside [0, nranks).
    """
    _check_layout(n_islands, nranks)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < nranks:
        raise ValueError(f"expected rank in [0, {nranks}), got {rank!r}")
    base, extra = divmod(n_islands, nranks)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def islands_of_rank(rank: int, n_islands: int, nranks: int) -> list[int]:
    """Indices of the islands hosted by ``rank`` (block mapping, ascending).

    Args:
        rank: 0 <= rank < nranks.
        n_islands: total number of islands (>= nranks).
        nranks: number of ranks.

    Returns:
        The island indices of ``rank``; the blocks of all ranks partition 0..N-1.

    Raises:
        ValueError: fewer islands than ranks, or a rank out of range.
    """
    return list(island_block(rank, n_islands, nranks))


def rank_of_island(island: int, n_islands: int, nranks: int) -> int:
    """The rank hosting ``island`` (inverse of :func:`islands_of_rank`).

    Raises:
        ValueError: fewer islands than ranks, or an island out of range.
    """
    _check_layout(n_islands, nranks)
    if isinstance(island, bool) or not isinstance(island, int) or not 0 <= island < n_islands:
        raise ValueError(f"expected island in [0, {n_islands}), got {island!r}")
    base, extra = divmod(n_islands, nranks)
    big = extra * (base + 1)  # islands held by the ranks with one extra island
    if island < big:
        return island // (base + 1)
    return extra + (island - big) // base
