"""Collective checkpoint writing: one file per rank, then rank 0's manifest, then pruning.

A checkpoint is written either before the run continues (:meth:`Checkpointer.save`) or
in the background (:meth:`Checkpointer.save_background`): the live state is snapshot
(arrays copied; of an archive's genomes only the rows the last checkpoint does not
hold), a writer thread writes this rank's file while the run goes on, and the next
checkpoint, :meth:`Checkpointer.wait` or the end of the run completes it: the ranks
gather their results and rank 0 names the checkpoint in the manifest only then. The
collective steps (plan, gather, manifest) always run in the calling thread; the
writer thread makes no MPI call.
"""

from __future__ import annotations

import functools
import shutil
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from .atomic import TEMP_INFIX, fsync_directory
from .config_compat import config_text_and_format
from .errors import CheckpointWarning, CheckpointWriteError
from .files import write_checkpoint_file
from .loader import existing_entries
from .manifest import (CheckpointEntry, FileEntry, MANIFEST_NAME, checkpoint_dir_name,
                       checkpoint_dirs, rank_file_name, write_manifest)
from .rows import RowTable
from .serial import resolve_comm
from .snapshot import MIN_ROW_BYTES, Snapshot, copy_tree, prepare_islands


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint that is complete on disk and named by the manifest.

    Example::

        info = Checkpointer("runs/a/checkpoints").save(10, {0: island.state_dict()}, config={"run": {"seed": 1}})
        info.name, info.generation, [entry.path for entry in info.files]
    """

    name: str
    sequence: int
    generation: int
    directory: Path
    manifest: Path
    files: tuple[FileEntry, ...]
    #: names of older checkpoints removed to keep the last ``keep``
    pruned: tuple[str, ...]
    #: this rank: bytes of archive rows written, and referenced in earlier files instead
    #: (per rank, so left out of comparisons: the info is the same on every rank)
    new_row_bytes: int = field(default=0, compare=False)
    referenced_row_bytes: int = field(default=0, compare=False)
    #: this rank: seconds its file took to write (in the writer thread for a background write)
    write_s: float = field(default=0.0, compare=False)


class _Pending:
    """A checkpoint whose files are being written (or were): its plan, snapshot, result."""

    def __init__(self, plan: dict, snapshot: Snapshot | None):
        self.plan = plan
        self.snapshot = snapshot
        self.result: dict | None = None
        self.write_s = 0.0
        self.thread: threading.Thread | None = None

    def run(self, write) -> None:
        start = time.perf_counter()
        try:
            self.result = write()
        finally:
            self.write_s = time.perf_counter() - start

    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()


class Checkpointer:
    """Writes checkpoints of a run into one directory, keeping the last ``keep``.

    Args:
        directory: the run's checkpoint directory (created if missing), the same path on
            every rank (a shared file system for multi-node runs).
        keep: how many complete checkpoints to keep (>= 1); older ones are removed only
            after the new one is complete and named by the manifest.
        comm: an mpievo.comm.Communicator (control-plane methods only), or None for one rank.
        incremental: store an archive's genome rows that an earlier kept checkpoint holds
            as references to it (FORMAT.md, "Incremental rows"); needs ``keep`` >= 2.
        background: what the run loop should use (``save_background`` where it can);
            the methods themselves do what they say whatever this is.
        min_row_bytes: rows smaller than this are written whole (references cost HDF5
            metadata; model-sized rows are megabytes).

    Raises:
        ValueError: ``keep`` < 1, or ``min_row_bytes`` < 0.

    Example::

        from mpievo.evo import Island, make_problem
        island = Island(0, make_problem("sphere", 5)).run(10)
        checkpointer = Checkpointer("ckpt", keep=2)
        checkpointer.save(10, {0: island.state_dict()}, config={"run": {"seed": 1}})
        load_latest("ckpt").islands[0]        # the same state tree
    """

    def __init__(self, directory: str | Path, *, keep: int = 3, comm: Any = None, incremental: bool = True,
                 background: bool = True, min_row_bytes: int = MIN_ROW_BYTES):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"expected keep to be an int >= 1, got {keep!r}")
        if isinstance(min_row_bytes, bool) or not isinstance(min_row_bytes, int) or min_row_bytes < 0:
            raise ValueError(f"expected min_row_bytes to be an int >= 0, got {min_row_bytes!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.comm = resolve_comm(comm)
        self.incremental = bool(incremental)
        self.background = bool(background)
        self.min_row_bytes = min_row_bytes
        self._previous: list[CheckpointEntry] = []
        self._rows = RowTable()
        self._pending: _Pending | None = None

    def save(
        self,
        generation: int,
        islands: Mapping[int, Mapping[str, Any]],
        *,
        config: str | Mapping[str, Any],
        config_format: str | None = None,
        run_state: Mapping[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Write a checkpoint. Collective: every rank calls it at the same generation.

        Args:
            generation: the generation just completed (the same on every rank).
            islands: the logical islands this rank hosts, index -> state tree (numpy
                arrays, scalars, str, nested dicts/lists; see FORMAT.md).
            config: the run's config text (TOML by default, see ``config_format``) or dict.
            config_format: "toml" or "json" for text; None means TOML for text, JSON for a dict.
            run_state: run-level state tree; rank 0's is stored, other ranks' are ignored.

        Returns:
            the same CheckpointInfo on every rank.

        Raises:
            CheckpointWriteError: on every rank when any rank failed (each failure named);
                the previous checkpoint stays the latest and the partial one is removed.
        """
        self.wait()
        return self._complete(self._start(generation, islands, config, config_format, run_state, background=False))

    def save_background(self, generation: int, islands: Mapping[int, Mapping[str, Any]], *,
                        config: str | Mapping[str, Any], config_format: str | None = None,
                        run_state: Mapping[str, Any] | None = None) -> str:
        """Start a checkpoint and return its name while a thread writes this rank's file.

        Collective like :meth:`save`, with the same arguments (the ranks agree on the name). Completes the
        previous background checkpoint first. The states are snapshot before it
        returns, so the caller may change them at once; the checkpoint becomes visible
        (manifest) only at the next :meth:`wait`, :meth:`save` or ``save_background``.

        Raises:
            CheckpointWriteError: the previous background checkpoint failed (every rank),
                or rank 0 could not plan this one.
        """
        self.wait()
        self._pending = self._start(generation, islands, config, config_format, run_state, background=True)
        return self._pending.plan["name"]

    def wait(self) -> CheckpointInfo | None:
        """Complete the background checkpoint in flight, if any (collective: every rank
        calls it at the same point); None when there was none.

        Raises:
            CheckpointWriteError: on every rank when any rank's write failed.
        """
        pending, self._pending = self._pending, None
        return None if pending is None else self._complete(pending)

    @property
    def busy(self) -> bool:
        """Whether a background checkpoint waits for :meth:`wait` (alike on every rank)."""
        return self._pending is not None

    def written(self) -> bool:
        """Whether this rank's part of the background checkpoint is written (local)."""
        return self._pending is None or self._pending.done()

    # ------------------------------------------------------------ start and completion

    def _start(self, generation, islands, config, config_format, run_state, *, background: bool) -> _Pending:
        comm = self.comm
        plan = comm.bcast_object(self._plan(generation) if comm.rank == 0 else None)
        if "error" in plan:
            raise CheckpointWriteError(plan["error"], self.directory)
        try:
            snapshot = prepare_islands(islands, self._rows, copy=background, kept=plan["kept"],
                                       incremental=self.incremental, min_row_bytes=self.min_row_bytes)
            if background:
                run_state = copy_tree(dict(run_state or {}))
        except Exception as err:  # reported at completion so that every rank fails together
            pending = _Pending(plan, None)
            pending.result = {"error": f"rank {comm.rank}: {type(err).__name__}: {err}"}
            return pending
        pending = _Pending(plan, snapshot)
        write = functools.partial(self._write_own_file, plan, generation, snapshot, config, config_format, run_state)
        if background:
            pending.thread = threading.Thread(target=pending.run, args=(write,), daemon=True,
                                              name=f"mpievo-checkpoint-{plan['name']}")
            pending.thread.start()
        else:
            pending.run(write)
        return pending

    def _complete(self, pending: _Pending) -> CheckpointInfo:
        """Collective: gather every rank's result; rank 0 names the checkpoint in the manifest."""
        comm = self.comm
        pending.join()
        plan = pending.plan
        result = pending.result or {"error": f"rank {comm.rank}: the writer thread ended without a result"}
        results = comm.gather_object(result)
        outcome = self._finish(plan, results) if comm.rank == 0 else None
        outcome = comm.bcast_object(outcome)
        if "error" in outcome:
            raise CheckpointWriteError(f"checkpoint {plan['name']} not written: {outcome['error']}",
                                       self.directory / plan["name"])
        snapshot, entry = pending.snapshot, result["file"]
        self._rows.replace(snapshot.rows_after(entry.path, plan["sequence"], entry.file_sha256, entry.size_bytes))
        return replace(outcome["info"], new_row_bytes=snapshot.new_bytes,
                       referenced_row_bytes=snapshot.referenced_bytes, write_s=pending.write_s)

    # ------------------------------------------------------------ steps

    def _plan(self, generation: int) -> dict:
        """Rank 0: choose the new checkpoint's sequence number and name."""
        try:
            if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
                raise ValueError(f"expected a non-negative int generation, got {generation!r}")
            self.directory.mkdir(parents=True, exist_ok=True)
            entries = self._entries()
            self._previous = entries  # rank 0 only; _finish appends the new entry to these
            used = set(checkpoint_dirs(self.directory)) | {e.sequence for e in entries}
            sequence = max(used, default=0) + 1
            # rows may be referenced in the checkpoints kept along with this one only
            kept = [e.sequence for e in entries][-(self.keep - 1):] if self.keep > 1 else []
            return {"name": checkpoint_dir_name(sequence, generation), "sequence": sequence,
                    "generation": generation, "created_unix": time.time(), "kept": kept}
        except Exception as err:  # the other ranks wait in bcast_object for this answer
            return {"error": f"rank 0: {type(err).__name__}: {err}"}

    def _write_own_file(self, plan, generation, snapshot: Snapshot, config, config_format, run_state) -> dict:
        comm = self.comm
        try:
            text, fmt = config_text_and_format(config, config_format)
            folder = self.directory / plan["name"]
            folder.mkdir(parents=True, exist_ok=True)
            written = write_checkpoint_file(
                folder / rank_file_name(comm.rank, comm.size),
                checkpoint=plan["name"], sequence=plan["sequence"], generation=plan["generation"],
                rank=comm.rank, nranks=comm.size, islands=snapshot.islands,
                run_state=run_state if comm.rank == 0 else None,
                config_text=text, config_format=fmt, created_unix=plan["created_unix"])
            header = written.header
            entry = FileEntry(path=f"{plan['name']}/{header.path.name}", rank=comm.rank,
                              islands=header.islands, checksum_sha256=header.checksum_sha256,
                              size_bytes=written.size_bytes, file_sha256=written.file_sha256,
                              references=header.references)
            return {"file": entry, "generation": generation, "config_sha256": header.config_sha256}
        except Exception as err:  # reported to rank 0 so that every rank fails together
            return {"error": f"rank {comm.rank}: {type(err).__name__}: {err}"}

    def _finish(self, plan: dict, results: list[dict]) -> dict:
        """Rank 0: check every rank's part, then name the checkpoint in the manifest and prune."""
        folder = self.directory / plan["name"]
        try:
            problems = [r["error"] for r in results if "error" in r] or _consistency_problems(plan, results)
            if problems:
                shutil.rmtree(folder, ignore_errors=True)
                return {"error": "; ".join(problems)}
            fsync_directory(folder)
            fsync_directory(self.directory)
            files = tuple(r["file"] for r in results)
            entry = CheckpointEntry(
                name=plan["name"], sequence=plan["sequence"], generation=plan["generation"],
                created_unix=plan["created_unix"], nranks=len(results),
                islands=tuple(sorted(i for f in files for i in f.islands)),
                config_sha256=results[0]["config_sha256"], files=files)
            kept = [*self._previous, entry][-self.keep:]
            manifest = write_manifest(self.directory, kept)
            pruned = self._prune(kept)
            info = CheckpointInfo(name=entry.name, sequence=entry.sequence, generation=entry.generation,
                                  directory=folder, manifest=manifest, files=files, pruned=pruned)
            return {"info": info}
        except Exception as err:
            return {"error": f"rank 0: {type(err).__name__}: {err}"}

    def _entries(self) -> list[CheckpointEntry]:
        """The complete checkpoints already present (from the manifest, or a scan if it is bad)."""
        entries, problem = existing_entries(self.directory)
        if problem is not None:
            manifest = self.directory / MANIFEST_NAME
            aside = manifest.with_name(f"{MANIFEST_NAME}.bad-{int(time.time())}")
            manifest.replace(aside)
            warnings.warn(f"{problem}; kept it as {aside} and rebuilt the manifest from the "
                          "checkpoint files found", CheckpointWarning, stacklevel=3)
        return entries

    def _prune(self, kept: list[CheckpointEntry]) -> tuple[str, ...]:
        """Remove checkpoints older than the kept ones (and leftovers of failed writes)."""
        kept_names = {e.name for e in kept}
        # a checkpoint that a kept one reads rows from stays until no kept one does: rows are
        # referenced only in the keep - 1 checkpoints before a new one, so at most
        # 2 * keep - 1 checkpoint directories are on disk
        kept_names |= {ref.path.split("/")[0] for e in kept for f in e.files for ref in f.references}
        newest = kept[-1].sequence
        pruned = []
        for sequence, path in sorted(checkpoint_dirs(self.directory).items()):
            if sequence < newest and path.name not in kept_names:
                try:
                    shutil.rmtree(path)
                    pruned.append(path.name)
                except OSError as err:
                    warnings.warn(f"could not remove old checkpoint {path}: {err}", CheckpointWarning,
                                  stacklevel=3)
        for leftover in self.directory.glob(f"{MANIFEST_NAME}{TEMP_INFIX}*"):
            leftover.unlink(missing_ok=True)
        return tuple(pruned)


def _consistency_problems(plan: dict, results: list[dict]) -> list[str]:
    problems = []
    generations = {r["generation"] for r in results}
    if generations != {plan["generation"]}:
        problems.append(f"expected every rank at generation {plan['generation']}, got "
                        f"{[r['generation'] for r in results]} by rank")
    hashes = {r["config_sha256"] for r in results}
    if len(hashes) != 1:
        problems.append("expected the same config on every rank, got different config texts")
    seen: dict[int, int] = {}
    for result in results:
        for island in result["file"].islands:
            if island in seen:
                problems.append(f"expected each island on one rank, got island {island} on ranks "
                                f"{seen[island]} and {result['file'].rank}")
            seen[island] = result["file"].rank
    return problems
