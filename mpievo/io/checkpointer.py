"""Collective checkpoint writing: one file per rank, then rank 0's manifest, then pruning."""

from __future__ import annotations

import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .atomic import TEMP_INFIX, fsync_directory
from .config_compat import config_text_and_format
from .errors import CheckpointWarning, CheckpointWriteError
from .files import write_checkpoint_file
from .loader import existing_entries
from .manifest import (CheckpointEntry, FileEntry, MANIFEST_NAME, checkpoint_dir_name,
                       checkpoint_dirs, rank_file_name, write_manifest)
from .serial import resolve_comm


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


class Checkpointer:
    """Writes checkpoints of a run into one directory, keeping the last ``keep``.

    Args:
        directory: the run's checkpoint directory (created if missing), the same path on
            every rank (a shared file system for multi-node runs).
        keep: how many complete checkpoints to keep (>= 1); older ones are removed only
            after the new one is complete and named by the manifest.
        comm: an mpievo.comm.Communicator (control-plane methods only), or None for one rank.

    Raises:
        ValueError: ``keep`` < 1.

    Example::

        from mpievo.evo import Island, make_problem
        island = Island(0, make_problem("sphere", 5)).run(10)
        checkpointer = Checkpointer("ckpt", keep=2)
        checkpointer.save(10, {0: island.state_dict()}, config={"run": {"seed": 1}})
        load_latest("ckpt").islands[0]        # the same state tree
    """

    def __init__(self, directory: str | Path, *, keep: int = 3, comm: Any = None):
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"expected keep to be an int >= 1, got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep
        self.comm = resolve_comm(comm)
        self._previous: list[CheckpointEntry] = []

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
        comm = self.comm
        plan = comm.bcast_object(self._plan(generation) if comm.rank == 0 else None)
        if "error" in plan:
            raise CheckpointWriteError(plan["error"], self.directory)
        result = self._write_own_file(plan, generation, islands, config, config_format, run_state)
        results = comm.gather_object(result)
        outcome = self._finish(plan, results) if comm.rank == 0 else None
        outcome = comm.bcast_object(outcome)
        if "error" in outcome:
            raise CheckpointWriteError(f"checkpoint {plan['name']} not written: {outcome['error']}",
                                       self.directory / plan["name"])
        return outcome["info"]

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
            return {"name": checkpoint_dir_name(sequence, generation), "sequence": sequence,
                    "generation": generation, "created_unix": time.time()}
        except Exception as err:  # the other ranks wait in bcast_object for this answer
            return {"error": f"rank 0: {type(err).__name__}: {err}"}

    def _write_own_file(self, plan, generation, islands, config, config_format, run_state) -> dict:
        comm = self.comm
        try:
            text, fmt = config_text_and_format(config, config_format)
            folder = self.directory / plan["name"]
            folder.mkdir(parents=True, exist_ok=True)
            written = write_checkpoint_file(
                folder / rank_file_name(comm.rank, comm.size),
                checkpoint=plan["name"], sequence=plan["sequence"], generation=plan["generation"],
                rank=comm.rank, nranks=comm.size, islands=islands,
                run_state=run_state if comm.rank == 0 else None,
                config_text=text, config_format=fmt, created_unix=plan["created_unix"])
            header = written.header
            entry = FileEntry(path=f"{plan['name']}/{header.path.name}", rank=comm.rank,
                              islands=header.islands, checksum_sha256=header.checksum_sha256,
                              size_bytes=written.size_bytes, file_sha256=written.file_sha256)
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
