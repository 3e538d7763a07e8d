"""examples/model_merging: the jobs (dense, delta and seeded whole weights; layer-wise
recipe) run through ``mpievo run`` and the merge beats the plain average of the parents
on the test split; base models, starting populations, recipes, cache."""

import dataclasses
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpievo.cli.main import main
from mpievo.config import load_config, validate
from mpievo.evo import EngineConfig, Island

pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1,
                                reason="runs `mpievo run` on COMM_WORLD in this process: one rank only")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "model_merging"


@pytest.fixture
def example(monkeypatch):
    """The example's modules (its folder on sys.path, as PYTHONPATH puts it for a job)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import merge
    import models
    import report

    return types.SimpleNamespace(merge=merge, models=models, report=report)


@pytest.fixture
def small(example, tmp_path, monkeypatch):
    """Both problems on a 64-16-10 MLP (parents trained into tmp_path), importable as
    ``merge_ci:whole`` and ``merge_ci:recipe``."""
    zoo = example.models.Zoo(example.models.ZooSpec(hidden=(16,)), cache_dir=tmp_path / "cache")
    module = types.ModuleType("merge_ci")
    module.whole = example.merge.WholeWeights(zoo).problem()
    module.recipe = example.merge.Recipe(zoo).problem()
    monkeypatch.setitem(sys.modules, "merge_ci", module)
    return module


def run_small(job: str, name: str, dim: int, generations: int, out: Path) -> int:
    return main(["run", str(EXAMPLE / job), "--out", str(out), "--progress", "none",
                 "--generations", str(generations), "--set", f"problem.name=merge_ci:{name}",
                 "--dim", str(dim), "--set", "run.log_every=10"])


@pytest.mark.parametrize("job, name, generations", [("whole_weights.toml", "whole", 40),
                                                    ("delta.toml", "whole", 40),
                                                    ("seeded.toml", "whole", 40),
                                                    ("recipe.toml", "recipe", 30)])
def test_small_job_merges_better_than_the_plain_average(example, small, tmp_path, job, name, generations):
    out = tmp_path / name
    assert run_small(job, name, getattr(small, name).dim, generations, out) == 0
    table = example.report.compare(out)
    merged, average = table["merged"]["test"], table["average"]["test"]
    parent = table[example.report.best_parent(table)]["test"]
    assert merged > average + 0.05 and merged > parent, table
    text = example.report.format_table(table)
    assert text.splitlines()[1].startswith("merged") and "merged - plain average: +" in text
    if name == "whole":   # mutation took the merge beyond a mix of the base and the parents
        assert distance_to_span(merged_genome(example, out), small.whole.func.zoo.models) > 1e-3


def merged_genome(example, out: Path) -> np.ndarray:
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return example.report.best_genome(out, summary)


def distance_to_span(genome: np.ndarray, models: np.ndarray) -> float:
    """Euclidean distance of ``genome`` to the nearest linear combination of ``models``."""
    basis = models.T.astype(np.float64)
    weights = np.linalg.lstsq(basis, genome.astype(np.float64), rcond=None)[0]
    return float(np.linalg.norm(basis @ weights - genome))


@pytest.mark.parametrize("job, name", [("whole_weights.toml", "whole_weights"), ("delta.toml", "whole_weights"),
                                       ("seeded.toml", "whole_weights"), ("recipe.toml", "recipe")])
def test_job_files_state_their_problems_box_and_sense(example, job, name):
    config, _ = load_config(EXAMPLE / job)
    problem = getattr(example.merge, name)
    table = config["problem"]
    assert table["name"] == f"merge:{name}" and table["dim"] == problem.dim
    assert np.all(problem.lower == table["lower"]) and np.all(problem.upper == table["upper"])
    assert table["maximize"] is problem.maximize is True


@pytest.mark.parametrize("job, genome", [("whole_weights.toml", "dense"), ("delta.toml", "delta"),
                                         ("seeded.toml", "seeded")])
def test_job_engines_are_those_of_the_design(example, job, genome):
    whole = validate(load_config(EXAMPLE / job)[0], 2).engines
    assert [e.omega for e in whole] == pytest.approx([0.3, 0.4, 0.5, 0.6])
    assert {(e.algorithm, e.crossover, e.stagnation_patience, e.genome) for e in whole} == {
        ("ga", "interpolate", 0, genome)}


def test_recipe_job_runs_cmaes(example):
    assert {e.algorithm for e in validate(load_config(EXAMPLE / "recipe.toml")[0], 2).engines} == {"cmaes"}


def test_whole_weight_islands_start_at_the_parents(small):
    merger = small.whole.func
    parents = merger.zoo.parents
    island = Island(2, small.whole, EngineConfig(capacity=8), seed=5)
    island.initialize()
    genomes = island.archive.genomes
    for parent in parents:   # each parent once exactly; the others near one of them
        assert np.sum(np.all(genomes == parent, axis=1)) == 1
    nearest = np.min(np.abs(genomes[:, None, :] - parents[None]).max(axis=2), axis=1)
    assert np.all(nearest < 6 * merger.noise) and np.sum(nearest > 0) == 5


def test_whole_weight_bases_are_the_base_then_the_parents(small):
    zoo = small.whole.func.zoo
    assert small.whole.bases.shape == (4, small.whole.dim) and small.whole.bases.dtype == np.float32
    assert np.array_equal(small.whole.bases.array, np.vstack([zoo.base, zoo.parents]))
    assert not np.any(np.all(zoo.parents == zoo.base, axis=1))   # the base is none of the parents


def test_delta_rows_are_differences_from_the_base(small):
    merger = small.whole.func
    island = Island(2, small.whole, EngineConfig(capacity=8, genome="delta"), seed=5)
    island.initialize()
    genomes = np.array([island.problem.decode(row) for row in island.archive.genomes])
    assert np.allclose(island.archive.genomes, genomes - merger.zoo.base, atol=1e-6)
    for parent in merger.zoo.parents:   # the islands still start at the parents
        assert np.sum(np.all(np.abs(genomes - parent) < 1e-6, axis=1)) == 1


def test_seeded_islands_start_at_the_base_and_the_parents(small):
    zoo = small.whole.func.zoo
    config = EngineConfig(capacity=8, genome="seeded", crossover="interpolate", recipe_terms=4,
                          mutation_rate=0.05, mutation_sigma=0.001)
    island = Island(2, small.whole, config, seed=5)
    island.initialize()
    rows = island.archive.genomes
    assert rows.shape == (8, 4 + 3 * 4)   # a migrant is 8 * (bases + 3 * terms) bytes
    genomes = np.array([island.problem.decode(row) for row in rows])
    assert np.array_equal(genomes[:4], zoo.models)
    assert np.all(np.abs(genomes[4:] - zoo.models).max(axis=1) > 0)


def test_recipes_are_normalised_per_tensor(small):
    merger = small.recipe.func
    parents, slices = merger.zoo.parents, merger.zoo.arch.slices
    one_hot = np.zeros((1, 3, 4))
    one_hot[0, 1, :2] = 0.7          # first layer from parent 1, second layer all zero
    merged = merger.merged(one_hot.reshape(1, -1))[0]
    first = np.r_[slices[0], slices[1]]
    second = np.r_[slices[2], slices[3]]
    assert np.allclose(merged[first], parents[1, first], atol=1e-6)
    assert np.allclose(merged[second], parents[:, second].mean(axis=0), atol=1e-6)
    start = merger.initial(np.random.default_rng(0), 4)
    assert np.allclose(merger.merged(start[:1])[0], parents.mean(axis=0), atol=1e-6)   # row 0: the average
    assert np.all((start >= 0) & (start <= 1)) and len(np.unique(start[1:])) == 3 * 12


def test_parents_are_cached_by_spec(example, tmp_path, monkeypatch):
    spec = example.models.ZooSpec(hidden=(8,), epochs=2, base_epochs=1)
    zoo = example.models.Zoo(spec, cache_dir=tmp_path)
    first, first_zoo_path = zoo.parents, zoo.cache_path()

    def no_training(*args):
        raise AssertionError("trained again")

    monkeypatch.setattr(example.models, "train_models", no_training)
    assert np.array_equal(example.models.Zoo(spec, cache_dir=tmp_path).parents, first)
    assert [p.name for p in tmp_path.iterdir()] == [first_zoo_path.name]
    other = example.models.Zoo(dataclasses.replace(spec, epochs=3), cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="trained again"):
        other.parents
