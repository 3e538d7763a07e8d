"""The TOML job config: defaults, overrides, and validation messages."""

import pytest

from mpievo.config import (ConfigError, apply_overrides, default_config_text, describe_schema,
                           load_config, parse_assignment, parse_toml, validate)
from mpievo.evo.config import EngineConfig


def test_default_job_is_valid_and_gets_one_island_per_rank():
    config, text = load_config(None)
    assert text == default_config_text()
    for nranks in (1, 2, 4):
        job = validate(config, nranks)
        assert job.n_islands == nranks and job.config["run"]["islands"] == nranks
    job = validate(config, 2)
    assert job.problem["name"] == "rastrigin" and job.problem["dim"] == 100
    assert job.migration["topology"] == "ring"


def test_missing_tables_take_defaults():
    job = validate({}, 3)
    assert job.run["generations"] >= 1 and job.migration["adaptive"]["enabled"] is False
    assert job.config["engine"]["capacity"] == EngineConfig().capacity


def test_overrides_and_assignments():
    assert parse_assignment("migration.interval=5") == ("migration.interval", 5)
    assert parse_assignment("problem.name=sphere") == ("problem.name", "sphere")
    assert parse_assignment("engine.omega=[0.1, 0.9]") == ("engine.omega", [0.1, 0.9])
    config = apply_overrides({"run": {"seed": 1}}, {"run.seed": 9, "problem.dim": 3, "run.islands": None})
    assert config == {"run": {"seed": 9}, "problem": {"dim": 3}}
    with pytest.raises(ConfigError, match="TABLE.KEY=VALUE"):
        parse_assignment("novalue")


def test_all_problems_are_reported_at_once():
    config = {"run": {"seed": -1, "generations": "many", "bogus": 1},
              "problem": {"name": "rastrigin", "dimension": 3},
              "migration": {"topology": "star", "adaptive": {"enabled": "yes"}},
              "extra": {}}
    with pytest.raises(ConfigError) as info:
        validate(config, 2, "job.toml")
    message = str(info.value)
    assert message.startswith("invalid job.toml (7 problems):")
    for part in ["run.seed: expected an int >= 0, got -1",
                 "run.generations: expected an int, got str 'many'",
                 "[run]: unknown key 'bogus'",
                 "[problem]: unknown key 'dimension'",
                 "migration.topology: expected one of",
                 "migration.adaptive.enabled: expected true or false, got str 'yes'",
                 "unknown table or key 'extra'"]:
        assert part in message, part


@pytest.mark.parametrize("config, nranks, fragment", [
    ({"run": {"islands": 2}}, 4, "expected at least one island per rank (>= 4 ranks), got 2"),
    ({"engine": {"capacity": [8, 16]}}, 3, "[engine] on island 0 of 3: expected a list of 3 values"),
    ({"engine": {"mutation_sigma": "0.1 + i*"}}, 1, "engine.mutation_sigma: expected an arithmetic expression"),
    ({"engine": {"mutation_sigma": "2 - i"}}, 1, "mutation_sigma"),
    ({"engine": {"popsize": 3}}, 1, "unknown engine setting(s) 'popsize'"),
    ({"migration": {"topology": "graph", "edges": [[0, 5]]}}, 2, "island indices in [0, 2)"),
    ({"migration": {"topology": "ring", "degree": 3}}, 2, "expected no ['degree'] options for topology 'ring'"),
    ({"migration": {"emigrants": 99}}, 1, "at most the smallest archive capacity (64), got 99"),
    ({"migration": {"adaptive": {"minimum": 9, "maximum": 3}}}, 1, "expected minimum <= maximum"),
    ({"problem": {"name": "nope"}}, 1, "expected a built-in among"),
    ({"problem": {"name": "no_such_module_xyz:f", "lower": 0, "upper": 1}}, 1, "cannot import module"),
    ({"problem": {"name": "math:fsum"}}, 1, "problem.lower: expected a bound"),
    ({"problem": {"dim": 20000, "rotate": True}}, 1, "expected dim <= 10000 with a rotation"),
    ({"problem": {"dim": 3, "lower": [0, 0]}}, 1, "expected a number or 3 numbers, got 2"),
    ({"run": []}, 1, "[run]: expected a table"),
])
def test_validation_messages(config, nranks, fragment):
    with pytest.raises(ConfigError) as info:
        validate(config, nranks)
    assert fragment in str(info.value)


def test_heterogeneous_engine_settings():
    job = validate({"run": {"islands": 3},
                    "engine": {"mutation_sigma": "0.05 + 0.05*i", "batch_size": [8, 16, 32]}}, 1)
    resolved = [job.engine.resolve(i, 3) for i in range(3)]
    assert [r.mutation_sigma for r in resolved] == pytest.approx([0.05, 0.1, 0.15])
    assert [r.batch_size for r in resolved] == [8, 16, 32]
    assert job.config["engine"]["mutation_sigma"] == "0.05 + 0.05*i"   # recorded as written


def test_effective_config_validates_to_itself():
    job = validate({"run": {"islands": 4}, "engine": {"omega": "0.2*i"},
                    "migration": {"topology": "torus", "rows": 2}}, 2)
    again = validate(job.config, 2)
    assert again.config == job.config


def test_bad_toml_and_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="expected valid TOML"):
        parse_toml("[run\n")
    with pytest.raises(ConfigError, match="readable TOML file"):
        load_config(tmp_path / "missing.toml")


def test_schema_description_lists_every_table():
    text = describe_schema()
    for table in ("[run]", "[problem]", "[migration]", "[migration.adaptive]", "[engine]"):
        assert table in text


def test_importing_the_run_command_loads_neither_mpi_nor_numpy():
    import subprocess
    import sys

    code = ("import sys, mpievo.cli.run, mpievo.config; "
            "print(sorted(m for m in ('mpi4py.MPI', 'numpy', 'mpievo.parallel') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
