"""Finding and loading the latest complete, verified checkpoint, on any number of ranks."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from .config_compat import parse_config
from .errors import CheckpointError, CheckpointWarning, CorruptCheckpointError, NoCheckpointError
from .files import check_file_bytes, check_references, read_checkpoint_file, read_header, read_sidecar, verify_file
from .manifest import (MANIFEST_NAME, RANK_FILE_RE, CheckpointEntry, FileEntry, checkpoint_dirs,
                       read_manifest)
from .serial import resolve_comm

#: what ``load_latest`` accepts as the islands to load
IslandSelection = Iterable[int] | Callable[[tuple[int, ...]], Iterable[int]] | None


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the requested islands, run-level state and the saved config.

    Example::

        ckpt = load_latest("runs/a/checkpoints")
        ckpt.generation, ckpt.island_indices, ckpt.written_by_ranks
        island.load_state_dict(ckpt.islands[0])
    """

    name: str
    sequence: int
    generation: int
    directory: Path
    created_unix: float
    #: the requested logical islands, index -> state tree
    islands: dict[int, dict]
    #: every logical island the checkpoint holds
    island_indices: tuple[int, ...]
    #: how many ranks wrote it (it can be loaded on any number)
    written_by_ranks: int
    run_state: dict
    config_text: str
    config_format: str
    config_sha256: str
    mpievo_version: str
    format_version: int
    #: one message per newer checkpoint that was unusable (naming the bad file)
    skipped: tuple[str, ...] = ()
    entry: CheckpointEntry | None = field(default=None, repr=False)

    @property
    def config(self) -> dict:
        """The saved config, parsed.

        Raises:
            ValueError: the stored text does not parse (see parse_config).
        """
        return parse_config(self.config_text, self.config_format)


def load_latest(directory: str | Path, islands: IslandSelection = None, *, comm: Any = None) -> Checkpoint:
    """Load the newest complete checkpoint whose needed files verify, from any number of ranks.

    Collective when ``comm`` is given: every rank calls it; rank 0 lists the candidates
    (manifest order, newest first), each rank reads and verifies the islands it asked
    for plus rank 0's file (run state, config) -- each file's bytes against the digest
    recorded at writing before HDF5 opens it, then the checksums of the sections read --
    and, shared out among the ranks, the bytes of every other file of the checkpoint
    (a resume reading only rank 0's file first still picks a checkpoint that is whole),
    and the ranks agree: when any rank
    finds a problem, all of them move to the previous checkpoint. A bad checkpoint is
    never modified; it is reported in a CheckpointWarning (on rank 0) and in
    ``Checkpoint.skipped``.

    Args:
        directory: the run's checkpoint directory.
        islands: the logical islands this rank needs: None (all), indices, or a callable
            receiving every index the checkpoint holds and returning the ones wanted
            (for placing islands on a different number of ranks than wrote them).
        comm: an mpievo.comm.Communicator, or None for one rank.

    Returns:
        the loaded checkpoint (``islands`` holds only the requested ones).

    Raises:
        NoCheckpointError: no checkpoint at all, or none usable (every problem named).
        ValueError: requested islands that the checkpoint does not hold (on every rank).

    Example::

        ckpt = load_latest("runs/a/checkpoints", islands=[0, 1])   # or comm=comm on every rank
        ckpt.generation, sorted(ckpt.islands)
    """
    comm = resolve_comm(comm)
    directory = Path(directory)
    listing = comm.bcast_object(_list_candidates_safely(directory) if comm.rank == 0 else None)
    if "error" in listing:
        raise NoCheckpointError(listing["error"], directory)
    skipped = list(listing["notes"])
    if comm.rank == 0:
        for note in skipped:
            warnings.warn(note, CheckpointWarning, stacklevel=2)
    for entry in listing["entries"]:
        loaded, problem = _try_load(directory, entry, islands, comm.rank, comm.size)
        problems = comm.allgather_object(problem)
        usage = [p[1] for p in problems if p is not None and p[0] == "usage"]
        if usage:
            raise ValueError("; ".join(dict.fromkeys(usage)))
        bad = [p[1] for p in problems if p is not None]
        if not bad:
            return _with_skipped(loaded, skipped)
        message = f"checkpoint {entry.name} is unusable: {'; '.join(dict.fromkeys(bad))}"
        skipped.append(message)
        if comm.rank == 0:
            warnings.warn(message + "; trying an older checkpoint", CheckpointWarning, stacklevel=2)
    detail = "; ".join(skipped) if skipped else "none is listed"
    raise NoCheckpointError(f"no usable checkpoint in {directory}: {detail}", directory)


