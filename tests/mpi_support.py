"""Helpers for tests that run on several ranks (import as ``from mpi_support import ...``;
tests/ is on sys.path because tests/conftest.py lives there)."""

from __future__ import annotations


def all_ranks_agree(world, ok: bool, detail: str = "") -> None:
    """Fail on every rank when ``ok`` is False on any rank.

    Raises:
        AssertionError: naming the ranks that failed and this rank's detail.
    """
    flags = world.allgather(bool(ok))
    bad = [r for r, f in enumerate(flags) if not f]
    assert not bad, f"failed on ranks {bad}; rank {world.rank}: {detail}"
