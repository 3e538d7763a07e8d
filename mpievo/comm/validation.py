"""Validate mode: check that every rank called the same collective before running it.

Each rank contributes its call's signature (kind, count, dtype, op, root, counts) to
one small all-gather; any difference raises :class:`CollectiveMismatchError` naming
every rank's call on every rank, where a mismatch would otherwise hang or corrupt.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .errors import CollectiveMismatchError
from .progress import Pending

KINDS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "barrier")
OPS = (None, "sum", "prod", "max", "min", "mean")


def signature_steps(comm: MPI.Intracomm, kind: str, count: int, dtype, op, root: int, counts):
    """Compare this call's signature with every rank's (a collective generator).

    Raises:
        CollectiveMismatchError: the ranks' calls differ.
    """
    size = comm.Get_size()
    dtype_code = -1 if dtype is None else int.from_bytes(np.dtype(dtype).str.encode()[:8], "little")
    counts_code = -1 if counts is None else hash(tuple(counts)) & 0x7FFFFFFFFFFFFFFF
    mine = np.array([KINDS.index(kind), count, dtype_code, OPS.index(op), root, counts_code],
                    dtype=np.int64)
    table = np.empty((size, mine.size), dtype=np.int64)
    req = comm.Iallgather([mine, MPI.INT64_T], [table, MPI.INT64_T])
    yield [Pending(req, -1, "from")]
    ignore_count = kind == "allgather"  # each rank contributes its own count
    cols = [0, 2, 3, 4, 5] if ignore_count else list(range(mine.size))
    if not (table[:, cols] == table[0, cols]).all():
        rows = "; ".join(describe_signature(r, row) for r, row in enumerate(table))
        raise CollectiveMismatchError(f"expected every rank to call the same collective, got {rows}")


def describe_signature(rank: int, row) -> str:
    """``rank R: kind(count=.., dtype=.., op=.., root=..)`` for one row of signatures."""
    kind = KINDS[row[0]] if 0 <= row[0] < len(KINDS) else "?"
    dtype = "-" if row[2] == -1 else int(row[2]).to_bytes(8, "little").rstrip(b"\0").decode(errors="replace")
    op = OPS[row[3]] if 0 <= row[3] < len(OPS) else "?"
    return f"rank {rank}: {kind}(count={row[1]}, dtype={dtype}, op={op}, root={row[4]})"
