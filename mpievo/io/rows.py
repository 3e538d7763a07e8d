"""Incremental checkpoints: archive rows stored once and referenced by later checkpoints.

An archive's genomes reach the checkpointer as a view that knows each row's *version*
(:class:`mpievo.evo.archive_records.VersionedRows`; equal versions are equal bytes). A
:class:`RowTable` remembers, for the rows of the last checkpoint this process
published, where each version's bytes are stored (file, dataset, row) and their
SHA-256. The next checkpoint then writes only the rows whose versions are new
(:class:`ReferencedRows`, in ``/rows/<path of the dataset>``) and stores the array
itself as an HDF5 *virtual dataset* whose rows map to those new rows or to rows of
earlier files (relative paths, resolved by HDF5 from the file's own directory), so
that ``h5py`` alone reads the whole array. A row is referenced only in a checkpoint
that the manifest keeps alongside the new one, so pruning never removes bytes a kept
checkpoint needs. See FORMAT.md, "Incremental rows".

Example:
    >>> import numpy as np
    >>> table = RowTable()
    >>> rows = np.zeros((2, 4), np.float32)
    >>> plan = plan_rows(rows, np.array([5, 6]), table.sources("3", "archive/genomes"), {1}, copy=False)
    >>> plan.new_positions.tolist()
    [0, 1]
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Collection, Mapping

import h5py
import numpy as np

#: attribute of a virtual dataset whose rows live in ``/rows/...`` of this or earlier files
ROWS_ATTR = "mpievo_rows"
#: per row: the file holding its bytes, relative to the run's checkpoint directory
ROW_FILES_ATTR = "mpievo_row_files"
#: per row: hex SHA-256 of its bytes (C order, as stored)
ROW_SHA_ATTR = "mpievo_row_sha256"
#: where a file keeps the rows it stores itself
ROWS_GROUP = "rows"
#: bytes at each end of a row that :func:`fingerprint` hashes
FINGERPRINT_BYTES = 1 << 16
#: bytes of a row written and hashed at a time
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class RowSource:
    """Where one stored row lives: file (relative to the checkpoint directory), dataset,
    row; the checkpoint it belongs to; its digest; and the file's digest and size.

    Example::

        RowSource("ckpt-000001-g000000010/rank-00000-of-00001.h5", "/rows/islands/0/archive/genomes",
                  row=3, extent=16, sequence=1, sha256=digest, file_sha256=hexdigest, file_size=size)
    """

    file: str
    dataset: str
    row: int
    #: rows of that dataset (a virtual dataset's mapping names the source's shape)
    extent: int
    sequence: int
    sha256: bytes
    file_sha256: str = ""
    file_size: int = 0
    #: :func:`fingerprint` of the row when it was written
    fingerprint: bytes = b""


@dataclass(frozen=True)
class Reference:
    """An earlier file a checkpoint file reads rows from (relative to the checkpoint
    directory), with the digest and size it had when it was written.

    Example:
        >>> Reference("ckpt-000001-g000000010/rank-00000-of-00001.h5", "ab" * 32, 1024).size_bytes
        1024
    """

    path: str
    file_sha256: str
    size_bytes: int


class RowTable:
    """Version -> :class:`RowSource` for the rows of the last published checkpoint, per
    (island, dataset path inside the island's tree).

    Example:
        >>> RowTable().sources("0", "archive/genomes")
        {}
    """

    def __init__(self):
        self._rows: dict[tuple[str, str], dict[int, RowSource]] = {}

    def sources(self, island: str, path: str) -> dict[int, RowSource]:
        """The known rows of ``island``'s array at ``path`` (version -> source)."""
        return self._rows.get((island, path), {})

    def replace(self, rows: Mapping[tuple[str, str], dict[int, RowSource]]) -> None:
        """Forget every row and remember ``rows`` (the checkpoint just published)."""
        self._rows = {key: dict(value) for key, value in rows.items()}

    def clear(self) -> None:
        """Forget every row (the next checkpoint writes them all)."""
        self._rows = {}


class ReferencedRows:
    """A 2-D array to store as new rows plus references to rows stored before.

    Attributes:
        shape, dtype: the whole array's (as stored: raw bits for bfloat16).
        attrs: the tree attributes of the node (``mpievo_kind``, storage, dtype).
        versions: each row's version.
        new_positions: the rows written into this file, ascending.
        new_rows: the bytes of those rows, ``new_rows[j]`` for ``new_positions[j]``.
        sources: row -> :class:`RowSource` for the referenced rows.

    Example:
        >>> import numpy as np
        >>> plan = plan_rows(np.zeros((2, 3)), np.array([1, 2]), {}, (), copy=True)
        >>> type(plan).__name__, plan.new_bytes
        ('ReferencedRows', 48)
    """

    def __init__(self, shape, dtype, attrs, versions, new_positions, new_rows, sources):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.attrs = dict(attrs)
        self.versions = np.asarray(versions, np.int64)
        self.new_positions = np.asarray(new_positions, np.int64)
        self.new_rows = new_rows
        self.sources = dict(sources)
        #: filled while writing: the new rows' digests and where they went
        self.written: dict[int, RowSource] = {}

    @property
    def new_bytes(self) -> int:
        """Bytes of the rows this file stores itself."""
        return int(len(self.new_positions) * self.row_bytes)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def references(self) -> list[Reference]:
        """The earlier files this array reads rows from (one entry per file)."""
        files = {}
        for source in self.sources.values():
            files[source.file] = Reference(source.file, source.file_sha256, source.file_size)
        return [files[name] for name in sorted(files)]


def plan_rows(rows: np.ndarray, versions: np.ndarray, known: Mapping[int, RowSource],
              kept: Collection[int], *, copy: bool, attrs: Mapping[str, Any] | None = None) -> ReferencedRows:
    """Which rows of ``rows`` (already in stored form) to write, which to reference.

    A row is referenced when ``known`` holds its version in a checkpoint whose number
    is in ``kept`` (one the manifest keeps with the new one). ``copy``: take a
    copy of the rows to write (a snapshot for a background write); else keep a view.

    Example:
        >>> import numpy as np
        >>> plan_rows(np.ones((3, 2)), np.array([1, 2, 3]), {}, {1}, copy=True).new_positions.tolist()
        [0, 1, 2]
    """
    versions = np.asarray(versions, np.int64)
    if rows.ndim != 2 or versions.shape != (rows.shape[0],):
        raise ValueError(f"expected (n, dim) rows and n versions, got {rows.shape} and {versions.shape}")
    sources = {}
    for position, version in enumerate(versions.tolist()):
        source = known.get(version)
        # the fingerprint guards against a row changed without a new version (a writer
        # that bypassed the archive): such a row is written again
        if source is not None and source.sequence in kept and fingerprint(rows[position]) == source.fingerprint:
            sources[position] = source
    new = np.array([p for p in range(rows.shape[0]) if p not in sources], np.int64)
    contiguous = len(new) == rows.shape[0]
    if copy:
        picked = np.array(rows, copy=True) if contiguous else rows[new]
    else:
        picked = rows if contiguous else _Rows(rows, new)
    return ReferencedRows(rows.shape, rows.dtype, attrs or {}, versions, new, picked, sources)


class _Rows:
    """Rows ``positions`` of ``rows`` without a copy (``[j]`` is row ``positions[j]``)."""

    def __init__(self, rows: np.ndarray, positions: np.ndarray):
        self.rows, self.positions = rows, positions

    def __getitem__(self, j: int) -> np.ndarray:
        return self.rows[self.positions[j]]


def write_rows(parent: h5py.Group, name: str, value: ReferencedRows) -> bytes:
    """Store ``value`` as ``parent[name]`` (a virtual dataset) and its new rows under
    ``/rows``; returns the payload for the checksum record (the row digests in order).

    Example::

        payload = write_rows(handle["islands/0/archive"], "genomes", plan)   # what write_tree does
    """
    handle = parent.file
    node_path = f"{parent.name.rstrip('/')}/{name}"
    stored_path = f"/{ROWS_GROUP}{node_path}"
    count = len(value.new_positions)
    digests: dict[int, bytes] = {}
    if count:
        offset = _allocate(handle, stored_path, (count, *value.shape[1:]), value.dtype)
        fd = os.open(handle.filename, os.O_WRONLY)
        try:
            for j, position in enumerate(value.new_positions.tolist()):
                digests[position] = _write_row(fd, offset + j * value.row_bytes, np.asarray(value.new_rows[j]))
                value.written[position] = RowSource(".", stored_path, j, count, -1, digests[position],
                                                    fingerprint=fingerprint(value.new_rows[j]))
        finally:
            os.close(fd)
    for position, source in value.sources.items():
        digests[position] = source.sha256
    layout = h5py.VirtualLayout(shape=value.shape, dtype=value.dtype)
    here = os.path.dirname(os.path.abspath(handle.filename))
    files = []
    for position in range(value.shape[0]):
        source = value.written.get(position) or value.sources[position]
        where = "." if source.file == "." else _relative_to(source.file, here)
        layout[position] = h5py.VirtualSource(where, source.dataset, (source.extent, *value.shape[1:]))[source.row]
        files.append(source.file)
    dataset = parent.create_virtual_dataset(name, layout, fillvalue=None)
    for key, val in value.attrs.items():
        dataset.attrs[key] = val
    dataset.attrs[ROWS_ATTR] = "referenced"
    dataset.attrs[ROW_FILES_ATTR] = np.array(files, dtype=h5py.string_dtype("utf-8"))
    dataset.attrs[ROW_SHA_ATTR] = np.array([digests[p].hex() for p in range(value.shape[0])],
                                           dtype=h5py.string_dtype("utf-8"))
    return b"".join(digests[p] for p in range(value.shape[0]))


def read_rows_payload(dataset: h5py.Dataset, data: np.ndarray, path: str) -> bytes:
    """The checksum payload of a referenced array read back (its rows' digests), after
    checking each row against the digest stored with it.

    Raises:
        ValueError: a row whose bytes differ, naming the file it is stored in.

    Example::

        dataset = handle["islands/0/archive/genomes"]
        payload = read_rows_payload(dataset, dataset[...], "0/archive/genomes")   # what read_tree does
    """
    stored = [str(v.decode() if isinstance(v, bytes) else v) for v in dataset.attrs[ROW_SHA_ATTR]]
    files = [str(v.decode() if isinstance(v, bytes) else v) for v in dataset.attrs[ROW_FILES_ATTR]]
    data = np.ascontiguousarray(data)
    if len(stored) != data.shape[0] or len(files) != data.shape[0]:
        raise ValueError(f"{path}: {data.shape[0]} rows but {len(stored)} digests and {len(files)} file names")
    digests = []
    for i in range(data.shape[0]):
        digest = hashlib.sha256(memoryview(data[i].reshape(-1).view(np.uint8))).digest()
        if digest.hex() != stored[i]:
            where = "this file" if files[i] == "." else files[i]
            raise ValueError(f"{path}: row {i} (stored in {where}) differs from the digest recorded when it "
                             "was written: that file is missing, damaged or replaced")
        digests.append(digest)
    return b"".join(digests)


def fingerprint(row) -> bytes:
    """SHA-256 of a row's length and of its first and last ``FINGERPRINT_BYTES`` bytes: a
    cheap check that a row whose version did not change still holds the bytes written.

    Example:
        >>> import numpy as np
        >>> row = np.zeros(10**6, np.float32)
        >>> before = fingerprint(row); row[-1] = 1
        >>> fingerprint(row) == before
        False
    """
    data = memoryview(np.ascontiguousarray(row).reshape(-1).view(np.uint8))
    digest = hashlib.sha256(len(data).to_bytes(8, "little"))
    digest.update(data[:FINGERPRINT_BYTES])
    digest.update(data[max(FINGERPRINT_BYTES, len(data) - FINGERPRINT_BYTES):])
    return digest.digest()


def referenced_files(handle: h5py.File) -> list[Reference]:
    """The earlier files a checkpoint file reads rows from (its root ``references``).

    Example::

        with h5py.File(path, "r") as handle:
            [ref.path for ref in referenced_files(handle)]
    """
    raw = handle.attrs.get("references")
    if raw is None:
        return []
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return [Reference(str(r["path"]), str(r["file_sha256"]), int(r["size_bytes"])) for r in json.loads(text)]


def _allocate(handle: h5py.File, path: str, shape: tuple, dtype: np.dtype) -> int:
    """Create ``path`` as a contiguous dataset whose bytes HDF5 allocates now and never
    fills; their offset in the file. The rows are then written there with ``os.pwrite``:
    h5py holds the GIL through a write, ``pwrite`` (and hashing) release it, and HDF5
    neither copies nor converts the bytes."""
    parent, name = path.rsplit("/", 1)
    group = handle.require_group(parent)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    dataset = h5py.h5d.create(group.id, name.encode(), h5py.h5t.py_create(np.dtype(dtype)),
                              h5py.h5s.create_simple(tuple(int(n) for n in shape)), dcpl=dcpl)
    handle.flush()      # the allocation is on disk before other writes reach the file
    offset = dataset.get_offset()
    if offset is None:
        raise OSError(f"HDF5 did not allocate {path} in {handle.filename}")
    return int(offset)


def _write_row(fd: int, offset: int, row: np.ndarray) -> bytes:
    """``row``'s bytes at ``offset`` of the file ``fd`` in chunks; the SHA-256 of its bytes."""
    data = memoryview(np.ascontiguousarray(row).reshape(-1).view(np.uint8))
    digest = hashlib.sha256()
    for start in range(0, len(data), CHUNK_BYTES):
        piece = data[start:start + CHUNK_BYTES]
        done = 0
        while done < len(piece):            # pwrite may write less than asked
            done += os.pwrite(fd, piece[done:], offset + start + done)
        digest.update(piece)                # both release the GIL
    return digest.digest()


def _relative_to(file: str, here: str) -> str:
    """``file`` (relative to the checkpoint directory) relative to the directory ``here``
    of the file being written (its parent is the checkpoint directory)."""
    root = os.path.dirname(here)
    return os.path.relpath(os.path.join(root, file), here)
