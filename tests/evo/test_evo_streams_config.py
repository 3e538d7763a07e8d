"""Keyed streams, per-island parameters and EngineConfig validation."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from mpievo.evo import EngineConfig, resolve_param, stream
from mpievo.evo.streams import PURPOSES, purpose_code


def test_same_keys_same_stream_and_distinct_keys_differ():
    a = stream(7, 2, 5, "breed").random(8)
    b = stream(7, 2, 5, "breed").random(8)
    assert np.array_equal(a, b)
    others = [stream(8, 2, 5, "breed"), stream(7, 3, 5, "breed"), stream(7, 2, 6, "breed"),
              stream(7, 2, 5, "emigrate"), stream(7, 2, 5, 99)]
    for other in others:
        assert not np.array_equal(a, other.random(8))


def test_purpose_names_map_to_codes():
    assert purpose_code("breed") == PURPOSES["breed"]
    assert np.array_equal(stream(1, 0, 0, "init").random(3), stream(1, 0, 0, PURPOSES["init"]).random(3))


@pytest.mark.parametrize("bad, exc, text", [
    ((-1, 0, 0, "breed"), ValueError, "non-negative int for seed, got -1"),
    ((1.5, 0, 0, "breed"), TypeError, "for seed, got float"),
    ((0, True, 0, "breed"), TypeError, "for island, got bool"),
    ((0, 0, 2**64, "breed"), ValueError, "generation < 2**64"),
    ((0, 0, 0, "nope"), ValueError, "expected a purpose among"),
])
def test_stream_rejects_bad_keys(bad, exc, text):
    with pytest.raises(exc, match=text.replace("*", r"\*")):
        stream(*bad)


def test_resolve_param_value_list_callable():
    assert resolve_param(0.5, 2, 4) == 0.5
    assert resolve_param([1, 2, 3, 4], 2, 4) == 3
    assert resolve_param(lambda i: 0.3 + 0.1 * i, 2, 4) == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"expected a list of 4 values \(one per island\) for 'omega', got 3"):
        resolve_param([1, 2, 3], 0, 4, "omega")
    with pytest.raises(ValueError, match="island_index in"):
        resolve_param(1, 4, 4)


def test_config_defaults_round_trip():
    cfg = EngineConfig()
    assert cfg.algorithm == "ga" and cfg.dtype == "float32"
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert EngineConfig.from_dict(None) == cfg
    assert set(EngineConfig.describe()) == set(cfg.to_dict())


def test_config_rejects_unknown_keys_naming_them():
    with pytest.raises(ValueError, match=r"unknown engine setting\(s\) 'bogus', 'zzz'"):
        EngineConfig.from_dict({"capacity": 8, "bogus": 1, "zzz": 2})


@pytest.mark.parametrize("key, value, exc, text", [
    ("capacity", 3.5, TypeError, "expected an int for 'capacity', got float 3.5"),
    ("capacity", True, TypeError, "expected an int for 'capacity', got bool"),
    ("capacity", 1, ValueError, "expected 'capacity' >= 2, got 1"),
    ("omega", 1.5, ValueError, r"expected 'omega' in \[0.0, 1.0\], got 1.5"),
    ("omega", "half", TypeError, "expected a number or None for 'omega', got str"),
    ("selection", "roulette", ValueError, "expected 'selection' among"),
    ("unique", 1, TypeError, "expected a bool for 'unique', got int 1"),
    ("algorithm", "nsga", ValueError, "expected 'algorithm' among"),
    ("dtype", "float16", ValueError, "expected 'dtype' among"),
    ("mutation_sigma", 0.0, ValueError, r"expected 'mutation_sigma' in \(0.0"),
    ("omega", [0.1, 2.0], ValueError, r"expected 'omega\[1\]' in"),
])
def test_config_validation_messages(key, value, exc, text):
    with pytest.raises(exc, match=text):
        EngineConfig.from_dict({key: value})


def test_config_per_island_resolution():
    cfg = EngineConfig(omega=[0.2, 0.5, 0.8], capacity=lambda i: 8 * (i + 1), algorithm=["ga", "de", "ga"])
    assert cfg.is_heterogeneous() and not EngineConfig().is_heterogeneous()
    one = cfg.resolve(1, 3)
    assert (one.omega, one.capacity, one.algorithm) == (0.5, 16, "de")
    assert not one.is_heterogeneous()
    with pytest.raises(ValueError, match="expected a list of 4 values"):
        cfg.resolve(0, 4)
    bad = EngineConfig(capacity=lambda i: -i)
    with pytest.raises(ValueError, match="expected 'capacity' >= 2, got -1"):
        bad.resolve(1, 2)


def test_evo_never_imports_mpi4py():
    code = "import sys, mpievo.evo, mpievo.evo.bench; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
