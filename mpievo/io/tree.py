"""Exact HDF5 encoding of state trees, with a canonical SHA-256 digest.

A *state tree* is what an island's ``state_dict()`` returns: nested ``dict`` (str keys),
``list``/``tuple``, numpy arrays and scalars, Python ``int`` (any size), ``float``,
``bool``, ``complex``, ``str``, ``bytes`` and ``None``. Dicts, lists and tuples become
HDF5 groups, everything else a dataset; the attribute ``mpievo_kind`` on every node
records the Python type so that reading gives back the same types, dtypes, shapes and
bytes (NaN payloads included). Values h5py cannot hold natively are stored so that
``h5dump`` still shows something sensible:

* ``str`` and numpy unicode/object-of-str arrays: variable-length UTF-8 strings (or,
  when a value contains NUL, which HDF5 strings cannot, UTF-8 bytes / UTF-32 code
  points with ``mpievo_storage`` saying so);
* dtypes HDF5 has no type for (ml_dtypes' bfloat16 and float8 kinds, datetime64,
  timedelta64): the raw bits as an unsigned integer array, ``mpievo_dtype`` naming
  the original dtype.

The digest is fed while writing (from the values handed to h5py) and while reading
(from the values h5py hands back), so a flipped data byte or a damaged node shows as
a mismatch. See ``FORMAT.md`` for the byte layout of the digest records.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import h5py
import numpy as np

from .rows import ROWS_ATTR, ReferencedRows, read_rows_payload, write_rows

KIND_ATTR = "mpievo_kind"
STORAGE_ATTR = "mpievo_storage"
DTYPE_ATTR = "mpievo_dtype"
TREE_ATTRS = (KIND_ATTR, STORAGE_ATTR, DTYPE_ATTR)

_UTF8 = h5py.string_dtype("utf-8")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: numpy kinds h5py stores natively (bool, ints, floats, complex, fixed bytes)
_NATIVE_KINDS = frozenset("biufcS")
_RAW_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class TreeError(TypeError):
    """A value that cannot be part of a state tree, or a node that cannot be decoded.

    Example::

        import hashlib, h5py
        with h5py.File("t.h5", "w") as handle:
            write_tree(handle, "state", {"f": open}, hashlib.sha256())   # TreeError naming 'state/f'
    """


def write_tree(parent: h5py.Group, name: str, value: Any, digest) -> None:
    """Write ``value`` as ``parent[name]`` and feed its records to ``digest``.

    Args:
        parent: the HDF5 group to create the node in.
        name: the node's name (a non-empty str without "/").
        value: a state tree (see module docstring).
        digest: a hashlib object updated with the canonical records.

    Raises:
        TreeError: a value of an unsupported type, or an invalid key, naming its path.

    Example::

        import hashlib, h5py, numpy as np
        with h5py.File("t.h5", "w") as handle:
            write_tree(handle, "state", {"x": np.arange(3), "name": "ga"}, hashlib.sha256())
    """
    _write_node(parent, name, value, digest, name)


def read_tree(node: h5py.Group | h5py.Dataset, digest) -> Any:
    """Read the tree rooted at ``node`` and feed its records to ``digest``.

    Raises:
        TreeError: a node without a known ``mpievo_kind`` or with inconsistent storage.
        OSError: h5py could not read the data (damaged file).

    Example::

        import hashlib, h5py
        with h5py.File("t.h5", "r") as handle:
            state = read_tree(handle["state"], hashlib.sha256())
    """
    return _read_node(node, digest, node.name.rsplit("/", 1)[-1])


def tree_digest(value: Any, name: str = "tree") -> str:
    """Hex SHA-256 of ``value``'s canonical records, as ``write_tree`` would compute.

    Writes into an in-memory HDF5 file, so it costs a copy; meant for tests and tools.
    """
    digest = hashlib.sha256()
    with h5py.File(name + ".h5", "w", driver="core", backing_store=False) as scratch:
        write_tree(scratch, name, value, digest)
    return digest.hexdigest()


def canonical_attr_value(value: Any) -> Any:
    """Return ``value`` (an HDF5 attribute as written or read) as plain JSON-able data."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [canonical_attr_value(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return canonical_attr_value(value.item())
    if isinstance(value, (list, tuple)):
        return [canonical_attr_value(v) for v in value]
    return value


