"""Errors and warnings of checkpoint reading and writing; each names the file concerned."""

from __future__ import annotations

from pathlib import Path


class CheckpointError(Exception):
    """A checkpoint (or one of its files) cannot be used.

    Attributes:
        path: the file or directory the problem is about (None when not about one).
    """

    def __init__(self, message: str, path: str | Path | None = None):
        super().__init__(message)
        self.path = None if path is None else Path(path)


class CorruptCheckpointError(CheckpointError):
    """A file that is damaged: truncated, unreadable, or failing its checksum."""


class ForeignFileError(CheckpointError):
    """A file that is not an mpievo checkpoint (not HDF5, or HDF5 from elsewhere)."""


class NewerFormatError(CheckpointError):
    """A file written in a newer format version than this mpievo can read."""


class NoCheckpointError(CheckpointError):
    """A directory holding no usable checkpoint."""


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint failed on at least one rank; the previous one stays the latest."""


class ConfigMismatchError(ValueError):
    """The current config differs from the saved one in keys that may not change on resume.

    Attributes:
        keys: the dotted paths that differ.
    """

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = list(keys)


class CheckpointWarning(UserWarning):
    """A bad checkpoint was skipped in favour of an older one, or a manifest was unusable."""
