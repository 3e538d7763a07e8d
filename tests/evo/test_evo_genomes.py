"""Genome encodings (engine.genome): delta rows and seed-encoded recipes."""

import numba
import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island, Problem
from mpievo.evo.genomes import BaseModels, RecipeLayout, encode, encoding_of
from mpievo.evo.genomes.seeded import merge
from mpievo.kernels import recipes

DIM = 600


def _bases(count=3, dim=DIM, seed=0):
    return np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)


def _target_problem(bases, **extra):
    target = (0.2 * bases[0] + 0.5 * bases[1] + 0.3 * bases[2]).astype(np.float64)
    return Problem(lambda X: ((X - target) ** 2).sum(axis=1), bases.shape[1], -6, 6, bases=bases,
                   name="target", **extra)


def _config(genome, **extra):
    settings = dict(genome=genome, capacity=8, batch_size=8, mutation_sigma=0.002, stagnation_patience=0)
    settings.update(extra)
    return EngineConfig(**settings)


# --------------------------------------------------------------------------- recipes
def test_merge_combines_weights_and_terms_linearly_and_adds_the_child_term():
    layout = RecipeLayout(bases=2, terms=4)
    a, b, child = np.zeros(layout.width), np.zeros(layout.width), np.zeros(layout.width)
    layout.write(a, np.array([1.0, 0.0]), np.array([[5, 0.4, 0.1], [9, 0.2, 0.1]]))
    layout.write(b, np.array([0.0, 1.0]), np.array([[9, 0.6, 0.1], [3, 1.0, 0.5]]))
    merge(layout, a, b, 0.25, np.array([7, 0.05, 0.2]), child)
    assert np.array_equal(layout.weights(child), [0.25, 0.75])
    terms = layout.used_terms(child)
    assert terms[:, 0].tolist() == [3, 5, 7, 9]                       # ascending keys
    assert np.allclose(terms[:, 1], [0.75, 0.1, 0.05, 0.25 * 0.2 + 0.75 * 0.6])
    assert terms[:, 2].tolist() == [0.5, 0.1, 0.2, 0.1]


def test_compaction_keeps_the_new_term_and_the_largest_inherited_ones():
    layout = RecipeLayout(bases=1, terms=3)
    a, b, child = (np.zeros(layout.width) for _ in range(3))
    layout.write(a, np.ones(1), np.array([[1, 0.9, 0.1], [2, 0.01, 0.1]]))
    layout.write(b, np.ones(1), np.array([[4, 0.5, 0.1], [6, 0.02, 0.1]]))
    merge(layout, a, b, 0.5, np.array([8, 1e-6, 0.1]), child)
    # inherited |coef|: 0.45, 0.005, 0.25, 0.01 -> keep keys 1 and 4, plus the child's 8
    assert layout.used_terms(child)[:, 0].tolist() == [1, 4, 8]
    layout.write(a, np.ones(1), np.zeros((0, 3)))
    merge(layout, a, a, 1.0, None, child)                                 # omega 1: b's terms weigh 0
    assert len(layout.used_terms(child)) == 0


def _noise(key, coef, rate, dim, scale=1.0):
    """The term (key, coef, rate) alone: a recipe of zero weight on one zero base."""
    out = np.zeros(dim)
    recipes.materialize(np.zeros((1, dim)), np.zeros(1), np.array([[key, coef, rate]]),
                        np.full(dim, scale), np.full(dim, -np.inf), np.full(dim, np.inf), out)
    return out


@pytest.mark.parametrize("rate", [0.002, 0.3])
def test_a_term_mutates_each_gene_with_its_rate_and_a_standard_normal_step(rate):
    dim = 400_000
    out = _noise(123456789012345, 0.5, rate, dim, scale=2.0)
    hit = out != 0
    assert abs(hit.mean() - rate) < 6 * np.sqrt(rate / dim)
    z = out[hit] / (0.5 * 2.0)
    assert abs(z.mean()) < 5 / np.sqrt(z.size) and abs(z.std() - 1.0) < 5 / np.sqrt(2 * z.size)


def test_materialising_does_not_depend_on_the_thread_count():
    problem = encode(_target_problem(_bases(dim=3 * recipes.TILE + 5)), _config("seeded", mutation_rate=0.3))
    rows = problem.initial_genomes(np.random.default_rng(1), 6, np.float64)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = problem.decode(rows[4])
        numba.set_num_threads(max(2, before))
        problem._cache.clear()
        many = problem.decode(rows[4])
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(one, many) and not np.array_equal(one, problem.bases.array[1])


def test_a_recipe_is_the_weighted_bases_plus_its_terms_clipped():
    bases = _bases()
    problem = encode(_target_problem(bases), _config("seeded"))
    layout = problem.layout
    row = np.zeros(layout.width)
    layout.write(row, np.array([0.5, -2.0, 0.25]), np.array([[77, 0.3, 0.05]]))
    noise = _noise(77, 1.0, 0.05, DIM)
    expected = 0.5 * bases[0].astype(np.float64) - 2.0 * bases[1] + 0.25 * bases[2] + 0.3 * 12.0 * noise
    genome = problem.decode(row)
    assert genome.dtype == np.float32 and np.count_nonzero(noise) > 10
    assert np.allclose(genome, np.clip(expected, -6, 6), atol=1e-5)
    assert genome.min() >= -6 and genome.max() <= 6


def test_recipe_rows_do_not_grow_with_the_genome():
    widths = {dim: encode(_target_problem(_bases(dim=dim)), _config("seeded", recipe_terms=16)).dim
              for dim in (100, 100_000)}
    assert widths == {100: 3 + 3 * 16, 100_000: 3 + 3 * 16}


