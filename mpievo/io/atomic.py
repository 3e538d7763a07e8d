"""Atomic file replacement: write a temporary file beside the target, fsync, rename, fsync the directory.

A reader therefore sees either the old file or the complete new one, also after a
crash or power loss (given a file system that honours fsync, as local and the common
parallel file systems do for rename within one directory).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

#: infix of temporary names; readers never look at such files
TEMP_INFIX = ".tmp-"


def temporary_name(final: Path) -> Path:
    """The temporary path used while ``final`` is being written by this process."""
    return final.with_name(f"{final.name}{TEMP_INFIX}{os.getpid()}")


def fsync_file(path: str | Path) -> None:
    """Flush ``path``'s data and metadata to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path: str | Path) -> None:
    """Make renames and creations inside directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(final: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``final`` atomically.

    The caller must have closed the file when the block ends. On an exception the
    temporary file is removed and ``final`` is left as it was.
    """
    final = Path(final)
    temp = temporary_name(final)
    try:
        yield temp
        fsync_file(temp)
        os.replace(temp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_directory(final.parent)


def atomic_write_bytes(final: str | Path, data: bytes) -> None:
    """Replace ``final`` with ``data`` atomically (see ``atomic_path``)."""
    with atomic_path(final) as temp:
        with open(temp, "wb") as handle:
            handle.write(data)
