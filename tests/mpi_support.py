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


def on_rank_0(world, compute):
    """``compute()`` run on rank 0 alone, its result broadcast to every rank.

    For a one-process reference (a serial run) that every rank would otherwise compute
    again: at 4 ranks on 2 cores that is 4 copies. The other ranks sleep meanwhile rather
    than spin in MPI's wait, so rank 0 has a core; when ``compute`` raises, every rank fails.

    Example:
        serial = on_rank_0(world, lambda: run_job(validate(raw, 1), SelfComm()))
    """
    import time

    value, error = None, None
    if world.rank == 0:
        try:
            value = compute()
        except Exception as err:  # noqa: BLE001 - reported on every rank below
            error = f"{type(err).__name__}: {err}"
    request = world.Ibarrier()
    while not request.Test():
        time.sleep(0.002)
    value, error = world.bcast((value, error) if world.rank == 0 else None, root=0)
    if error is not None:
        raise AssertionError(f"rank 0's reference failed: {error}")
    return value
