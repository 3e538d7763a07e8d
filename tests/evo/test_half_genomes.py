"""Half-precision genomes (engine.dtype = bfloat16 / float16) on host islands.

The reference for breeding is a float32 island's GA over the same (widened) parents,
with the same generator, rounded with numpy's ``astype`` (ml_dtypes' for bfloat16):
round to nearest even, once, at the end.
"""

import ml_dtypes
import numpy as np
import pytest

from mpievo.evo import half
from mpievo.evo.algorithms.ga import GeneticAlgorithm
from mpievo.evo.archive import Archive
from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.island import Island
from mpievo.evo.operators import COUNTER_DIM
from mpievo.evo.problems import Problem, make_problem

HALF = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
CAPACITY, BATCH = 12, 16


def _sphere(x):
    return np.sum(np.asarray(x, np.float64) ** 2, axis=1)


def _parents(dim: int, dtype, bound: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    genomes = rng.uniform(-bound, bound, (CAPACITY, dim)).astype(np.float32).astype(dtype)
    return genomes, rng.random(CAPACITY)


def _children(dtype, genomes, fitness, bound: float, seed: int, **settings) -> np.ndarray:
    """A GA's children of ``genomes`` (stored in ``dtype``) for one ``ask``."""
    return _asked(dtype, genomes, fitness, bound, seed, **settings)[0]


def _asked(dtype, genomes, fitness, bound: float, seed: int, **settings):
    """(children, the GA) of one ``ask``."""
    dim = genomes.shape[1]
    archive = Archive(CAPACITY, dim, dtype)
    archive.insert(genomes.astype(dtype), fitness, np.arange(CAPACITY), 0, 0)
    ga = GeneticAlgorithm(batch_size=BATCH, **settings)
    ga.init(Problem(_sphere, dim, -bound, bound), archive, np.random.default_rng(0))
    return np.array(ga.ask(np.random.default_rng(seed))), ga


BREEDING = [
    {"crossover": "interpolate", "bounds": "clip"},
    {"crossover": "interpolate", "bounds": "reflect", "mutation_rate": 1.0, "mutation_sigma": 0.5},
    {"crossover": "interpolate", "bounds": "resample", "mutation_rate": 0.5, "mutation_sigma": 0.8},
    {"crossover": "interpolate", "omega": 0.3, "step_adaptation": "self"},
    {"crossover": "uniform", "bounds": "clip", "mutation_rate": 0.3},
    {"crossover": "blend", "bounds": "reflect", "mutation_rate": 0.3},
    {"crossover": "sbx", "bounds": "resample", "mutation_rate": 0.3},
]


@pytest.mark.parametrize("dtype", sorted(HALF))
@pytest.mark.parametrize("settings", BREEDING, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_children_are_float32_breeding_rounded_once_to_nearest_even(dtype, settings):
    genomes, fitness = _parents(9, HALF[dtype], 4.0)     # box [-4, 4]: exact in every type
    got = _children(dtype, genomes, fitness, 4.0, seed=11, **settings)
    reference32 = _children("float32", genomes.astype(np.float32), fitness, 4.0, seed=11, **settings)
    expected = reference32.astype(HALF[dtype])
    assert got.dtype == HALF[dtype] and got.nbytes * 2 == reference32.nbytes
    assert got.view(np.uint16).tobytes() == expected.view(np.uint16).tobytes()
    # the rounding is not vacuous: the float32 children are not half values already
    assert not np.array_equal(expected.astype(np.float32), reference32)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_interpolation_matches_a_numpy_float32_reference(dtype):
    genomes, fitness = _parents(7, HALF[dtype], 4.0)
    got, ga = _asked(dtype, genomes, fitness, 4.0, seed=3, omega=0.3, mutation_rate=0.0)
    # the same parents as the GA's tournament (the compiled step's draws)
    ia, ib = ga._step.idx_a, ga._step.idx_b
    assert len(set(ia)) > 3
    a, b = genomes[ia].astype(np.float32), genomes[ib].astype(np.float32)
    w = np.float32(0.3)
    # the kernels' formula, b + w (a - b) (= w a + (1 - w) b up to rounding)
    expected = np.clip(b + w * (a - b), -4, 4).astype(HALF[dtype])
    assert got.view(np.uint16).tobytes() == expected.view(np.uint16).tobytes()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_large_genomes_breed_in_float32_too(dtype):
    """The counter-based operators (COUNTER_DIM genes and more) under the same rule."""
    rng = np.random.default_rng(1)
    genomes = rng.uniform(-4, 4, (4, COUNTER_DIM)).astype(np.float32).astype(HALF[dtype])
    fitness = rng.random(4)

    def children(dt, rows):
        archive = Archive(4, COUNTER_DIM, dt)
        archive.insert(rows, fitness, np.arange(4), 0, 0)
        ga = GeneticAlgorithm(batch_size=2, mutation_rate=0.01, bounds="reflect")
        ga.init(Problem(_sphere, COUNTER_DIM, -4.0, 4.0), archive, np.random.default_rng(0))
        return np.array(ga.ask(np.random.default_rng(9)))

    got, reference32 = children(dtype, genomes), children("float32", genomes.astype(np.float32))
    assert got.view(np.uint16).tobytes() == reference32.astype(HALF[dtype]).view(np.uint16).tobytes()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_children_stay_in_a_box_the_half_type_cannot_hold(dtype):
    """5.12 is no bfloat16/float16 value: the box is rounded inwards, so no child
    rounds out of it."""
    genomes, fitness = _parents(9, HALF[dtype], 5.0)
    got = _children(dtype, genomes, fitness, 5.12, seed=2, mutation_rate=1.0, mutation_sigma=1.0)
    assert np.all(np.abs(got.astype(np.float64)) <= 5.12)
    assert np.any(np.abs(got.astype(np.float64)) > 5.0)      # the clip did act near the bound


def test_rounding_is_to_nearest_even_with_nan_kept():
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1.00390625, -(1 + 2**-9), np.nan, 3e38, 65520.0], np.float32)
    for dtype in HALF.values():
        out = half.round_into(values, np.empty(values.shape, dtype))
        with np.errstate(over="ignore"):
            expected = values.astype(dtype)
        assert np.isnan(out[4].astype(np.float32))
        keep = ~np.isnan(values)
        assert out[keep].view(np.uint16).tobytes() == expected[keep].view(np.uint16).tobytes()
        assert half.widen_into(out, np.empty(values.shape, np.float32))[keep].tobytes() == \
            expected[keep].astype(np.float32).tobytes()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_an_island_keeps_half_rows_and_the_fitness_sees_them(dtype):
    seen = []

    def fitness(x):
        seen.append(x.dtype)
        return _sphere(x)

    config = EngineConfig(dtype=dtype, capacity=CAPACITY, batch_size=BATCH, unique=True)
    island = Island(0, Problem(fitness, 8, -3.0, 3.0), config, seed=4)
    reference = Island(0, Problem(fitness, 8, -3.0, 3.0), EngineConfig(capacity=CAPACITY, batch_size=BATCH,
                                                                       unique=True), seed=4)
    for isl in (island, reference):
        isl.initialize()
        for g in range(1, 6):
            isl.step(g)
    assert set(seen) == {HALF[dtype], np.dtype(np.float32)}
    assert island.archive.genomes.dtype == HALF[dtype]
    assert island.archive.genomes.nbytes * 2 == reference.archive.genomes.nbytes
    emigrants = island.emigrants(3, "best", np.random.default_rng(0))
    assert emigrants.genomes.dtype == HALF[dtype]
    assert emigrants.genomes.nbytes * 2 == reference.emigrants(3, "best", np.random.default_rng(0)).genomes.nbytes
    state = island.state_dict()
    assert state["archive"]["genomes"].dtype == HALF[dtype]
    assert 0.0 < island.diversity() < 1.0


