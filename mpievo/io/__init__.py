"""HDF5 checkpoints of island-model runs (h5py; one file per rank; see FORMAT.md).

Writing (collective)::

    checkpointer = Checkpointer(directory, keep=3, comm=comm)
    info = checkpointer.save(generation, {index: island.state_dict(), ...},
                             config=config_text, run_state={...})

Resuming (collective; any number of ranks)::

    ckpt = load_latest(directory, islands=my_indices, comm=comm)
    check_config_compatible(ckpt.config, current_config, allow={"run.generations"})

This package imports h5py and numpy only (no mpi4py, no engine): it takes plain
state trees and any object with the communicator's control-plane methods.
"""

from .checkpointer import CheckpointInfo, Checkpointer
from .config_compat import (check_config_compatible, config_differences, config_hash, config_text_and_format,
                     parse_config)
from .errors import (CheckpointError, CheckpointWarning, CheckpointWriteError, ConfigMismatchError,
                     CorruptCheckpointError, ForeignFileError, NewerFormatError, NoCheckpointError)
from .files import (FORMAT_NAME, FORMAT_VERSION, FileContents, FileHeader, WrittenFile, check_file_bytes,
                    file_sha256, read_checkpoint_file, read_header, verify_file, write_checkpoint_file)
from .loader import (Checkpoint, existing_entries, load_latest, scan_entries, verify_checkpoint,
                     verify_checkpoint_files)
from .manifest import MANIFEST_NAME, CheckpointEntry, FileEntry, read_manifest
from .serial import SelfComm
from .tree import TreeError, read_tree, write_tree

__all__ = [
    "Checkpoint", "CheckpointEntry", "CheckpointError", "CheckpointInfo", "CheckpointWarning",
    "CheckpointWriteError", "Checkpointer", "ConfigMismatchError", "CorruptCheckpointError",
    "FORMAT_NAME", "FORMAT_VERSION", "FileContents", "FileEntry", "FileHeader", "ForeignFileError",
    "MANIFEST_NAME", "NewerFormatError", "NoCheckpointError", "SelfComm", "TreeError", "WrittenFile",
    "check_config_compatible", "check_file_bytes", "config_differences", "config_hash",
    "config_text_and_format", "existing_entries", "file_sha256", "load_latest", "parse_config",
    "read_checkpoint_file", "read_header", "read_manifest", "read_tree", "scan_entries",
    "verify_checkpoint", "verify_checkpoint_files", "verify_file", "write_checkpoint_file", "write_tree",
]
