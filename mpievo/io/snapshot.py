"""What a checkpoint writes, taken from the live state trees: a consistent snapshot for a
background write, and the incremental plan of every versioned array.

An array that carries ``row_versions`` (duck-typed: :class:`mpievo.evo.archive_records.VersionedRows`,
an archive's genomes as ``state_dict(copy=False)`` hands them out) becomes a
:class:`~mpievo.io.rows.ReferencedRows` when incremental checkpoints are on and its
rows are large enough: only the rows whose versions the last checkpoint did not hold
are copied (for a background write) and written. Every other array is copied for a
background write (the run goes on changing the live ones) and passed as it is for a
write made before the run continues.

Example:
    >>> import numpy as np
    >>> from mpievo.io.rows import RowTable
    >>> tree = {"archive": {"genomes": np.zeros((2, 3))}}
    >>> snap = prepare_islands({0: tree}, RowTable(), copy=True, kept=())
    >>> snap.islands[0]["archive"]["genomes"] is tree["archive"]["genomes"]
    False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

import numpy as np

from .rows import Reference, ReferencedRows, RowSource, RowTable, plan_rows
from .tree import _encode_array

#: rows smaller than this are written whole every time (a reference costs HDF5 metadata)
MIN_ROW_BYTES = 1 << 16


@dataclass
class Snapshot:
    """The state trees to write and the incremental arrays among them.

    Example:
        >>> Snapshot({0: {}}).new_bytes
        0
    """

    islands: dict[int, dict]
    #: (island, path in its tree) -> the array's plan
    planned: dict[tuple[str, str], ReferencedRows] = field(default_factory=dict)

    @property
    def new_bytes(self) -> int:
        """Bytes of incremental arrays' rows this checkpoint writes."""
        return sum(plan.new_bytes for plan in self.planned.values())

    @property
    def referenced_bytes(self) -> int:
        """Bytes of incremental arrays' rows referenced instead of written."""
        return sum(len(plan.sources) * plan.row_bytes for plan in self.planned.values())

    def references(self) -> list[Reference]:
        """Every earlier file the snapshot's arrays read rows from."""
        found = {ref.path: ref for plan in self.planned.values() for ref in plan.references()}
        return [found[name] for name in sorted(found)]

    def rows_after(self, file: str, sequence: int, file_sha256: str, size: int) -> dict:
        """The row table once this snapshot is written as ``file`` of checkpoint ``sequence``."""
        table: dict[tuple[str, str], dict[int, RowSource]] = {}
        for key, plan in self.planned.items():
            rows = {}
            for position, version in enumerate(plan.versions.tolist()):
                source = plan.sources.get(position)
                if source is None:
                    here = plan.written[position]
                    source = RowSource(file, here.dataset, here.row, here.extent, sequence, here.sha256,
                                       file_sha256, size, here.fingerprint)
                rows[version] = source
            table[key] = rows
        return table


def prepare_islands(islands: Mapping[int, Mapping[str, Any]], table: RowTable, *, copy: bool,
                    kept: Collection[int], incremental: bool = True,
                    min_row_bytes: int = MIN_ROW_BYTES) -> Snapshot:
    """The island trees to write (see the module docstring).

    Args:
        islands: island index -> live state tree.
        table: the rows of the last published checkpoint.
        copy: take a snapshot (arrays copied, new rows only of incremental arrays).
        kept: the checkpoint numbers the manifest keeps with the new one; rows stored
            in other ones are written again.
        incremental: False: every array whole (versions ignored).
        min_row_bytes: rows below this size are written whole.
    """
    snapshot = Snapshot({})
    for index, tree in islands.items():
        if not isinstance(tree, Mapping):       # write_checkpoint_file names the problem
            snapshot.islands[index] = tree
            continue
        snapshot.islands[index] = _prepare(dict(tree), str(int(index)), "", snapshot, table, copy, kept,
                                           incremental, min_row_bytes)
    return snapshot


def copy_tree(value: Any) -> Any:
    """``value`` with every array copied (containers rebuilt, other leaves shared).

    Example:
        >>> import numpy as np
        >>> tree = {"a": [np.zeros(2)]}
        >>> copy_tree(tree)["a"][0] is tree["a"][0]
        False
    """
    if isinstance(value, dict):
        return {k: copy_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [copy_tree(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True, subok=False)
    return value


def _prepare(value, island, path, snapshot, table, copy, kept, incremental, min_row_bytes):
    if isinstance(value, dict):
        return {k: _prepare(v, island, f"{path}/{k}" if path else str(k), snapshot, table, copy, kept,
                            incremental, min_row_bytes) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_prepare(v, island, f"{path}/{i}" if path else str(i), snapshot, table, copy, kept,
                          incremental, min_row_bytes) for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if not isinstance(value, np.ndarray):
        return value
    versions = getattr(value, "row_versions", None)
    plain = np.asarray(value)       # a VersionedRows as a plain ndarray view
    if (incremental and versions is not None and plain.ndim == 2 and plain.shape[0] > 0
            and plain.shape[1] * plain.dtype.itemsize >= min_row_bytes):
        attrs, stored = _encode_array(plain, path)
        if stored.ndim == 2:
            plan = plan_rows(stored, versions, table.sources(island, path), kept, copy=copy, attrs=attrs)
            snapshot.planned[(island, path)] = plan
            return plan
    return np.array(plain, copy=True) if copy else plain
