"""Helpers for island state trees in tests: leaves, equality, an HDF5 round trip."""

from __future__ import annotations

import hashlib

import h5py
import numpy as np

from mpievo.io import read_tree, write_tree


def leaves(tree: dict, prefix: str = ""):
    """("group/name", value) of every leaf of a nested state tree."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", value


def trees_equal(a: dict, b: dict) -> bool:
    """The same keys at every level and equal arrays and values at the leaves."""
    left, right = dict(leaves(a)), dict(leaves(b))
    return left.keys() == right.keys() and all(np.array_equal(left[k], right[k]) for k in left)


def through_hdf5(state: dict) -> dict:
    """``state`` written to an in-memory HDF5 file as a checkpoint would, and read back."""
    with h5py.File("state.h5", "w", driver="core", backing_store=False) as handle:
        write_tree(handle, "state", state, hashlib.sha256())
        return read_tree(handle["state"], hashlib.sha256())
