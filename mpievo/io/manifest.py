"""The checkpoint directory's manifest and naming scheme.

``manifest.json`` lists the complete checkpoints kept (oldest first) with their files
and checksums; rank 0 rewrites it atomically only after every rank's file is on disk,
so a checkpoint named there is complete. Checkpoints live in sub-directories named
``ckpt-<sequence:06d>-g<generation:09d>`` holding ``rank-<r:05d>-of-<n:05d>.h5``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from .._version import __version__
from .atomic import atomic_write_bytes
from .errors import CorruptCheckpointError, ForeignFileError, NewerFormatError
from .rows import Reference

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "mpievo-manifest"
MANIFEST_VERSION = 1
CHECKPOINT_DIR_RE = re.compile(r"^ckpt-(\d{6,})-g(\d{9,})$")
RANK_FILE_RE = re.compile(r"^rank-(\d{5,})-of-(\d{5,})\.h5$")


@dataclass(frozen=True)
class FileEntry:
    """One rank's file of a checkpoint, as the manifest records it.

    Example::

        entry = read_manifest("ckpt")[-1]
        [(file.path, file.rank, file.size_bytes) for file in entry.files]
    """

    path: str  # relative to the checkpoint directory root
    rank: int
    islands: tuple[int, ...]
    checksum_sha256: str
    size_bytes: int
    #: SHA-256 of the file's bytes, checked before HDF5 opens it
    file_sha256: str
    #: earlier files it reads rows from (incremental checkpoints; FORMAT.md)
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class CheckpointEntry:
    """One complete checkpoint, as the manifest records it.

    Example::

        entries, problem = existing_entries("runs/a/checkpoints")
        [(entry.name, entry.generation, entry.nranks) for entry in entries]
    """

    name: str
    sequence: int
    generation: int
    created_unix: float
    nranks: int
    islands: tuple[int, ...]
    config_sha256: str
    files: tuple[FileEntry, ...]

    def file_of_island(self) -> dict[int, FileEntry]:
        """Logical island index -> the file holding it."""
        return {i: f for f in self.files for i in f.islands}

    def file_of_rank(self, rank: int) -> FileEntry:
        """The file written by ``rank``.

        Raises:
            KeyError: no file from that rank.
        """
        for entry in self.files:
            if entry.rank == rank:
                return entry
        raise KeyError(f"expected a file from rank {rank} in checkpoint {self.name}, got ranks "
                       f"{[f.rank for f in self.files]}")


def checkpoint_dir_name(sequence: int, generation: int) -> str:
    """Directory name of checkpoint number ``sequence`` taken at ``generation``."""
    return f"ckpt-{sequence:06d}-g{generation:09d}"


def rank_file_name(rank: int, nranks: int) -> str:
    """File name of ``rank``'s part of a checkpoint written by ``nranks`` ranks."""
    return f"rank-{rank:05d}-of-{nranks:05d}.h5"


def checkpoint_dirs(directory: str | Path) -> dict[int, Path]:
    """Sequence number -> checkpoint sub-directory, for every one present (complete or not)."""
    found = {}
    root = Path(directory)
    if root.is_dir():
        for child in root.iterdir():
            match = CHECKPOINT_DIR_RE.match(child.name)
            if match and child.is_dir():
                found[int(match.group(1))] = child
    return found


def read_manifest(directory: str | Path) -> list[CheckpointEntry] | None:
    """The checkpoints listed in ``directory``'s manifest, oldest first; None if there is none.

    Raises:
        CorruptCheckpointError: the manifest is not valid JSON or lacks fields.
        ForeignFileError: a JSON file that is not an mpievo manifest.
        NewerFormatError: a manifest format newer than this mpievo reads.

    Example::

        entries = read_manifest("ckpt")         # None when there is no manifest
    """
    path = Path(directory) / MANIFEST_NAME
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptCheckpointError(f"{path}: not valid JSON ({err})", path) from err
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ForeignFileError(f"{path}: expected format={MANIFEST_FORMAT!r}, got a different JSON file", path)
    version = data.get("format_version")
    if not isinstance(version, int) or version > MANIFEST_VERSION:
        raise NewerFormatError(
            f"{path}: manifest format version {version!r} is newer than this mpievo {__version__} "
            f"reads (up to {MANIFEST_VERSION}); upgrade mpievo", path)
    try:
        return [_entry_from_json(item) for item in data["checkpoints"]]
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptCheckpointError(f"{path}: malformed checkpoint list ({err!r})", path) from err


def write_manifest(directory: str | Path, entries: list[CheckpointEntry]) -> Path:
    """Atomically replace ``directory``'s manifest with ``entries`` (oldest first)."""
    path = Path(directory) / MANIFEST_NAME
    data = {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_VERSION,
        "mpievo_version": __version__,
        "latest": entries[-1].name if entries else None,
        "checkpoints": [asdict(entry) for entry in entries],
    }
    atomic_write_bytes(path, (json.dumps(data, indent=1) + "\n").encode("utf-8"))
    return path


def _entry_from_json(item: dict) -> CheckpointEntry:
    files = tuple(
        FileEntry(path=str(f["path"]), rank=int(f["rank"]), islands=tuple(int(i) for i in f["islands"]),
                  checksum_sha256=str(f["checksum_sha256"]), size_bytes=int(f["size_bytes"]),
                  file_sha256=str(f["file_sha256"]),
                  references=tuple(Reference(str(r["path"]), str(r["file_sha256"]), int(r["size_bytes"]))
                                   for r in f.get("references", ())))
        for f in item["files"])
    return CheckpointEntry(
        name=str(item["name"]), sequence=int(item["sequence"]), generation=int(item["generation"]),
        created_unix=float(item["created_unix"]), nranks=int(item["nranks"]),
        islands=tuple(int(i) for i in item["islands"]), config_sha256=str(item["config_sha256"]),
        files=files)
