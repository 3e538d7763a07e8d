"""Deterministic island states and file-damaging helpers shared by the checkpoint tests."""

from __future__ import annotations

import h5py
import numpy as np


def make_island(index: int, generation: int, population: int = 6, dims: int = 4) -> dict:
    """An island state with every kind of field an engine stores, fixed by (index, generation)."""
    rng = np.random.default_rng([index, generation])
    fitness = rng.random(population)
    fitness[1] = np.nan  # a failed evaluation
    return {
        "genomes": rng.standard_normal((population, dims)),
        "fitness": fitness,
        "ids": np.arange(population, dtype=np.int64) + 1000 * index,
        "birth_generation": rng.integers(0, generation + 1, population).astype(np.int32),
        "origin": np.array([f"island-{(index + k) % 3}" for k in range(population)]),
        "generation": generation,
        "evaluations": generation * population,
        "rng": np.random.default_rng([index, generation, 7]).bit_generator.state,
        "algorithm": {"name": "de", "sigma": np.float32(0.5), "cov": rng.random((dims, dims)),
                      "history": [], "flags": (True, False)},
        "hyperparameters": {"F": 0.8, "CR": 0.9, "strategy": "rand/1/bin"},
        "migration_log": {"generation": np.array([2, 4], dtype=np.int64),
                          "source": np.array([index, (index + 1) % 3], dtype=np.int16)},
        "adaptive_interval": {"interval": 5, "stagnation": 0.0, "last": None},
    }


def assert_trees_equal(actual, expected, path: str = "") -> None:
    """Exact equality of two state trees: types, dtypes, shapes and bytes (NaN included)."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_trees_equal(actual[key], expected[key], f"{path}/{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_trees_equal(a, e, f"{path}/{i}")
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        if expected.dtype == object:
            assert actual.tolist() == expected.tolist(), path
        else:
            assert np.asarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes(), f"{path}: bytes"
    elif isinstance(expected, float) and expected != expected:
        assert actual != actual, f"{path}: expected NaN"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def flip_data_byte(path, dataset: str, offset: int = 0) -> None:
    """Flip one byte inside ``dataset``'s raw data (a silent corruption HDF5 itself misses)."""
    with h5py.File(path, "r") as handle:
        start = handle[dataset].id.get_offset()
    with open(path, "r+b") as raw:
        raw.seek(start + offset)
        byte = raw.read(1)
        raw.seek(start + offset)
        raw.write(bytes([byte[0] ^ 0xFF]))


def truncate(path, keep_fraction: float = 0.5) -> None:
    """Cut ``path`` to a fraction of its size (a write that stopped half way)."""
    with open(path, "r+b") as raw:
        raw.seek(0, 2)
        raw.truncate(int(raw.tell() * keep_fraction))
