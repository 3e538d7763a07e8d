"""Bucketed all-reduce: many arrays, one collective per dtype bucket, in place.

Arrays of the same dtype are packed (in order) into buckets of at most
``bucket_bytes`` (an array larger than that gets its own); each bucket is reduced
with one all-reduce and the results are written back into the original arrays.
"""

from __future__ import annotations

from typing import Callable

from .buffers import check_dtype, flat_host

DEFAULT_BUCKET_BYTES = 25 << 20    # like PyTorch DDP's bucket cap


def group_by_dtype(flats) -> dict:
    """dtype string -> indices into ``flats`` of that dtype, in order."""
    groups: dict = {}
    for i, flat in enumerate(flats):
        groups.setdefault(flat.dtype.str, []).append(i)
    return groups


def buckets(members: list[int], flats, cap: int) -> list[list[int]]:
    """Split ``members`` (indices into ``flats``, in order) into buckets of <= ``cap`` bytes.

    An array larger than ``cap`` forms a bucket of its own.
    """
    found, current, size = [], [], 0
    for i in members:
        nbytes = flats[i].nbytes
        if current and size + nbytes > cap:
            found.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
    if current:
        found.append(current)
    return found


def run(core, arrays, op: str, bucket_bytes: int, allreduce: Callable) -> list:
    """Reduce ``arrays`` in place with ``allreduce(buf, buf, op)`` per bucket; returns ``arrays``.

    Raises:
        ValueError: ``bucket_bytes`` < 1. TypeError / ValueError: a bad array or op.
    """
    if bucket_bytes < 1:
        raise ValueError(f"expected bucket_bytes >= 1, got {bucket_bytes}")
    flats = [flat_host(a, f"arrays[{i}]", writable=True) for i, a in enumerate(arrays)]
    for flat in flats:
        check_dtype(flat.dtype, op)
    for members in group_by_dtype(flats).values():
        for bucket in buckets(members, flats, bucket_bytes):
            _reduce_bucket(core, [flats[i] for i in bucket], op, allreduce)
    return arrays


def _reduce_bucket(core, flats, op, allreduce) -> None:
    if len(flats) == 1:
        allreduce(flats[0], flats[0], op)
        return
    packed = core.workspace.get(flats[0].dtype, sum(f.size for f in flats), 1)
    offset = 0
    for f in flats:
        packed[offset:offset + f.size] = f
        offset += f.size
    allreduce(packed, packed, op)
    offset = 0
    for f in flats:
        f[...] = packed[offset:offset + f.size]
        offset += f.size
