"""Algorithm selection by message size, from a calibration table.

The table (``tuning.json`` beside this module, written by ``mpievo bench calibrate``
on the target machine; override with ``MPIEVO_TUNING=path``) maps each collective and
rank count to size thresholds: the first entry whose ``max_bytes`` is at least the
message size (or null) names the algorithm. An algorithm can be forced per call
(``algorithm=``) or per job with ``MPIEVO_<COLLECTIVE>_ALGORITHM`` (e.g.
``MPIEVO_ALLREDUCE_ALGORITHM=ring``).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

#: algorithms each collective implements; "auto" selects from the table
ALGORITHMS = {
    "allreduce": ("ring", "recursive_doubling", "native"),
    "reduce_scatter": ("ring", "native"),
    "allgather": ("ring", "native"),
    "broadcast": ("chain", "native"),
}
#: used when the table has no entry (never for a calibrated machine)
FALLBACK = {"allreduce": "ring", "reduce_scatter": "ring", "allgather": "ring", "broadcast": "chain"}
DEFAULT_SEGMENT_BYTES = 1 << 20

_TUNING_FILE = Path(__file__).with_name("tuning.json")


@functools.lru_cache(maxsize=8)
def load_table(path: str | None = None) -> dict:
    """Read a tuning table (default: MPIEVO_TUNING or the packaged one).

    Raises:
        ValueError: the file is not a tuning table.
    """
    path = path or os.environ.get("MPIEVO_TUNING") or str(_TUNING_FILE)
    if not Path(path).exists():
        return {}
    with open(path) as f:
        table = json.load(f)
    if not isinstance(table, dict) or "collectives" not in table:
        raise ValueError(f"expected a tuning table with a 'collectives' key in {path}, "
                         f"got {type(table).__name__} keys {list(table)[:5] if isinstance(table, dict) else ''}")
    return table


def check_algorithm(collective: str, algorithm: str) -> str:
    choices = ALGORITHMS[collective]
    if algorithm not in choices and algorithm != "auto":
        raise ValueError(f"expected {collective} algorithm in {('auto',) + choices}, got {algorithm!r}")
    return algorithm


def forced_algorithm(collective: str) -> str | None:
    """The algorithm forced by environment for ``collective``, or None."""
    value = os.environ.get(f"MPIEVO_{collective.upper()}_ALGORITHM")
    if not value or value == "auto":
        return None
    return check_algorithm(collective, value)


def rules(table: dict, collective: str, nranks: int) -> list:
    """``[[max_bytes or None, algorithm], ...]`` of ``collective`` on ``nranks`` ranks."""
    per = table.get("collectives", {}).get(collective, {})
    return per.get(str(nranks)) or per.get("default") or []


def choose(collective: str, nbytes: int, nranks: int, table: dict | None = None) -> str:
    """Pick the algorithm for a ``nbytes`` message on ``nranks`` ranks from the table."""
    for max_bytes, algorithm in rules(load_table() if table is None else table, collective, nranks):
        if max_bytes is None or nbytes <= max_bytes:
            return algorithm
    return FALLBACK[collective]


def native_limit(collective: str, nranks: int, forced: str | None, table: dict | None = None) -> int:
    """Largest message (bytes) of ``collective`` that runs ``native``, or -1 for none.

    ``forced`` is the algorithm forced by environment (None: the table decides;
    "native": every size). Only the table's leading run of ``native`` entries
    counts, so the answer is one threshold.
    """
    if forced not in (None, "native"):
        return -1
    limit = -1
    for max_bytes, algorithm in rules(load_table() if table is None else table, collective, nranks):
        if algorithm != "native" and forced is None:
            break
        limit = (1 << 62) if max_bytes is None else max_bytes
    return limit


def segment_bytes(kind: str = "reduce", table: dict | None = None) -> int:
    """Pipeline segment size for reducing (``"reduce"``) or copy-only (``"copy"``) rings.

    Reductions want cache-sized segments (the received segment is combined while
    hot); pure copies (all-gather, broadcast) want fewer, larger messages. Order:
    MPIEVO_SEGMENT_BYTES / MPIEVO_COPY_SEGMENT_BYTES, else the table's, else 1 MiB.
    """
    if kind not in ("reduce", "copy"):
        raise ValueError(f"expected segment kind 'reduce' or 'copy', got {kind!r}")
    name = "MPIEVO_SEGMENT_BYTES" if kind == "reduce" else "MPIEVO_COPY_SEGMENT_BYTES"
    env = os.environ.get(name)
    if env:
        value = int(env)
        if value < 1:
            raise ValueError(f"expected {name} >= 1, got {value}")
        return value
    table = load_table() if table is None else table
    key = "segment_bytes" if kind == "reduce" else "copy_segment_bytes"
    return int(table.get(key, DEFAULT_SEGMENT_BYTES))