# --------------------------------------------------------------------------- islands
def test_seeded_islands_evolve_recipes_repeatably_and_resume_exactly():
    bases = _bases()
    islands = [Island(0, _target_problem(bases), _config("seeded"), seed=3) for _ in range(2)]
    for island in islands:
        island.run(40)
    a, b = islands
    assert a.archive.dtype == np.float64 and a.archive.genomes.shape == (8, 3 + 3 * 32)
    assert np.array_equal(a.archive.genomes, b.archive.genomes)
    genome, value = a.best()
    assert genome.shape == (DIM,) and genome.dtype == np.float32
    assert value == pytest.approx(float(a.problem.inner(genome[None])[0]))
    start = float(a.problem.inner(bases[1:2])[0])          # the best base
    assert value < start
    state = a.state_dict()
    assert state["genome"]["encoding"] == "seeded" and "bases_checksum" in state["genome"]
    resumed = Island(0, _target_problem(bases), _config("seeded"), seed=3)
    resumed.load_state_dict(state)
    a.run(5)
    resumed.run(5)
    assert np.array_equal(a.archive.genomes, resumed.archive.genomes)


def test_delta_over_a_zero_base_is_the_dense_run_bit_for_bit():
    zero = np.zeros((1, DIM), np.float32)
    target = np.linspace(-1, 1, DIM)
    f = lambda X: ((X - target) ** 2).sum(axis=1)  # noqa: E731
    dense = Island(1, Problem(f, DIM, -3, 3), _config("dense"), seed=5).run(30)
    delta = Island(1, Problem(f, DIM, -3, 3, bases=zero), _config("delta"), seed=5).run(30)
    assert np.array_equal(dense.archive.genomes, delta.archive.genomes)
    assert np.array_equal(dense.archive.fitness, delta.archive.fitness)


def test_delta_rows_are_differences_from_the_base():
    bases = _bases()
    problem = _target_problem(bases, initial=lambda rng, n: bases[np.arange(n) % 3])
    island = Island(0, problem, _config("delta"), seed=2).run(20)
    slot = island.archive.best_index()
    genome, value = island.best()
    expected = np.clip(bases[0] + island.archive.genomes[slot], -6, 6)
    assert np.array_equal(genome, expected.astype(np.float32))
    assert value == pytest.approx(float(problem(genome[None])[0]), rel=1e-6)


def test_a_checkpoint_of_other_bases_or_another_encoding_is_refused():
    bases = _bases()
    state = Island(0, _target_problem(bases), _config("seeded"), seed=0).run(2).state_dict()
    other = Island(0, _target_problem(bases + 1), _config("seeded"), seed=0)
    with pytest.raises(ValueError, match="genome/bases_checksum"):
        other.load_state_dict(state)
    dense = Island(0, Problem(lambda X: X.sum(axis=1), DIM, -6, 6), _config("dense"), seed=0)
    with pytest.raises(ValueError, match="genome/encoding"):
        dense.load_state_dict(state)


@pytest.mark.parametrize("settings, message", [
    (dict(genome="seeded", algorithm="de"), "expected algorithm 'ga' with crossover 'interpolate'"),
    (dict(genome="seeded", crossover="sbx"), "expected algorithm 'ga' with crossover 'interpolate'"),
    (dict(genome="delta", device="cuda"), "engine.device: expected 'cpu' or 'auto'"),
])
def test_settings_an_encoding_cannot_run_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        Island(0, _target_problem(_bases()), EngineConfig(**settings))


def test_an_encoding_needs_bases_of_the_problem_dimension():
    with pytest.raises(ValueError, match="expected a problem with base models"):
        encode(Problem(lambda X: X.sum(axis=1), 5, 0, 1), _config("delta"))
    with pytest.raises(ValueError, match="expected base models of 5 genes"):
        encode(Problem(lambda X: X.sum(axis=1), 5, 0, 1, bases=np.zeros(4)), _config("delta"))


def test_base_models_from_a_file_are_checksummed_and_read_only(tmp_path):
    path = tmp_path / "base.npy"
    np.save(path, _bases(count=2, dim=50))
    bases = BaseModels(path)
    assert bases.shape == (2, 50) and bases.reference == str(path.resolve())
    assert not bases.array.flags.writeable
    assert bases.checksum == BaseModels(_bases(count=2, dim=50)).checksum
    assert bases.checksum != BaseModels(_bases(count=2, dim=50, seed=1)).checksum


def test_encoding_is_idempotent_and_seen_through_wrappers():
    problem = encode(_target_problem(_bases()), _config("seeded"))
    assert encode(problem, _config("seeded")) is problem
    with pytest.raises(ValueError, match="engine.genome: expected 'seeded'"):
        encode(problem, _config("delta"))
    wrapper = Problem(problem.func, problem.dim, problem.lower, problem.upper)
    wrapper.__dict__.update(problem.__dict__)        # as a group's or replica's view does
    assert encoding_of(wrapper) is problem


def test_diversity_is_measured_on_whole_genomes():
    bases = _bases()
    for genome in ("seeded", "delta"):
        problem = _target_problem(bases, initial=lambda rng, n: bases[np.arange(n) % 3])
        island = Island(0, problem, _config(genome), seed=1).run(5)
        encoded = encoding_of(island.problem)
        whole = np.stack([encoded.decode(row) for row in island.archive.genomes]).astype(np.float64)
        scaled = (whole - whole.mean(axis=0)) / 12.0
        expected = np.mean(np.sqrt((scaled ** 2).sum(axis=1))) / np.sqrt(DIM)
        assert island.diversity() == pytest.approx(expected, rel=1e-4), genome