def feed_record(digest, path: str, attrs: dict, *payload: bytes | memoryview) -> None:
    """Feed one canonical record: the path, the attributes and payload chunks.

    Every part is length-prefixed (8 bytes, little endian) so that no two different
    records produce the same byte stream.
    """
    canon = {k: canonical_attr_value(v) for k, v in attrs.items()}
    _feed(digest, path.encode("utf-8"))
    _feed(digest, json.dumps(canon, sort_keys=True, allow_nan=True).encode("utf-8"))
    for chunk in payload:
        _feed(digest, chunk)


def _feed(digest, chunk: bytes | memoryview) -> None:
    digest.update(len(chunk).to_bytes(8, "little"))
    digest.update(chunk)


# ---------------------------------------------------------------- writing


def _check_key(key: Any, path: str) -> str:
    if not isinstance(key, str):
        raise TreeError(f"expected str dict keys at {path!r}, got {type(key).__name__} {key!r}")
    if key in ("", ".") or "/" in key or "\x00" in key:
        raise TreeError(f"expected a key that is not empty, '.' or containing '/' or NUL at {path!r}, got {key!r}")
    return key


def _write_node(parent: h5py.Group, name: str, value: Any, digest, path: str) -> None:
    if isinstance(value, dict):
        _write_group(parent, name, "dict", list(value.items()), digest, path)
    elif isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        _write_group(parent, name, kind, [(str(i), v) for i, v in enumerate(value)], digest, path)
    elif isinstance(value, ReferencedRows):     # incremental rows (mpievo.io.rows)
        payload = write_rows(parent, name, value)
        feed_record(digest, path, {**value.attrs, ROWS_ATTR: "referenced"}, _shape_header(value), payload)
    else:
        attrs, data = _encode_leaf(value, path)
        _write_dataset(parent, name, attrs, data, digest, path)


def _shape_header(value) -> bytes:
    return f"{value.dtype.str}{list(value.shape)}".encode()


def _write_group(parent, name, kind, items, digest, path) -> None:
    group = parent.create_group(name)
    group.attrs[KIND_ATTR] = kind
    feed_record(digest, path, {KIND_ATTR: kind})
    named = [(_check_key(key, path), child) for key, child in items]
    # Children are written in sorted name order, the order read_tree visits them in.
    for key, child in sorted(named, key=lambda pair: pair[0]):
        _write_node(group, key, child, digest, f"{path}/{key}")


def _write_dataset(parent, name, attrs: dict, data, digest, path) -> None:
    if data is None:
        dataset = parent.create_dataset(name, data=h5py.Empty("i1"))
    elif isinstance(data, np.ndarray) and data.dtype == object:
        dataset = parent.create_dataset(name, data=data, dtype=_UTF8)
    elif isinstance(data, str):
        dataset = parent.create_dataset(name, data=data, dtype=_UTF8)
    else:
        dataset = parent.create_dataset(name, data=data)
    for key, val in attrs.items():
        dataset.attrs[key] = val
    feed_record(digest, path, attrs, *_payload(data))


def _encode_leaf(value: Any, path: str) -> tuple[dict, Any]:
    """Return (attributes, data to store) for a leaf value."""
    # numpy scalars first: np.float64, np.complex128, np.str_ and np.bytes_ subclass
    # the Python types below but must come back as numpy scalars.
    if isinstance(value, np.generic):
        attrs, data = _encode_array(np.asarray(value), path)
        return {**attrs, KIND_ATTR: "numpy_scalar"}, data
    if isinstance(value, np.ndarray):
        return _encode_array(value, path)
    if value is None:
        return {KIND_ATTR: "none"}, None
    if isinstance(value, bool):
        return {KIND_ATTR: "bool"}, np.asarray(value, dtype=np.bool_)
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return {KIND_ATTR: "int"}, np.asarray(value, dtype=np.int64)
        # Arbitrary-precision ints (e.g. PCG64's 128-bit state) as decimal text.
        return {KIND_ATTR: "bigint"}, str(value)
    if isinstance(value, float):
        return {KIND_ATTR: "float"}, np.asarray(value, dtype=np.float64)
    if isinstance(value, complex):
        return {KIND_ATTR: "complex"}, np.asarray(value, dtype=np.complex128)
    if isinstance(value, str):
        _check_utf8(value, path)
        if "\x00" in value:
            return {KIND_ATTR: "str", STORAGE_ATTR: "utf8-bytes"}, np.frombuffer(value.encode("utf-8"), np.uint8).copy()
        return {KIND_ATTR: "str"}, value
    if isinstance(value, bytes):
        return {KIND_ATTR: "bytes"}, np.frombuffer(value, dtype=np.uint8).copy()
    raise TreeError(
        f"expected dict, list, tuple, numpy array/scalar, int, float, bool, complex, str, "
        f"bytes or None at {path!r}, got {type(value).__module__}.{type(value).__qualname__}")


