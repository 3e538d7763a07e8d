"""The TOML job config: defaults, overrides, validation messages and the typed job."""

import pytest

from mpievo.config import (AdaptiveConfig, ConfigError, MigrationConfig, ProblemConfig, RunConfig,
                           apply_overrides, default_config_text, describe_schema, load_config,
                           parse_assignment, parse_toml, validate)
from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.migration_policy import MigrationPolicy


def test_default_job_is_valid_and_gets_one_island_per_rank():
    config, text = load_config(None)
    assert text == default_config_text()
    for nranks in (1, 2, 4):
        job = validate(config, nranks)
        assert job.n_islands == nranks == job.run.islands and job.config["run"]["islands"] == nranks
    job = validate(config, 2)
    assert job.problem.name == "rastrigin" and job.problem.dim == 100 and job.problem.rotate
    assert job.schedule.destinations(0) == [[1], [0]]          # the ring, built for 2 islands


def test_a_long_default_job_checkpoints_every_ten_minutes():
    config, _ = load_config(None)
    for job in (validate(config, 2), validate({}, 1)):
        assert job.run.checkpoint_seconds == 600 and job.config["run"]["checkpoint_seconds"] == 600
    assert "checkpoint_seconds = 600.0  # " in describe_schema()


def test_missing_tables_take_defaults():
    job = validate({}, 3)
    assert job.run == RunConfig(islands=3, generations=200) and job.problem == ProblemConfig()
    assert job.config["migration"]["adaptive"] == AdaptiveConfig().to_dict()
    assert job.engines == (EngineConfig(),) * 3 and job.schedule.adaptive is None
    assert job.policy == MigrationPolicy()


def test_validation_returns_the_typed_objects_the_parallel_layer_uses():
    job = validate({"run": {"islands": 4, "seed": 5},
                    "engine": {"mutation_sigma": "0.05 + 0.05*i", "batch_size": [8, 16, 32, 64]},
                    "migration": {"topology": "torus", "rows": 2, "emigrants": 3, "selection": "random",
                                  "replacement": "fair", "interval": 4,
                                  "adaptive": {"enabled": True, "maximum": 8}}}, 2)
    assert [e.mutation_sigma for e in job.engines] == pytest.approx([0.05, 0.1, 0.15, 0.2])
    assert [e.batch_size for e in job.engines] == [8, 16, 32, 64]
    assert not any(e.is_heterogeneous() for e in job.engines)
    assert job.policy == MigrationPolicy(3, "random", "fair", True)
    assert job.schedule.destinations(7) == [[1, 2], [0, 3], [0, 3], [1, 2]]
    assert job.schedule.interval == 4 and job.schedule.adaptive.maximum == 8
    assert job.config["engine"]["mutation_sigma"] == "0.05 + 0.05*i"   # recorded as written


def test_overrides_and_assignments():
    assert parse_assignment("migration.interval=5") == ("migration.interval", 5)
    assert parse_assignment("problem.name=sphere") == ("problem.name", "sphere")
    assert parse_assignment("engine.omega=[0.1, 0.9]") == ("engine.omega", [0.1, 0.9])
    config = apply_overrides({"run": {"seed": 1}}, {"run.seed": 9, "problem.dim": 3, "run.islands": None})
    assert config == {"run": {"seed": 9}, "problem": {"dim": 3}}
    with pytest.raises(ConfigError, match="TABLE.KEY=VALUE"):
        parse_assignment("novalue")


def test_all_problems_are_reported_at_once_path_first():
    config = {"run": {"seed": -1, "generations": "many", "bogus": 1},
              "problem": {"name": "rastrigin", "dimension": 3},
              "engine": {"capacity": 1, "omega": [0.5, 2.0]},
              "migration": {"topology": "star", "adaptive": {"enabled": "yes"}},
              "extra": {}}
    with pytest.raises(ConfigError) as info:
        validate(config, 2, "job.toml")
    assert info.value.problems == [
        "extra: expected a key among ['engine', 'migration', 'problem', 'run'], got an unknown key",
        "run.bogus: expected a key among ['blas_threads', 'breed', 'budget', 'checkpoint_background', 'checkpoint_every', "
        "'checkpoint_incremental', 'checkpoint_keep', 'checkpoint_seconds', 'finish_diversity', 'finish_reserve', "
        "'generations', 'islands', 'leader_margin', 'leader_rate', 'leader_rate_final', "
        "'log_every', 'memory_check', 'progress_rate', 'ranks_per_island', 'restart_after', 'scheme', 'seed', 'target'], "
        "got an unknown key",
        "run.seed: expected an int >= 0, got -1",
        "run.generations: expected an int >= 1, got str 'many'",
        "problem.dimension: expected a key among ['bases', 'batched', 'dim', 'fidelity_margin', 'fidelity_sample', 'integer', "
        "'lower', 'maximize', 'n_obj', 'name', 'reference_point', 'rotate', 'seed', 'shift', 'time_limit', 'time_limit_method', 'upper'], got an unknown key",
        "migration.topology: expected one of ['ring', 'bidirectional_ring', 'torus', 'fully_connected', "
        "'random', 'graph', 'unconnected'], got str 'star'",
        "migration.adaptive.enabled: expected true or false, got str 'yes'",
        "engine.capacity: expected an int >= 2 and <= 10000000, got 1",
        "engine.omega[1]: expected a number in [0.0, 1.0], got 2.0",
    ]
    assert str(info.value).startswith("invalid job.toml (9 problems):\n  - extra: ")