def existing_entries(directory: str | Path) -> tuple[list[CheckpointEntry], str | None]:
    """The complete checkpoints in ``directory``, oldest first, and a manifest problem if any.

    From the manifest when it is readable; else (missing, damaged, foreign) from a scan
    of the checkpoint sub-directories, keeping those whose every rank file is present
    with a valid header. The second value describes a damaged manifest (None when fine
    or absent).

    Example::

        entries, problem = existing_entries("ckpt")   # problem: why the manifest was not used, or None
    """
    try:
        entries = read_manifest(directory)
    except CheckpointError as err:
        return scan_entries(directory), f"manifest unusable: {err}"
    if entries is None:
        return scan_entries(directory), None
    return entries, None


def scan_entries(directory: str | Path) -> list[CheckpointEntry]:
    """Checkpoints found by listing sub-directories (for a missing or damaged manifest).

    Example::

        [entry.name for entry in scan_entries("ckpt")]    # found by listing, without the manifest
    """
    entries = []
    for sequence, folder in sorted(checkpoint_dirs(directory).items()):
        entry = _entry_from_files(folder)
        if entry is not None and entry.sequence == sequence:
            entries.append(entry)
    return entries


def verify_checkpoint(directory: str | Path, entry: CheckpointEntry) -> list[str]:
    """Read every file of ``entry`` in full and return the problems found (empty: verified).

    Example::

        for entry in read_manifest("ckpt"):
            print(entry.name, verify_checkpoint("ckpt", entry) or "verified")
    """
    return [problem for problem in verify_checkpoint_files(directory, entry).values() if problem]


def verify_checkpoint_files(directory: str | Path, entry: CheckpointEntry, *,
                            read_data: bool = True) -> dict[str, str | None]:
    """Each file of ``entry`` (path relative to ``directory``) -> its problem, or None when it verifies.

    ``read_data``: a file's bytes are checked against the recorded digest before HDF5
    opens it, then every section's checksum. Without: its size, and its header against
    the manifest (checksum, checkpoint name, islands) -- a quick look that opens a file
    whose damage lies only in its data.

    Example::

        verify_checkpoint_files("ckpt", entry, read_data=False)   # {'ckpt-.../rank-00000-of-00001.h5': None}
    """
    outcome: dict[str, str | None] = {}
    for file_entry in entry.files:
        path = Path(directory) / file_entry.path
        try:
            if read_data:
                check_file_bytes(path, file_entry.file_sha256, file_entry.size_bytes)
                header = verify_file(path)
            elif path.stat().st_size != file_entry.size_bytes:
                raise CorruptCheckpointError(f"{path}: {path.stat().st_size} bytes, {file_entry.size_bytes} "
                                             "were written (truncated or replaced)", path)
            else:
                _check_reference_sizes(path, file_entry)
                header = read_header(path)
            _check_against_entry(path, file_entry, entry, header)
            outcome[file_entry.path] = None
        except FileNotFoundError:
            outcome[file_entry.path] = f"{path}: missing (named by the manifest)"
        except CheckpointError as err:
            outcome[file_entry.path] = str(err)
    return outcome


# ---------------------------------------------------------------- helpers


def _list_candidates_safely(directory: Path) -> dict:
    """Rank 0: ``_list_candidates``, with any failure turned into an answer for every rank."""
    try:
        return _list_candidates(directory)
    except Exception as err:  # the other ranks wait in bcast_object for this answer
        return {"error": f"cannot list checkpoints in {directory}: {type(err).__name__}: {err}"}


def _list_candidates(directory: Path) -> dict:
    """Rank 0: the checkpoints to try, newest first, and notes about the manifest."""
    if not directory.is_dir():
        return {"error": f"no checkpoint directory {directory}"}
    entries, problem = existing_entries(directory)
    notes = [] if problem is None else [problem + "; using the checkpoint files found instead"]
    if not entries:
        reason = problem or f"no {MANIFEST_NAME} and no complete checkpoint sub-directory"
        return {"error": f"no checkpoint in {directory} ({reason})"}
    return {"entries": list(reversed(entries)), "notes": notes}


def _try_load(directory: Path, entry: CheckpointEntry, selection: IslandSelection, rank: int = 0,
              size: int = 1):
    """Return (Checkpoint, None) or (None, (kind, message)) with kind "usage" or "bad".

    Besides the files it reads, this rank checks the bytes of every ``size``-th other file
    of the checkpoint (from ``rank`` on): the ranks together verify all of them, so that a
    checkpoint is chosen only when it is whole, whichever islands this resume reads."""
    try:
        wanted = _resolve_selection(selection, entry)
    except (TypeError, ValueError) as err:
        return None, ("usage", str(err))
    try:
        loaded = _load_entry(directory, entry, wanted)
        holder = entry.file_of_island()
        read = {entry.file_of_rank(0).path, *(holder[i].path for i in wanted)}
        for file_entry in entry.files[rank::size]:
            if file_entry.path not in read:
                check_file_bytes(directory / file_entry.path, file_entry.file_sha256, file_entry.size_bytes)
                check_references(directory / file_entry.path, file_entry.references)
        return loaded, None
    except FileNotFoundError as err:
        return None, ("bad", f"{err.filename}: missing (named by the manifest)")
    except CheckpointError as err:
        return None, ("bad", str(err))
    except Exception as err:  # anything else must still reach the other ranks
        return None, ("bad", f"{type(err).__name__}: {err}")


