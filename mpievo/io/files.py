"""One rank's checkpoint file: the logical islands it hosts, the run state and the config.

Layout (see FORMAT.md for every attribute)::

    /                 attributes: format, format_version, mpievo_version, schema, checkpoint,
                      sequence, generation, rank, nranks, islands, created_unix,
                      config_sha256, checksum_algorithm, checksum_sha256
    /config           the run's config text (UTF-8 string); config_format, config_sha256
    /run              run-level state tree (rank 0's file only; empty elsewhere)
    /islands/<index>  one logical island's state tree; summary attributes

Every section (``config``, ``run``, ``islands/<index>``) carries ``checksum_sha256``
over its tree records; the root ``checksum_sha256`` covers the root attributes and
every section's attributes and checksum. Verifying a section therefore needs only
that section's data, and the root checksum ties the sections to the file.

Beside each file, ``<name>.sha256`` (``sha256sum -c`` format) holds the digest of the
file's bytes, which the manifest records too. Readers check it before HDF5 opens a
file: the HDF5 library can crash on damaged metadata instead of raising.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import h5py
import numpy as np

from .._version import __version__
from .atomic import atomic_path, atomic_write_bytes
from .digests import HDF5_SIGNATURE, check_file_bytes, file_sha256, read_sidecar, sidecar_path
from .errors import CorruptCheckpointError, ForeignFileError, NewerFormatError
from .rows import Reference, ReferencedRows, referenced_files
from .tree import KIND_ATTR, TreeError, canonical_attr_value, feed_record, read_tree, write_tree

FORMAT_NAME = "mpievo-checkpoint"
#: the newest format this mpievo writes and reads; files without incremental rows are
#: written as version 1 (readable by older mpievo)
FORMAT_VERSION = 2
#: the version of a file with incremental rows (FORMAT.md, "Incremental rows")
INCREMENTAL_FORMAT_VERSION = 2
CHECKSUM_ATTR = "checksum_sha256"
SCHEMA_SUMMARY = (
    "mpievo checkpoint, one file per writing rank. /config: run config text (attrs "
    "config_format, config_sha256). /run: run-level state (rank 0's file). "
    "/islands/<index>: one logical island's state (island counters; archive genomes, "
    "fitness, ids, births, origins; algorithm state). Every node has mpievo_kind (dict, list, "
    "tuple, array, numpy_scalar, int, bigint, float, bool, complex, str, bytes, none); "
    "mpievo_storage/mpievo_dtype mark non-native encodings. Sections and the root carry "
    "checksum_sha256; full description in mpievo/io/FORMAT.md."
)
_REQUIRED_ROOT_ATTRS = ("format_version", "checkpoint", "sequence", "generation", "rank",
                        "nranks", "islands", "config_sha256", CHECKSUM_ATTR)


@dataclass(frozen=True)
class FileHeader:
    """What a checkpoint file says about itself (root and section attributes; no data).

    Example::

        header = read_header(path)             # reads attributes only, no data
        header.generation, header.rank, header.nranks, header.islands
    """

    path: Path
    format_version: int
    mpievo_version: str
    checkpoint: str
    sequence: int
    generation: int
    rank: int
    nranks: int
    islands: tuple[int, ...]
    created_unix: float
    config_sha256: str
    checksum_sha256: str
    #: section path ("config", "run", "islands/3") -> its stored checksum
    sections: dict[str, str] = field(repr=False)
    #: island index -> summary attributes (generation, evaluations, population_size, best_fitness)
    island_summaries: dict[int, dict] = field(repr=False)
    #: earlier files this one reads rows from (incremental checkpoints), relative to the
    #: checkpoint directory, with the digests they had when written
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class WrittenFile:
    """A checkpoint file just written: its header and the digest of its bytes.

    Example::

        written = write_checkpoint_file(path, checkpoint="ckpt-1", sequence=1, generation=10, rank=0,
                                        nranks=1, islands={0: state}, run_state=None,
                                        config_text="", config_format="toml")
        written.file_sha256, written.size_bytes, written.header.generation
    """

    header: FileHeader
    #: SHA-256 of the whole file's bytes (also in the ``.sha256`` sidecar)
    file_sha256: str
    size_bytes: int


@dataclass(frozen=True)
class FileContents:
    """Verified data read from one checkpoint file.

    Example::

        contents = read_checkpoint_file(path, islands=[0])
        contents.header.generation, contents.islands[0], contents.config_text
    """

    header: FileHeader
    islands: dict[int, dict]
    run_state: dict | None
    config_text: str | None
    config_format: str | None


def write_checkpoint_file(
    path: str | Path,
    *,
    checkpoint: str,
    sequence: int,
    generation: int,
    rank: int,
    nranks: int,
    islands: Mapping[int, Mapping[str, Any]],
    run_state: Mapping[str, Any] | None,
    config_text: str,
    config_format: str,
    created_unix: float | None = None,
) -> WrittenFile:
    """Write one rank's checkpoint file atomically, then its ``.sha256`` sidecar.

    Args:
        path: the final file name; a temporary file beside it is written first.
        checkpoint, sequence, generation: identify the checkpoint the file belongs to.
        rank, nranks: the writing rank and the number of ranks writing this checkpoint.
        islands: logical island index -> the island's state tree.
        run_state: run-level state tree (None stores an empty dict).
        config_text, config_format: the run's config and its format ("toml", "json").
        created_unix: time stamp to record (default: now).

    Returns:
        the file's header, the SHA-256 of its bytes and its size.

    Raises:
        TreeError: a state tree holds an unsupported value (nothing is left on disk).
        ValueError: an island index that is not a non-negative int.
        OSError: the file system refused the write (nothing is left on disk).

    Example::

        write_checkpoint_file("rank-0.h5", checkpoint="ckpt-1", sequence=1, generation=10, rank=0, nranks=1,
                              islands={0: island.state_dict()}, run_state={"generation": 10},
                              config_text=Path("job.toml").read_text(), config_format="toml")
    """
    path = Path(path)
    indices = _island_indices(islands)
    referenced = [plan for state in islands.values() for plan in _referenced_rows(state)]
    root_attrs = {
        "format": FORMAT_NAME,
        "format_version": INCREMENTAL_FORMAT_VERSION if referenced else 1,
        "mpievo_version": __version__,
        "schema": SCHEMA_SUMMARY,
        "checkpoint": checkpoint,
        "sequence": int(sequence),
        "generation": int(generation),
        "rank": int(rank),
        "nranks": int(nranks),
        "islands": np.asarray(indices, dtype=np.int64),
        "created_unix": float(time.time() if created_unix is None else created_unix),
        "config_sha256": hashlib.sha256(config_text.encode("utf-8")).hexdigest(),
        "checksum_algorithm": "sha256",
    }
    references = {ref.path: ref for plan in referenced for ref in plan.references()}
    if references:
        root_attrs["references"] = json.dumps([asdict(references[k]) for k in sorted(references)])
    with atomic_path(path) as temp:
        # No HDF5 file locking: every file has one writer (its temporary name is private)
        # and readers never race it, while flock() fails on some parallel file systems.
        with h5py.File(temp, "w", libver="earliest", locking=False) as handle:
            sections = {}
            sections["config"] = _write_section(handle, "config", config_text, {
                "config_format": config_format, "config_sha256": root_attrs["config_sha256"]})
            sections["run"] = _write_section(handle, "run", dict(run_state or {}), {})
            container = handle.create_group("islands")
            for index in indices:
                state = islands[index]
                if not isinstance(state, Mapping):
                    raise TreeError(f"expected island {index}'s state to be a dict, got {type(state).__name__}")
                summary = {"island_index": index, **island_summary(state)}
                sections[f"islands/{index}"] = _write_section(container, str(index), dict(state), summary)
            for key, value in root_attrs.items():
                handle.attrs[key] = value
            # Checksum the attributes as h5py hands them back, exactly as a reader will.
            root = _root_checksum(dict(handle.attrs), {p: dict(handle[p].attrs) for p in sections})
            handle.attrs[CHECKSUM_ATTR] = root
            handle.flush()
        whole = file_sha256(temp)
    atomic_write_bytes(sidecar_path(path), f"{whole}  {path.name}\n".encode())
    return WrittenFile(read_header(path), whole, path.stat().st_size)


#: where an island's summary values live in its state tree: at the top level of a plain
#: tree, or where mpievo's engine keeps them (``island/...`` counters, ``archive/fitness``)
SUMMARY_SOURCES = {
    "generation": (("generation",), ("island", "generation")),
    "evaluations": (("evaluations",), ("island", "evaluations")),
    "fitness": (("fitness",), ("archive", "fitness")),
}


def island_summary(state: Mapping[str, Any]) -> dict:
    """Summary attributes for an island: generation, evaluations, population size, best fitness.

    Taken from the first of ``SUMMARY_SOURCES`` present in ``state`` (fitness:
    minimisation, one row per member; a 2-D fitness gives the per-objective best).
    """
    summary: dict[str, Any] = {}
    for key in ("generation", "evaluations"):
        value = _first_present(state, SUMMARY_SOURCES[key])
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            summary[key] = int(value)
    fitness = _first_present(state, SUMMARY_SOURCES["fitness"])
    if isinstance(fitness, np.ndarray) and fitness.ndim in (1, 2) and fitness.dtype.kind in "iuf":
        summary["population_size"] = int(fitness.shape[0])
        if fitness.shape[0] > 0:
            # fmin ignores NaN (a failed evaluation) unless every value is NaN.
            best = np.fmin.reduce(fitness.astype(np.float64), axis=0)
            summary["best_fitness"] = best
    return summary


def _first_present(state: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> Any:
    """The value at the first of ``paths`` (key sequences) found in ``state``, or None."""
    for path in paths:
        node: Any = state
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def read_header(path: str | Path) -> FileHeader:
    """Open ``path`` and return its header, after checking it is a readable mpievo file.

    The root checksum is checked against the stored attributes (cheap); section data is
    not read. The HDF5 library can crash on damaged metadata: where the file's digest is
    known (manifest, sidecar), call ``check_file_bytes`` first, as the loader does.

    Raises:
        ForeignFileError: not an HDF5 file, or an HDF5 file that is not an mpievo checkpoint.
        NewerFormatError: written in a format version newer than FORMAT_VERSION.
        CorruptCheckpointError: truncated, unreadable, or failing the root checksum.
        FileNotFoundError: no such file.

    Example::

        read_header(path).island_summaries      # per island: best fitness, evaluations, ...; no data read
    """
    path = Path(path)
    with _OpenCheckpoint(path) as handle:
        return _header(handle, path)


def read_checkpoint_file(
    path: str | Path,
    islands: Iterable[int] | None = None,
    *,
    with_run_state: bool = True,
    with_config: bool = True,
) -> FileContents:
    """Read and verify the requested sections of one checkpoint file.

    Args:
        path: the file.
        islands: the logical islands to read (None: every island in the file).
        with_run_state, with_config: also read (and verify) the run state / config.

    Returns:
        the header and the verified data; the run state / config are None when not read.

    Raises:
        CorruptCheckpointError, ForeignFileError, NewerFormatError: as read_header, or a
            section whose data does not match its checksum.
        KeyError: a requested island the file does not hold.

    Example::

        contents = read_checkpoint_file("ckpt/ckpt-000001-g000000010/rank-00000-of-00001.h5", islands=[0])
        contents.islands[0]                     # island 0's state tree
    """
    path = Path(path)
    with _OpenCheckpoint(path) as handle:
        header = _header(handle, path)
        wanted = header.islands if islands is None else tuple(int(i) for i in islands)
        missing = sorted(set(wanted) - set(header.islands))
        if missing:
            raise KeyError(f"expected islands held by {path} ({list(header.islands)}), got {missing}")
        check_references(path, header.references)
        states = {i: _read_section(handle, f"islands/{i}", header, path) for i in wanted}
        run_state = _read_section(handle, "run", header, path) if with_run_state else None
        config_text = _read_section(handle, "config", header, path) if with_config else None
        config_format = canonical_attr_value(handle["config"].attrs.get("config_format")) if with_config else None
    return FileContents(header, states, run_state, config_text, config_format)


def check_references(path: str | Path, references) -> None:
    """Check the bytes of every earlier file ``path`` reads rows from, before HDF5 opens
    them (files named relative to the checkpoint directory, ``path``'s grandparent).

    Raises:
        CorruptCheckpointError: a referenced file missing, of another size or digest.
        ForeignFileError: a referenced file replaced by one that is not HDF5.

    Example::

        header = read_header("ckpt/ckpt-000002-g000000020/rank-00000-of-00001.h5")
        check_references(header.path, header.references)   # raises naming a bad earlier file
    """
    root = Path(path).parent.parent
    for ref in references:
        target = root / ref.path
        try:
            check_file_bytes(target, ref.file_sha256, ref.size_bytes)
        except FileNotFoundError:
            raise CorruptCheckpointError(f"{path}: reads rows from {target}, which is missing", target) from None
        except (CorruptCheckpointError, ForeignFileError) as err:
            raise type(err)(f"{path}: reads rows from a damaged file: {err}", target) from None


def verify_file(path: str | Path) -> FileHeader:
    """Check ``path``'s bytes against its ``.sha256`` sidecar (when there is one), then read
    every section and check all checksums; return the header.

    Raises:
        CorruptCheckpointError, ForeignFileError, NewerFormatError: see read_checkpoint_file
            and check_file_bytes.

    Example::

        header = verify_file(path)              # reads and checks every section's checksum
    """
    if sidecar_path(path).exists():
        check_file_bytes(path, read_sidecar(path))
    return read_checkpoint_file(path).header


# ---------------------------------------------------------------- helpers


def _island_indices(islands: Mapping[int, Any]) -> list[int]:
    indices = []
    for key in islands:
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key < 0:
            raise ValueError(f"expected non-negative int island indices, got {key!r}")
        indices.append(int(key))
    return sorted(indices)


def _write_section(parent: h5py.Group, name: str, value: Any, attrs: dict) -> str:
    digest = hashlib.sha256()
    write_tree(parent, name, value, digest)
    checksum = digest.hexdigest()
    node = parent[name]
    for key, val in attrs.items():
        node.attrs[key] = val
    node.attrs[CHECKSUM_ATTR] = checksum
    return checksum


def _read_section(handle: h5py.File, section: str, header: FileHeader, path: Path) -> Any:
    if section not in handle:
        raise CorruptCheckpointError(f"{path}: section /{section} is missing", path)
    digest = hashlib.sha256()
    try:
        value = read_tree(handle[section], digest)
    except (OSError, RuntimeError, TreeError, KeyError, ValueError, UnicodeDecodeError) as err:
        raise CorruptCheckpointError(f"{path}: section /{section} cannot be read ({err})", path) from err
    if digest.hexdigest() != header.sections[section]:
        raise CorruptCheckpointError(
            f"{path}: checksum mismatch in section /{section} (stored {header.sections[section][:16]}..., "
            f"computed {digest.hexdigest()[:16]}...): the file is damaged", path)
    return value


def _root_checksum(root_attrs: Mapping, section_attrs: Mapping[str, Mapping]) -> str:
    digest = hashlib.sha256()
    feed_record(digest, "/", {k: v for k, v in root_attrs.items() if k != CHECKSUM_ATTR})
    for section in sorted(section_attrs):
        attrs = dict(section_attrs[section])
        checksum = attrs.pop(CHECKSUM_ATTR, "")
        feed_record(digest, section, attrs, str(canonical_attr_value(checksum)).encode())
    return digest.hexdigest()


class _OpenCheckpoint:
    """Open a checkpoint file for reading, turning low-level failures into clear errors."""

    def __init__(self, path: Path):
        self.path = path
        self.handle: h5py.File | None = None

    def __enter__(self) -> h5py.File:
        path = self.path
        with open(path, "rb") as raw:  # FileNotFoundError propagates as is
            signature = raw.read(len(HDF5_SIGNATURE))
        if signature != HDF5_SIGNATURE:
            if HDF5_SIGNATURE.startswith(signature):  # includes an empty file
                raise CorruptCheckpointError(f"{path}: truncated ({len(signature)} bytes)", path)
            raise ForeignFileError(f"{path}: not an HDF5 file, so not an mpievo checkpoint", path)
        try:
            self.handle = h5py.File(path, "r", locking=False)
        except OSError as err:
            raise CorruptCheckpointError(f"{path}: cannot be opened, truncated or damaged ({err})", path) from err
        return self.handle

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            try:
                self.handle.close()
            except OSError:
                pass  # closing a damaged file can fail; the original error matters


def _header(handle: h5py.File, path: Path) -> FileHeader:
    try:
        attrs = {k: canonical_attr_value(handle.attrs[k]) for k in handle.attrs}
    except (OSError, RuntimeError, KeyError, UnicodeDecodeError) as err:
        raise CorruptCheckpointError(f"{path}: root attributes cannot be read ({err})", path) from err
    if attrs.get("format") != FORMAT_NAME:
        raise ForeignFileError(
            f"{path}: HDF5 file without format={FORMAT_NAME!r} (got {attrs.get('format')!r}): "
            "not an mpievo checkpoint", path)
    version = attrs.get("format_version")
    if not isinstance(version, int):
        raise CorruptCheckpointError(f"{path}: expected an int format_version, got {version!r}", path)
    if version > FORMAT_VERSION:
        raise NewerFormatError(
            f"{path}: format version {version} (written by mpievo {attrs.get('mpievo_version')}) is newer "
            f"than this mpievo {__version__} reads (up to {FORMAT_VERSION}); upgrade mpievo to resume", path)
    missing = [k for k in _REQUIRED_ROOT_ATTRS if k not in attrs]
    if missing:
        raise CorruptCheckpointError(f"{path}: root attributes missing: {missing}", path)
    islands = tuple(int(i) for i in attrs["islands"])
    section_paths = ["config", "run", *(f"islands/{i}" for i in islands)]
    section_attrs = {}
    for section in section_paths:
        try:
            section_attrs[section] = {k: canonical_attr_value(v) for k, v in handle[section].attrs.items()}
        except (KeyError, OSError, RuntimeError, UnicodeDecodeError) as err:
            raise CorruptCheckpointError(f"{path}: section /{section} is missing or unreadable ({err})", path) from err
    if _root_checksum(attrs, section_attrs) != attrs[CHECKSUM_ATTR]:
        raise CorruptCheckpointError(f"{path}: root checksum mismatch: the file's attributes are damaged", path)
    return FileHeader(
        path=path,
        format_version=version,
        mpievo_version=str(attrs.get("mpievo_version", "")),
        checkpoint=str(attrs["checkpoint"]),
        sequence=int(attrs["sequence"]),
        generation=int(attrs["generation"]),
        rank=int(attrs["rank"]),
        nranks=int(attrs["nranks"]),
        islands=islands,
        created_unix=float(attrs.get("created_unix", 0.0)),
        config_sha256=str(attrs["config_sha256"]),
        checksum_sha256=str(attrs[CHECKSUM_ATTR]),
        sections={s: str(a.get(CHECKSUM_ATTR, "")) for s, a in section_attrs.items()},
        island_summaries={
            i: {k: v for k, v in section_attrs[f"islands/{i}"].items() if k not in (CHECKSUM_ATTR, KIND_ATTR)}
            for i in islands},
        references=tuple(_references(handle, path)),
    )


def _references(handle: h5py.File, path: Path) -> list[Reference]:
    try:
        return referenced_files(handle)
    except (ValueError, KeyError, TypeError) as err:
        raise CorruptCheckpointError(f"{path}: root attribute 'references' is malformed ({err})", path) from err


def _referenced_rows(value: Any) -> list[ReferencedRows]:
    """The incremental arrays inside a state tree."""
    if isinstance(value, ReferencedRows):
        return [value]
    if isinstance(value, Mapping):
        return [plan for child in value.values() for plan in _referenced_rows(child)]
    if isinstance(value, (list, tuple)):
        return [plan for child in value for plan in _referenced_rows(child)]
    return []