def _encode_array(array: np.ndarray, path: str) -> tuple[dict, Any]:
    dtype = array.dtype
    base = {KIND_ATTR: "array"}
    if dtype.kind in _NATIVE_KINDS and dtype.fields is None and not _is_extension_dtype(dtype):
        return base, _c_contiguous(array)
    if dtype.kind == "U":
        return _encode_text_array(array, base, path, dtype.str)
    if dtype.kind == "O":
        if not all(isinstance(v, str) for v in array.flat):
            raise TreeError(f"expected an object array holding only str at {path!r}, got other objects")
        return _encode_text_array(array, base, path, "object")
    if dtype.kind in "mM" or _is_extension_dtype(dtype):
        if dtype.itemsize not in _RAW_VIEW:
            raise TreeError(f"expected a dtype of 1, 2, 4 or 8 bytes at {path!r}, got {dtype}")
        raw = _c_contiguous(array).view(_RAW_VIEW[dtype.itemsize])
        return {**base, STORAGE_ATTR: "raw-bits", DTYPE_ATTR: _dtype_name(dtype)}, raw
    raise TreeError(f"expected a numeric, bool, bytes, str or datetime dtype at {path!r}, got {dtype}")


def _c_contiguous(array: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into shape (1,).
    return array if array.flags.c_contiguous else array.copy(order="C")


def _encode_text_array(array: np.ndarray, base: dict, path: str, dtype_name: str) -> tuple[dict, Any]:
    values = [str(v) for v in array.flat]
    for v in values:
        _check_utf8(v, path)
    attrs = {**base, DTYPE_ATTR: dtype_name}
    if any("\x00" in v for v in values):
        if array.dtype.kind != "U":
            raise TreeError(f"expected object-array strings without NUL at {path!r}, got one with NUL")
        native = array.astype(array.dtype.newbyteorder("="), order="C")
        chars = array.dtype.itemsize // 4
        codepoints = native.reshape(-1).view(np.uint32).reshape(array.shape + (chars,))
        return {**attrs, STORAGE_ATTR: "utf32-codepoints"}, codepoints
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = values if values else []
    return {**attrs, STORAGE_ATTR: "utf8"}, out


def _check_utf8(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise TreeError(f"expected text encodable as UTF-8 at {path!r}, got {err}") from None


def _is_extension_dtype(dtype: np.dtype) -> bool:
    # ml_dtypes types (bfloat16, float8_*) register as kind 'V' with their own type.
    return type(dtype).__module__.startswith("ml_dtypes") or dtype.type.__module__.startswith("ml_dtypes")


def _dtype_name(dtype: np.dtype) -> str:
    return dtype.name if _is_extension_dtype(dtype) else dtype.str


def _payload(data) -> list[bytes | memoryview]:
    """The canonical byte chunks of stored data (as written or as read)."""
    if data is None:
        return [b"none"]
    # A scalar string dataset reads back as str whether it was written from a str or
    # from a 0-d object array, so both give the same records.
    if isinstance(data, str):
        return [b"strings[]", data.encode("utf-8")]
    if isinstance(data, np.ndarray) and data.dtype == object:
        header = f"strings{list(data.shape)}".encode()
        return [header, *(v.encode("utf-8") for v in data.flat)]
    contiguous = _c_contiguous(np.asarray(data))
    header = f"{contiguous.dtype.str}{list(contiguous.shape)}".encode()
    return [header, memoryview(contiguous.reshape(-1).view(np.uint8))]


# ---------------------------------------------------------------- reading


def _read_node(node, digest, path: str) -> Any:
    kind = canonical_attr_value(node.attrs.get(KIND_ATTR))
    if isinstance(node, h5py.Group):
        return _read_group(node, kind, digest, path)
    attrs = {k: node.attrs[k] for k in TREE_ATTRS if k in node.attrs}
    data = _read_stored(node)
    if ROWS_ATTR in node.attrs:     # a virtual dataset of rows stored here and in earlier files
        feed_record(digest, path, {**attrs, ROWS_ATTR: node.attrs[ROWS_ATTR]}, _shape_header(data),
                    read_rows_payload(node, data, path))
    else:
        feed_record(digest, path, attrs, *_payload(data))
    return _decode_leaf(kind, {k: canonical_attr_value(v) for k, v in attrs.items()}, data, path)


def _read_group(group: h5py.Group, kind, digest, path: str) -> Any:
    if kind not in ("dict", "list", "tuple"):
        raise TreeError(f"expected mpievo_kind dict, list or tuple on group {path!r}, got {kind!r}")
    feed_record(digest, path, {KIND_ATTR: kind})
    children = {name: _read_node(group[name], digest, f"{path}/{name}") for name in sorted(group)}
    if kind == "dict":
        return children
    items = [children[str(i)] for i in range(len(children)) if str(i) in children]
    if len(items) != len(children):
        raise TreeError(f"expected {kind} group {path!r} to hold members 0..{len(children) - 1}, got {sorted(children)}")
    return items if kind == "list" else tuple(items)


def _read_stored(dataset: h5py.Dataset):
    if dataset.shape is None:  # HDF5 null dataspace (h5py.Empty)
        return None
    if h5py.check_string_dtype(dataset.dtype) is not None and dataset.dtype.kind == "O":
        value = dataset.asstr()[()]
        if isinstance(value, str):
            return value
        out = np.empty(dataset.shape, dtype=object)
        out.reshape(-1)[:] = list(np.asarray(value, dtype=object).reshape(-1))
        return out
    return dataset[...]


def _decode_leaf(kind, attrs: dict, data, path: str) -> Any:
    storage = attrs.get(STORAGE_ATTR)
    if kind == "none":
        return None
    if kind in ("bool", "int", "float", "complex"):
        caster = {"bool": bool, "int": int, "float": float, "complex": complex}[kind]
        return caster(np.asarray(data).item())
    if kind == "bigint":
        return int(data)
    if kind == "str":
        return bytes(np.asarray(data, dtype=np.uint8)).decode("utf-8") if storage == "utf8-bytes" else str(data)
    if kind == "bytes":
        return bytes(np.asarray(data, dtype=np.uint8))
    if kind in ("array", "numpy_scalar"):
        if isinstance(data, str):
            data = np.array(data, dtype=object)
        array = _decode_array(attrs, data, path)
        return array[()] if kind == "numpy_scalar" else array
    raise TreeError(f"expected a known mpievo_kind on dataset {path!r}, got {kind!r}")


def _decode_array(attrs: dict, data: np.ndarray, path: str) -> np.ndarray:
    storage = attrs.get(STORAGE_ATTR)
    dtype_name = attrs.get(DTYPE_ATTR)
    if storage is None:
        return data
    if storage == "raw-bits":
        return data.view(_resolve_dtype(dtype_name, path))
    if storage == "utf8":
        if dtype_name == "object":
            return data
        return np.array(data.tolist(), dtype=np.dtype(dtype_name)).reshape(data.shape)
    if storage == "utf32-codepoints":
        dtype = np.dtype(dtype_name)
        native = data.astype(np.uint32, order="C").reshape(-1).view(dtype.newbyteorder("="))
        return native.reshape(data.shape[:-1]).astype(dtype)
    raise TreeError(f"expected a known mpievo_storage on dataset {path!r}, got {storage!r}")


def _resolve_dtype(name: str, path: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # registers bfloat16, float8_* with numpy

        try:
            return np.dtype(getattr(ml_dtypes, name))
        except AttributeError:
            raise TreeError(f"expected a dtype numpy or ml_dtypes knows at {path!r}, got {name!r}") from None
