"""A checkpoint file's bytes: the ``sha256sum``-format sidecar beside it and the checks a
reader makes before HDF5 opens the file (the HDF5 library can crash on damaged metadata
instead of raising, so a file must match the digest recorded when it was written first).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import CorruptCheckpointError, ForeignFileError

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def sidecar_path(path: str | Path) -> Path:
    """The ``sha256sum``-format file holding the digest of checkpoint file ``path``."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def file_sha256(path: str | Path, chunk_bytes: int = 8 << 20) -> str:
    """SHA-256 hex digest of a file's bytes, read in chunks.

    Example::

        file_sha256("ckpt/manifest.json")       # hex digest, read in 8 MiB chunks
    """
    digest = hashlib.sha256()
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as raw:
        while True:
            count = raw.readinto(buffer)
            if not count:
                return digest.hexdigest()
            digest.update(view[:count])


def check_file_bytes(path: str | Path, expected_sha256: str, expected_size: int | None = None) -> None:
    """Check a file's size and byte digest before HDF5 opens it.

    The HDF5 library can crash on damaged metadata, so a file must match the digest
    recorded when it was written before it is opened at all.

    Raises:
        FileNotFoundError: no such file.
        CorruptCheckpointError: a different size or digest.
        ForeignFileError: a different digest and no HDF5 signature.

    Example::

        check_file_bytes(path, expected_sha256=file_sha256(path))   # passes; a changed byte raises
    """
    path = Path(path)
    size = path.stat().st_size
    size_ok = expected_size is None or size == expected_size
    actual = file_sha256(path) if size_ok else None
    if size_ok and actual == expected_sha256:
        return
    with open(path, "rb") as raw:
        if raw.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
            raise ForeignFileError(f"{path}: not an HDF5 file (replaced or damaged since it was written)", path)
    if not size_ok:
        raise CorruptCheckpointError(
            f"{path}: {size} bytes, {expected_size} were written (truncated or replaced)", path)
    raise CorruptCheckpointError(
        f"{path}: contents differ from the digest recorded when it was written (sha256 "
        f"{actual[:16]}... instead of {expected_sha256[:16]}...): the file is damaged or replaced", path)


def read_sidecar(path: str | Path) -> str:
    """The digest stored in ``path``'s ``.sha256`` sidecar.

    Raises:
        CorruptCheckpointError: the sidecar is missing or malformed.
    """
    side = sidecar_path(path)
    try:
        words = side.read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError) as err:
        raise CorruptCheckpointError(f"{side}: cannot be read ({err})", side) from err
    if len(words) != 2 or len(words[0]) != 64 or words[1] != Path(path).name:
        raise CorruptCheckpointError(f"{side}: expected '<sha256>  {Path(path).name}', got {words}", side)
    return words[0]
