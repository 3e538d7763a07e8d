"""Errors and warnings of checkpoint reading and writing; each names the file concerned."""

from __future__ import annotations

from pathlib import Path


class CheckpointError(Exception):
    """A checkpoint (or one of its files) cannot be used.

    Attributes:
        path: the file or directory the problem is about (None when not about one).

    Example::

        try:
            ckpt = load_latest("runs/a/checkpoints")
        except CheckpointError as error:      # any of the errors below
            print(error, error.path)
    """

    def __init__(self, message: str, path: str | Path | None = None):
        super().__init__(message)
        self.path = None if path is None else Path(path)


class CorruptCheckpointError(CheckpointError):
    """A file that is damaged: truncated, unreadable, or failing its checksum.

    Example::

        try:
            verify_file("ckpt/ckpt-000001-g000000010/rank-00000-of-00001.h5")
        except CorruptCheckpointError as error:   # truncated, or a checksum that differs
            print(error.path)
    """


class ForeignFileError(CheckpointError):
    """A file that is not an mpievo checkpoint (not HDF5, or HDF5 from elsewhere).

    Example::

        try:
            read_header("notes.txt")
        except ForeignFileError as error:
            print(error)                        # names the file: not an mpievo checkpoint
    """


class NewerFormatError(CheckpointError):
    """A file written in a newer format version than this mpievo can read.

    Example::

        try:
            load_latest("ckpt")
        except NewerFormatError:                # written by a newer mpievo: upgrade to read it
            raise
    """


class NoCheckpointError(CheckpointError):
    """A directory holding no usable checkpoint.

    Example::

        try:
            load_latest("runs/empty")
        except NoCheckpointError:
            start_fresh()
    """


class CheckpointWriteError(CheckpointError):
    """Writing a checkpoint failed on at least one rank; the previous one stays the latest.

    Example::

        try:
            checkpointer.save(generation, states, config=config)
        except CheckpointWriteError as error:  # a full disk on one rank: the last checkpoint stands
            print(error)
    """


class ConfigMismatchError(ValueError):
    """The current config differs from the saved one in keys that may not change on resume.

    Attributes:
        keys: the dotted paths that differ.

    Example::

        try:
            check_config_compatible({"run": {"seed": 1}}, {"run": {"seed": 2}})
        except ConfigMismatchError as error:
            error.keys                          # ['run.seed']
    """

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = list(keys)


class CheckpointWarning(UserWarning):
    """A bad checkpoint was skipped in favour of an older one, or a manifest was unusable.

    Example::

        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)    # refuse to fall back silently
            load_latest("runs/a/checkpoints")
    """