@pytest.mark.parametrize("config, nranks, fragment", [
    ({"run": {"islands": 2}}, 4, "run.islands: expected at least one island per rank (>= 4 ranks), got 2"),
    ({"engine": {"capacity": [8, 16]}}, 3,
     "engine.capacity: expected a list of 3 values (one per island), got 2: [8, 16]"),
    ({"engine": {"mutation_sigma": "0.1 + i*"}}, 1, "engine.mutation_sigma: expected an arithmetic expression"),
    ({"run": {"islands": 3}, "engine": {"mutation_sigma": "0.5 - 0.5*i"}}, 1,
     "engine.mutation_sigma on island 1: expected a number in (0.0, 1.0], got 0.0"),
    ({"engine": {"popsize": 3}}, 1, "engine.popsize: expected a key among ['algorithm', "),
    ({"engine": []}, 1, "engine: expected a table, got list []"),
    ({"run": []}, 1, "run: expected a table, got list []"),
    ({"migration": {"topology": "graph", "edges": [[0, 5]]}}, 2,
     "migration.topology: expected island indices in [0, 2) in the graph, got 5"),
    ({"migration": {"edges": [[0, "x"]]}}, 2, "migration.edges[0][1]: expected an island index, got str 'x'"),
    ({"migration": {"topology": "ring", "degree": 3}}, 2,
     "migration.topology: expected no ['degree'] options for topology 'ring'"),
    ({"migration": {"selection": "worst"}}, 1, "migration.selection: expected one of ['best', 'random'], got"),
    ({"migration": {"emigrants": 99}}, 1,
     "migration.emigrants: expected at most the smallest archive capacity (64), got 99"),
    ({"migration": {"adaptive": {"minimum": 9, "maximum": 3}}}, 1,
     "migration.adaptive: expected minimum <= maximum, got 9 > 3"),
    ({"problem": {"name": "nope"}}, 1, "problem.name: expected a built-in among"),
    ({"problem": {"name": "no_such_module_xyz:f", "lower": 0, "upper": 1}}, 1,
     "problem.name: cannot import module 'no_such_module_xyz'"),
    ({"problem": {"name": "math:fsum"}}, 1, "problem.lower: expected a bound for user function 'math:fsum', got none"),
    ({"problem": {"name": "math:fsum", "lower": 0, "upper": 1, "rotate": True}}, 1,
     "problem.rotate: expected false for a user function, got true"),
    ({"problem": {"dim": 20000, "rotate": True}}, 1, "problem.rotate: expected dim <= 10000 with a rotation"),
    ({"problem": {"dim": 3, "lower": [0, 0]}}, 1, "problem.lower: expected a number or 3 numbers, got 2"),
    ({"problem": {"lower": [0, "a"]}}, 1, "problem.lower[1]: expected a number, got str 'a'"),
    ({"problem": {"time_limit_method": "thread"}}, 1,
     "problem.time_limit_method: expected one of ['process', 'signal'], got str 'thread'"),
    ([1, 2], 1, "expected a table of tables, got list [1, 2]"),
])
def test_validation_messages(config, nranks, fragment):
    with pytest.raises(ConfigError) as info:
        validate(config, nranks)
    assert fragment in str(info.value)


def test_python_api_tables_speak_the_same_dialect():
    with pytest.raises(ConfigError) as info:
        RunConfig(generations=0, checkpoint_seconds=-1)
    assert info.value.problems == ["run.generations: expected an int >= 1, got 0",
                                   "run.checkpoint_seconds: expected a number in [0.0, 1000000000.0], got -1.0"]
    with pytest.raises(ConfigError, match=r"migration.adaptive.minimum: expected an int >= 1, got 0"):
        MigrationConfig(adaptive={"minimum": 0})
    assert MigrationConfig(adaptive={"enabled": True}).adaptive == AdaptiveConfig(enabled=True)


def test_effective_config_validates_to_itself():
    job = validate({"run": {"islands": 4}, "engine": {"omega": "0.2*i"},
                    "migration": {"topology": "torus", "rows": 2}}, 2)
    again = validate(job.config, 2)
    assert again.config == job.config and again.engines == job.engines


def test_bad_toml_and_unreadable_file(tmp_path):
    with pytest.raises(ConfigError, match="expected valid TOML"):
        parse_toml("[run\n")
    with pytest.raises(ConfigError, match="readable TOML file"):
        load_config(tmp_path / "missing.toml")


def test_schema_description_lists_every_key_with_type_default_and_meaning():
    text = describe_schema()
    for cls in (RunConfig, ProblemConfig, MigrationConfig, AdaptiveConfig, EngineConfig):
        assert f"[{cls.TABLE}]" in text
        for name, key in cls.keys().items():
            if name != "adaptive":          # the nested table has its own section
                assert f"\n  {name} = " in text and f"# {key.check.expected}; {key.doc}" in text, name
    assert '  topology = "ring"  # one of [' in text and "  rows = <unset>  # an int >= 1 or none;" in text


def test_importing_the_run_command_loads_neither_mpi_nor_numpy():
    import subprocess
    import sys

    code = ("import sys, mpievo.cli.run, mpievo.config; "
            "print(sorted(m for m in ('mpi4py.MPI', 'numpy', 'mpievo.parallel') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