def test_a_torch_bfloat16_buffer_is_a_row_without_a_copy():
    """A bfloat16 tensor's memory viewed as ml_dtypes.bfloat16 (as mpievo.torch does) is
    taken as it is."""
    raw = np.arange(2 * 6, dtype=np.int16).reshape(2, 6)        # stands in for t.view(torch.int16).numpy()
    rows = raw.view(ml_dtypes.bfloat16)
    assert np.shares_memory(Archive(4, 6, "bfloat16").as_rows(rows), raw)


def test_builtin_problems_evaluate_half_rows_exactly_widened():
    problem = make_problem("rastrigin", 5)
    rows = np.random.default_rng(0).uniform(-5, 5, (4, 5)).astype(ml_dtypes.bfloat16)
    assert problem.evaluate(rows).tolist() == problem.evaluate(rows.astype(np.float64)).tolist()


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_delta_genomes_materialise_base_plus_delta_in_float32_rounded_once(dtype):
    rng = np.random.default_rng(2)
    base = rng.uniform(-1, 1, 10).astype(np.float32)
    config = EngineConfig(dtype=dtype, genome="delta", capacity=CAPACITY, batch_size=BATCH)
    island = Island(0, Problem(_sphere, 10, -2.0, 2.0, bases=base), config, seed=1)
    island.initialize()
    island.step(1)
    rows = island.archive.genomes
    assert rows.dtype == HALF[dtype]
    out = np.empty(rows.shape, HALF[dtype])
    island.problem.materialize_into(rows, out)
    expected = np.clip(base + rows.astype(np.float32), -2, 2).astype(HALF[dtype])
    assert out.view(np.uint16).tobytes() == expected.view(np.uint16).tobytes()


@pytest.mark.parametrize("algorithm", ["de", "shade", "cmaes"])
def test_algorithms_with_float64_state_refuse_half_types(algorithm):
    with pytest.raises(ValueError, match=rf"engine.dtype = 'bfloat16': expected algorithm 'ga' .*got '{algorithm}'"):
        Island(0, make_problem("sphere", 4), EngineConfig(dtype="bfloat16", algorithm=algorithm), seed=0)


def test_seeded_genomes_refuse_half_types():
    problem = Problem(_sphere, 4, -1.0, 1.0, bases=np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="expected genome 'dense' or 'delta'.*got 'seeded'"):
        Island(0, problem, EngineConfig(dtype="float16", genome="seeded"), seed=0)


@pytest.mark.parametrize("dtype", sorted(HALF))
def test_restart_refills_are_float32_uniforms_rounded_once(dtype):
    def refill(dt):
        archive = Archive(CAPACITY, 9, dt)
        archive.insert(np.zeros((4, 9), dt), np.arange(4.0), np.arange(4), 0, 0)   # room left
        ga = GeneticAlgorithm(batch_size=BATCH)
        ga.init(Problem(_sphere, 9, -4.0, 4.0), archive, np.random.default_rng(0))
        ga.refilling = True          # as after a restart
        return np.array(ga.ask(np.random.default_rng(4)))

    got, reference32 = refill(dtype), refill("float32")
    assert got.dtype == HALF[dtype]
    assert got.view(np.uint16).tobytes() == reference32.astype(HALF[dtype]).view(np.uint16).tobytes()
    assert not np.array_equal(got.astype(np.float32), reference32)   # the rounding acted