def _resolve_selection(selection: IslandSelection, entry: CheckpointEntry) -> tuple[int, ...]:
    if selection is None:
        return entry.islands
    chosen = selection(entry.islands) if callable(selection) else selection
    wanted = tuple(sorted({int(i) for i in chosen}))
    missing = [i for i in wanted if i not in set(entry.islands)]
    if missing:
        raise ValueError(f"expected islands held by checkpoint {entry.name} ({list(entry.islands)}), "
                         f"got requests for {missing}")
    return wanted


def _load_entry(directory: Path, entry: CheckpointEntry, wanted: tuple[int, ...]) -> Checkpoint:
    holder = entry.file_of_island()
    needed: dict[FileEntry, list[int]] = {entry.file_of_rank(0): []}
    for island in wanted:
        needed.setdefault(holder[island], []).append(island)
    states: dict[int, dict] = {}
    first = None
    for file_entry, indices in sorted(needed.items(), key=lambda kv: kv[0].rank):
        path = directory / file_entry.path
        is_first = file_entry.rank == 0
        check_file_bytes(path, file_entry.file_sha256, file_entry.size_bytes)
        contents = read_checkpoint_file(path, indices, with_run_state=is_first, with_config=is_first)
        _check_against_entry(path, file_entry, entry, contents.header)
        states.update(contents.islands)
        if is_first:
            first = contents
    return Checkpoint(
        name=entry.name, sequence=entry.sequence, generation=entry.generation,
        directory=directory / entry.name, created_unix=entry.created_unix,
        islands={i: states[i] for i in wanted}, island_indices=entry.islands,
        written_by_ranks=entry.nranks, run_state=first.run_state, config_text=first.config_text,
        config_format=first.config_format, config_sha256=first.header.config_sha256,
        mpievo_version=first.header.mpievo_version, format_version=first.header.format_version,
        entry=entry)


def _check_reference_sizes(path: Path, file_entry: FileEntry) -> None:
    """The quick look at the earlier files ``path`` reads rows from: present, same size."""
    for ref in file_entry.references:
        target = path.parent.parent / ref.path
        try:
            size = target.stat().st_size
        except FileNotFoundError:
            raise CorruptCheckpointError(f"{path}: reads rows from {target}, which is missing", target) from None
        if size != ref.size_bytes:
            raise CorruptCheckpointError(f"{path}: reads rows from {target}, {size} bytes where "
                                         f"{ref.size_bytes} were written (truncated or replaced)", target)


def _check_against_entry(path: Path, file_entry: FileEntry, entry: CheckpointEntry, header) -> None:
    if header.checksum_sha256 != file_entry.checksum_sha256 or header.checkpoint != entry.name:
        raise CorruptCheckpointError(
            f"{path}: checksum or checkpoint name differ from the manifest's (a file from another "
            "checkpoint or run)", path)
    if tuple(header.islands) != tuple(file_entry.islands):
        raise CorruptCheckpointError(
            f"{path}: holds islands {list(header.islands)}, the manifest recorded {list(file_entry.islands)}", path)
    if tuple(header.references) != tuple(file_entry.references):
        raise CorruptCheckpointError(f"{path}: reads rows from other files than the manifest recorded", path)


def _entry_from_files(folder: Path) -> CheckpointEntry | None:
    headers, digests = [], {}
    for path in sorted(folder.iterdir()):
        if RANK_FILE_RE.match(path.name):
            try:
                digests[path.name] = read_sidecar(path)
                check_file_bytes(path, digests[path.name])
                headers.append(read_header(path))
            except Exception:  # any unverifiable rank file makes the directory incomplete
                return None
    if not headers:
        return None
    nranks = headers[0].nranks
    consistent = all(h.nranks == nranks and h.checkpoint == folder.name and
                     h.sequence == headers[0].sequence for h in headers)
    if not consistent or sorted(h.rank for h in headers) != list(range(nranks)):
        return None
    files = tuple(FileEntry(path=f"{folder.name}/{h.path.name}", rank=h.rank, islands=h.islands,
                            checksum_sha256=h.checksum_sha256, size_bytes=h.path.stat().st_size,
                            file_sha256=digests[h.path.name], references=h.references)
                  for h in headers)
    return CheckpointEntry(
        name=folder.name, sequence=headers[0].sequence, generation=headers[0].generation,
        created_unix=headers[0].created_unix, nranks=nranks,
        islands=tuple(sorted(i for h in headers for i in h.islands)),
        config_sha256=headers[0].config_sha256, files=files)


def _with_skipped(checkpoint: Checkpoint, skipped: list[str]) -> Checkpoint:
    return replace(checkpoint, skipped=tuple(skipped))
