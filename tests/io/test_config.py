"""Resume config check."""

from __future__ import annotations

import math

import pytest

from mpievo.io import (ConfigMismatchError, check_config_compatible, config_differences, config_text_and_format,
                       parse_config)

SAVED = {"seed": 1, "run": {"generations": 100, "islands": 4}, "algorithm": {"name": "de", "F": 0.5},
         "migration": {"topology": "ring", "every": [5, 10]}}


def changed(**edits):
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in SAVED.items()}
    for dotted, value in edits.items():
        section, key = dotted.split("__")
        if value is None:
            del config[section][key]
        else:
            config[section][key] = value
    return config


def test_identical_configs_have_no_differences():
    assert config_differences(SAVED, changed()) == []


def test_differences_are_named_by_dotted_path():
    current = changed(run__generations=200, algorithm__F=0.6, migration__every=[5, 11])
    assert config_differences(SAVED, current) == ["algorithm.F", "migration.every", "run.generations"]


def test_added_and_removed_keys_count():
    current = changed(algorithm__name=None, algorithm__CR=0.9)
    assert config_differences(SAVED, current) == ["algorithm.CR", "algorithm.name"]
    assert config_differences({"a": {"b": 1}}, {"a": 1}) == ["a"]


def test_allowed_keys_and_their_children_are_not_reported():
    current = changed(run__generations=200, algorithm__F=0.6)
    assert config_differences(SAVED, current, allow={"run.generations"}) == ["algorithm.F"]
    assert config_differences(SAVED, current, allow={"run", "algorithm"}) == []
    assert config_differences(SAVED, current, allow={"run.gen"}) == ["algorithm.F", "run.generations"]


def test_bool_is_not_an_int_and_nan_equals_nan():
    assert config_differences({"x": 1}, {"x": True}) == ["x"]
    assert config_differences({"x": math.nan}, {"x": math.nan}) == []
    assert config_differences({"t": [{"a": 1}]}, {"t": [{"a": 2}]}) == ["t"]


def test_refusal_names_every_key_with_both_values():
    current = changed(run__generations=200, algorithm__name="cmaes")
    with pytest.raises(ConfigMismatchError) as caught:
        check_config_compatible(SAVED, current, allow={"run.generations"})
    message = str(caught.value)
    assert caught.value.keys == ["algorithm.name"]
    assert "algorithm.name: saved 'de', current 'cmaes'" in message and "run.generations" not in message
    check_config_compatible(SAVED, current, allow={"run.generations", "algorithm.name"})


def test_absent_values_are_shown_as_absent():
    with pytest.raises(ConfigMismatchError, match="extra: saved <absent>, current 3"):
        check_config_compatible({}, {"extra": 3})


def test_config_text_formats():
    assert config_text_and_format("a = 1\n", None) == ("a = 1\n", "toml")
    text, fmt = config_text_and_format({"b": 1, "a": 2}, None)
    assert fmt == "json" and parse_config(text, fmt) == {"a": 2, "b": 1}
    with pytest.raises(ValueError, match="expected config_format in"):
        config_text_and_format("a = 1", "yaml")
    with pytest.raises(ValueError, match="valid TOML"):
        parse_config("a = = 1", "toml")
