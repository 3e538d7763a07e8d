"""Algorithm selection by message size, operation and node layout, from a calibration table.

The table (``tuning.json`` beside this module, written by ``mpievo bench calibrate``
on the target machine; override with ``MPIEVO_TUNING=path``) maps each collective
and layout to size thresholds: the first entry whose ``max_bytes`` is at least the
message size (or null) names the algorithm. Layouts are keyed ``"P"`` (P ranks on
one node) or ``"P/N"`` (on N nodes; mpievo.comm.nodes). A multi-node layout without
an entry takes its rank count's entry with the shared-memory algorithm replaced by
the hierarchical one. All-reduce has a second table, ``"allreduce:maxmin"``, for
floating max/min (the native path there carries its NaN handling). An algorithm can
be forced per call (``algorithm=``) or per job with ``MPIEVO_<COLLECTIVE>_ALGORITHM``
(e.g. ``MPIEVO_ALLREDUCE_ALGORITHM=shm``).

``shm`` (one node) and ``hierarchical`` (any layout) use the node's shared window,
so they serve blocking calls only; a non-blocking call that the table or the
environment sends there runs the ring instead.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

#: algorithms each collective implements; "auto" selects from the table
ALGORITHMS = {
    "allreduce": ("ring", "recursive_doubling", "native", "shm", "hierarchical"),
    "reduce_scatter": ("ring", "native", "shm"),
    "allgather": ("ring", "native", "shm", "hierarchical"),
    "broadcast": ("chain", "native", "shm", "hierarchical"),
}
#: algorithms that use the node's shared window (blocking calls only)
SHARED_WINDOW = frozenset({"shm", "hierarchical"})
#: used when the table has no entry, and for non-blocking calls the table sends to
#: a shared-window algorithm
FALLBACK = {"allreduce": "ring", "reduce_scatter": "ring", "allgather": "ring", "broadcast": "chain"}
#: the all-reduce table variant for floating max/min
MAXMIN = "maxmin"
DEFAULT_SEGMENT_BYTES = 1 << 20
DEFAULT_SHM_PIECE_BYTES = 256 << 10

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


def variant_of(collective: str, floating: bool, op: str | None) -> str | None:
    """The table variant of a call: ``MAXMIN`` for floating max/min all-reduce, else None."""
    if collective == "allreduce" and floating and op in ("max", "min"):
        return MAXMIN
    return None


def _multi_node(rule_list: list, collective: str) -> list:
    node_aware = "hierarchical" if "hierarchical" in ALGORITHMS[collective] else FALLBACK[collective]
    return [[limit, node_aware if algorithm == "shm" else algorithm] for limit, algorithm in rule_list]


def rules(table: dict, collective: str, layout, variant: str | None = None) -> list:
    """``[[max_bytes or None, algorithm], ...]`` of ``collective`` on ``layout`` (a layout
    key such as ``"4"`` or ``"8/2"``, or a rank count), for ``variant`` (None or MAXMIN):
    the variant's rules where the table has them for this layout, else the plain ones."""
    collectives = table.get("collectives", {})
    if variant:
        found = _layout_rules(collectives.get(f"{collective}:{variant}", {}), collective, str(layout))
        if found:
            return found
    return _layout_rules(collectives.get(collective, {}), collective, str(layout))


def _layout_rules(per: dict, collective: str, key: str) -> list:
    found = per.get(key)
    if found:
        return found
    if "/" in key:
        found = per.get(key.split("/")[0])
        if found:
            return _multi_node(found, collective)
    return per.get("default") or []


def choose(collective: str, nbytes: int, layout, table: dict | None = None,
           variant: str | None = None) -> str:
    """Pick the algorithm for a ``nbytes`` message on ``layout`` from the table."""
    for max_bytes, algorithm in rules(load_table() if table is None else table, collective, layout, variant):
        if max_bytes is None or nbytes <= max_bytes:
            return algorithm
    return FALLBACK[collective]


def native_limit(collective: str, layout, forced: str | None, table: dict | None = None,
                 variant: str | None = None) -> int:
    """Largest message (bytes) of ``collective`` that runs ``native``, or -1 for none.

    ``forced`` is the algorithm forced by environment (None: the table decides;
    "native": every size). Only the table's leading run of ``native`` entries
    counts, so the answer is one threshold.
    """
    if forced not in (None, "native"):
        return -1
    limit = -1
    for max_bytes, algorithm in rules(load_table() if table is None else table, collective, layout, variant):
        if algorithm != "native" and forced is None:
            break
        limit = (1 << 62) if max_bytes is None else max_bytes
    return limit


def segment_bytes(kind: str = "reduce", table: dict | None = None) -> int:
    """Pipeline segment size of reducing rings (``"reduce"``), copy-only rings
    (``"copy"``) or shared-window pieces (``"shm"``).

    Reductions want cache-sized segments (the received segment is combined while
    hot); pure copies (all-gather, broadcast) want fewer, larger messages; window
    pieces are staged and read while in cache. Order: MPIEVO_SEGMENT_BYTES /
    MPIEVO_COPY_SEGMENT_BYTES / MPIEVO_SHM_PIECE_BYTES, else the table's, else the
    defaults.
    """
    if kind not in _SEGMENT_KEYS:
        raise ValueError(f"expected segment kind in {tuple(_SEGMENT_KEYS)}, got {kind!r}")
    name, key, default = _SEGMENT_KEYS[kind]
    env = os.environ.get(name)
    if env:
        value = int(env)
        if value < 1:
            raise ValueError(f"expected {name} >= 1, got {value}")
        return value
    table = load_table() if table is None else table
    return int(table.get(key, default))


#: segment kind -> (environment variable, table key, default)
_SEGMENT_KEYS = {
    "reduce": ("MPIEVO_SEGMENT_BYTES", "segment_bytes", DEFAULT_SEGMENT_BYTES),
    "copy": ("MPIEVO_COPY_SEGMENT_BYTES", "copy_segment_bytes", DEFAULT_SEGMENT_BYTES),
    "shm": ("MPIEVO_SHM_PIECE_BYTES", "shm_piece_bytes", DEFAULT_SHM_PIECE_BYTES),
}
