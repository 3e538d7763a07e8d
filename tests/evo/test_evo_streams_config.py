"""Keyed streams, per-island parameters and EngineConfig validation (one dialect)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from mpievo.evo import EngineConfig, resolve_param, stream
from mpievo.evo.streams import PURPOSES, purpose_code
from mpievo.schema import ConfigError


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
    with pytest.raises(ValueError, match=r"^omega: expected a list of 4 values \(one per island\), got 3"):
        resolve_param([1, 2, 3], 0, 4, "omega")
    with pytest.raises(ValueError, match="island_index in"):
        resolve_param(1, 4, 4)


def test_config_defaults_round_trip():
    cfg = EngineConfig()
    assert cfg.algorithm == "ga" and cfg.dtype == "float32"
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert EngineConfig.from_dict(None) == cfg
    assert set(EngineConfig.describe()) == set(cfg.to_dict())


def test_expressions_round_trip_as_text():
    cfg = EngineConfig.from_dict({"omega": "0.1*i", "capacity": [8, 16, 32]})
    assert cfg.to_dict()["omega"] == "0.1*i" and cfg.is_heterogeneous()
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert EngineConfig(omega="0.1*i").resolve(2, 3).omega == pytest.approx(0.2)   # Python API too


def test_config_rejects_unknown_keys_naming_them():
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_dict({"capacity": 8, "bogus": 1, "zzz": 2})
    assert [p.split(":")[0] for p in info.value.problems] == ["engine.bogus", "engine.zzz"]
    assert "expected a key among ['algorithm', 'batch_size', " in info.value.problems[0]


@pytest.mark.parametrize("key, value, text", [
    ("capacity", 3.5, "engine.capacity: expected an int >= 2 and <= 10000000, got float 3.5"),
    ("capacity", True, "engine.capacity: expected an int >= 2 and <= 10000000, got bool True"),
    ("capacity", 1, "engine.capacity: expected an int >= 2 and <= 10000000, got 1"),
    ("omega", 1.5, "engine.omega: expected a number in [0.0, 1.0], got 1.5"),
    ("omega", "half", "engine.omega: expected a number in [0.0, 1.0], got str 'half'"),
    ("selection", "roulette", "engine.selection: expected one of ['uniform', 'tournament', 'rank'], "
                              "got str 'roulette'"),
    ("unique", 1, "engine.unique: expected true or false, got int 1"),
    ("algorithm", "nsga", "engine.algorithm: expected one of ['ga', 'de', 'jde', 'cmaes', 'shade', 'nsga2', "
                          "'smsemoa', 'moead', 'es'] or 'module:Class', got str 'nsga'"),
    ("dtype", "int8", "engine.dtype: expected one of ['float32', 'float64', 'bfloat16', 'float16'], got str 'int8'"),
    ("mutation_sigma", 0.0, "engine.mutation_sigma: expected a number in (0.0, 1.0], got 0.0"),
    ("omega", [0.1, 2.0], "engine.omega[1]: expected a number in [0.0, 1.0], got 2.0"),
    ("omega", [], "engine.omega: expected a non-empty list (one value per island), got []"),
])
def test_config_validation_messages(key, value, text):
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_dict({key: value})
    assert info.value.problems == [text]


def test_direct_construction_reports_every_problem_at_once():
    with pytest.raises(ConfigError) as info:
        EngineConfig(capacity=1, batch_size=0, dtype="int8")
    assert isinstance(info.value, ValueError) and len(info.value.problems) == 3
    assert str(info.value).startswith("invalid [engine] settings (3 problems):\n  - engine.capacity: ")


def test_config_per_island_resolution():
    cfg = EngineConfig(omega=[0.2, 0.5, 0.8], capacity=lambda i: 8 * (i + 1), algorithm=["ga", "de", "ga"])
    assert cfg.is_heterogeneous() and not EngineConfig().is_heterogeneous()
    one = cfg.resolve(1, 3)
    assert (one.omega, one.capacity, one.algorithm) == (0.5, 16, "de")
    assert not one.is_heterogeneous()
    assert cfg.resolve_all(3)[1] == one and len(cfg.resolve_all(3)) == 3
    with pytest.raises(ConfigError, match=r"engine.omega: expected a list of 4 values"):
        cfg.resolve(0, 4)
    bad = EngineConfig(capacity=lambda i: -i)
    with pytest.raises(ConfigError, match="engine.capacity on island 1: expected an int >= 2 and <= 10000000, got -1"):
        bad.resolve(1, 2)


def test_resolve_all_reports_each_setting_once_on_its_first_failing_island():
    cfg = EngineConfig(capacity=lambda i: 4 - i, batch_size=[1, 2], mutation_sigma="1 - 0.5*i")
    with pytest.raises(ConfigError) as info:
        cfg.resolve_all(5)
    assert info.value.problems == [
        "engine.batch_size: expected a list of 5 values (one per island), got 2: [1, 2]",
        "engine.mutation_sigma on island 2: expected a number in (0.0, 1.0], got 0.0",
        "engine.capacity on island 3: expected an int >= 2 and <= 10000000, got 1",
    ]


def test_evo_never_imports_mpi4py():
    code = "import sys, mpievo.evo, mpievo.bench.engine_vs_pygmo; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
