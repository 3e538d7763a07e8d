"""Exact round trip of state trees through HDF5 (types, dtypes, shapes, bytes)."""

from __future__ import annotations

import hashlib

import h5py
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from io_helpers import assert_trees_equal, make_island

from mpievo.io.tree import TreeError, read_tree, tree_digest, write_tree


def round_trip(value, tmp_path):
    written, read = hashlib.sha256(), hashlib.sha256()
    path = tmp_path / "tree.h5"
    with h5py.File(path, "w") as handle:
        write_tree(handle, "value", value, written)
    with h5py.File(path, "r") as handle:
        out = read_tree(handle["value"], read)
    assert written.hexdigest() == read.hexdigest()
    return out


NAN_PAYLOADS = np.frombuffer(
    b"".join([b"\x01\x00\x00\x00\x00\x00\xf8\x7f", b"\x00\x00\x00\x00\x00\x00\xf8\xff",
              b"\xff\xff\xff\xff\xff\xff\xf7\x7f"]), dtype="<f8")

CASES = {
    "int": 7, "negative int": -(2**63), "bigint": 2**127 + 3, "negative bigint": -(2**80),
    "float": 0.1, "nan": float("nan"), "inf": float("-inf"), "true": True, "false": False,
    "none": None, "complex": 1.5 - 2j, "str": "héllo ✓", "empty str": "", "str with NUL": "a\x00b",
    "bytes": b"\x00\xffab", "empty bytes": b"",
    "np.float32": np.float32(1.25), "np.int8": np.int8(-3), "np.bool_": np.bool_(True),
    "np.str_": np.str_("xy"), "np.bytes_": np.bytes_(b"q"), "np.uint64 max": np.uint64(2**64 - 1),
    "0-d array": np.array(2.5), "empty 1-d": np.array([], dtype=np.int16),
    "empty 2-d": np.zeros((0, 5), dtype=np.float32), "empty 3-d": np.zeros((2, 0, 3)),
    "nan payloads": NAN_PAYLOADS, "float16": np.array([1.0, np.inf, -0.0], dtype=np.float16),
    "big endian": np.arange(6, dtype=">f4").reshape(2, 3), "non-contiguous": np.arange(12).reshape(3, 4)[:, ::2],
    "fortran order": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "bool array": np.array([True, False, True]),
    "complex array": np.array([1 + 1j, np.nan]), "unicode array": np.array(["a", "bcd", ""]),
    "unicode with NUL": np.array(["a\x00b", "c"]), "big-endian unicode": np.array(["x", "yy"], dtype=">U3"),
    "0-d unicode": np.array("zz"), "object strings": np.array(["a", "bb"], dtype=object),
    "bytes array": np.array([b"ab", b"c\x00d", b""]), "bfloat16": np.array([1.5, -2.0, np.nan], dtype=ml_dtypes.bfloat16),
    "float8": np.array([0.5, 1.0], dtype=ml_dtypes.float8_e4m3fn), "datetime64": np.array(["2020-01-01"], dtype="M8[s]"),
    "timedelta64": np.array([1, 2], dtype="m8[ns]"), "uint types": np.array([1, 2], dtype=np.uint32),
    "empty dict": {}, "empty list": [], "empty tuple": (), "nested": {"a": {"b": [1, (2, 3.0, "x")], "c": {}}},
    "list of 12": list(range(12)), "pcg64 state": np.random.default_rng(1).bit_generator.state,
    "mt19937 state": np.random.Generator(np.random.MT19937(3)).bit_generator.state,
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_field_type_round_trips_exactly(name, tmp_path):
    value = CASES[name]
    assert_trees_equal(round_trip(value, tmp_path), value, name)


def test_an_island_state_round_trips_exactly(tmp_path):
    island = make_island(2, 9)
    assert_trees_equal(round_trip(island, tmp_path), island)


def test_a_restored_rng_state_continues_the_same_stream(tmp_path):
    rng = np.random.default_rng(42)
    rng.random(5)
    restored = np.random.default_rng()
    restored.bit_generator.state = round_trip(rng.bit_generator.state, tmp_path)
    assert np.array_equal(restored.random(10), rng.random(10))


ARRAY_DTYPES = st.sampled_from(["<f8", ">f8", "<f4", "<f2", "<i8", "<i4", "|i1", "<u2", "|u1", "|b1", "<c16"])


@given(hnp.arrays(dtype=ARRAY_DTYPES, shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
def test_random_arrays_round_trip_bit_for_bit(array):
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as handle:
        digest = hashlib.sha256()
        write_tree(handle, "a", array, digest)
        out = read_tree(handle["a"], hashlib.sha256())
    assert_trees_equal(out, array)


LEAVES = st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=8),
                   st.binary(max_size=8), hnp.arrays(dtype=ARRAY_DTYPES, shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3)))
KEYS = st.text(min_size=1, max_size=6).filter(lambda k: "/" not in k and "\x00" not in k and k != ".")
TREES = st.recursive(LEAVES, lambda children: st.one_of(
    st.lists(children, max_size=3), st.dictionaries(KEYS, children, max_size=3)), max_leaves=8)


@given(st.dictionaries(KEYS, TREES, max_size=4))
def test_random_nested_trees_round_trip(tree):
    with h5py.File("mem.h5", "w", driver="core", backing_store=False) as handle:
        write_tree(handle, "t", tree, hashlib.sha256())
        out = read_tree(handle["t"], hashlib.sha256())
    assert_trees_equal(out, tree)


def test_digest_is_stable_and_sees_every_change():
    island = make_island(0, 3)
    assert tree_digest(island) == tree_digest(make_island(0, 3))
    changed = make_island(0, 3)
    changed["genomes"][2, 1] = np.nextafter(changed["genomes"][2, 1], np.inf)
    assert tree_digest(changed) != tree_digest(island)
    retyped = make_island(0, 3)
    retyped["ids"] = retyped["ids"].astype(np.int32)
    assert tree_digest(retyped) != tree_digest(island)
    assert tree_digest({"a": 1}) != tree_digest({"a": True}) != tree_digest({"a": 1.0})
    assert tree_digest([1, 2]) != tree_digest((1, 2))


@pytest.mark.parametrize("value, words", [
    ({1: 2}, "expected str dict keys"), ({"a/b": 1}, "containing '/'"), ({"": 1}, "not empty"), ({"a\x00": 1}, "NUL"),
    ({"x": object()}, "expected dict, list, tuple"), ({"x": np.array([1, "a"], dtype=object)}, "only str"),
    ({"x": np.zeros(2, dtype=[("a", "f4")])}, "expected a numeric"), ({"x": "\ud800"}, "UTF-8"),
])
def test_unsupported_values_are_refused_naming_the_path(value, words, tmp_path):
    with pytest.raises(TreeError, match=words) as info:
        round_trip(value, tmp_path)
    assert "value" in str(info.value)
