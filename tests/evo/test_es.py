"""The ES island algorithm: the update rebuilt from seeds against a numpy reference over
the full noise matrix, antithetic pairs, shaping, schedules, resume, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island, Problem, make_problem
from mpievo.evo.algorithms.es import ES, centered_ranks, shape_fitness, zscores
from mpievo.evo.streams import StreamKeys
from mpievo.kernels import es_noise
from mpievo.kernels import random as philox
from mpievo.schema import ConfigError
from state_trees import through_hdf5, trees_equal


def noise_matrix(key, base, pairs, dim):
    """The full (pairs, dim) noise matrix from the counter-based generator, block by block
    with the scalar functions: genes 4b .. 4b + 3 of pair j from block base + j * ceil(dim/4) + b."""
    stride = (dim + 3) // 4
    rows = []
    for j in range(pairs):
        words = philox.words(key, base + j * stride, stride).astype(np.uint64)
        z = np.empty((stride, 4), np.float32)
        for b, (w0, w1, w2, w3) in enumerate(words):
            z[b, :2] = philox.normal_pair(w1, w2)
            z[b, 2:] = philox.normal_pair(w3, w0)
        rows.append(z.reshape(-1)[:dim])
    return np.stack(rows)


def es_island(dim=9, seed=4, problem="sphere", **settings) -> Island:
    problem = problem if isinstance(problem, Problem) else make_problem(problem, dim=dim, shift=True)
    config = EngineConfig(algorithm="es", population=2, dtype="float64", **settings)
    return Island(0, problem, config, seed=seed)


def reference_adam(mean, fitness, z, sigma, lr, decay, steps_before=0, m=None, v=None, bias=True):
    """OpenAI-ES with Adam in plain numpy from the noise matrix ``z`` (pairs, dim)."""
    P = len(fitness)
    u = centered_ranks(fitness)
    eps = np.empty((P, z.shape[1]))
    eps[0::2], eps[1::2] = z, -z
    g = -(u @ eps) / (P * sigma) + decay * mean
    m = np.zeros_like(mean) if m is None else m
    v = np.zeros_like(mean) if v is None else v
    t = steps_before + 1
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    fix1, fix2 = (1 - 0.9 ** t, 1 - 0.999 ** t) if bias else (1.0, 1.0)
    return mean - lr * (m / fix1) / (np.sqrt(v / fix2) + 1e-8), m, v


@pytest.mark.parametrize("optimizer, momentum, bias", [("adam", 0.9, True), ("adam", 0.9, False),
                                                      ("sgd", 0.5, True), ("sgd", 0.0, True)])
def test_update_from_seeds_equals_the_full_noise_matrix_reference(optimizer, momentum, bias):
    isl = es_island(dim=11, es_popsize=6, es_sigma=0.1, es_learning_rate=0.05, es_weight_decay=0.01,
                    es_optimizer=optimizer, es_momentum=momentum, es_adam_bias_correction=bias)
    isl.initialize()
    es = isl.algorithm
    for g in range(1, 4):
        mean, m, v = es.mean.copy(), es.moment1.astype(np.float64), es.moment2.astype(np.float64)
        rows = isl.ask(g)
        key, base = StreamKeys(isl.seed, 0, g).counter_start()
        z = noise_matrix(key, base, 3, 11).astype(np.float64)
        member = np.empty_like(rows)
        member[0::2], member[1::2] = mean + 0.1 * z, mean - 0.1 * z
        assert np.array_equal(rows, np.clip(member, -5.12, 5.12))        # the members are mean +- sigma z
        fitness = isl.evaluate(rows)
        isl.tell(fitness)
        if optimizer == "adam":
            mean, m, v = reference_adam(mean, fitness, z, 0.1, 0.05, 0.01, g - 1, m, v, bias)
        else:
            u = centered_ranks(fitness)
            grad = -(u[0::2] - u[1::2]) @ z / (6 * 0.1) + 0.01 * mean
            m = momentum * (m if momentum else 0) + grad
            mean = mean - 0.05 * m
        np.testing.assert_allclose(es.mean, mean, rtol=1e-12, atol=1e-14)
        if momentum:
            np.testing.assert_allclose(es.moment1, m, rtol=1e-12, atol=1e-14)
        else:
            assert es.moment1.shape == es.moment2.shape == (0,)       # the plain step keeps no moment


def test_members_come_in_antithetic_pairs_and_any_block_rebuilds_the_same_genes():
    isl = es_island(dim=7, es_popsize=4, es_sigma=0.01)
    isl.initialize()
    rows = isl.ask(1).copy()
    mean = isl.algorithm.mean
    np.testing.assert_allclose(rows[0::2] - mean, -(rows[1::2] - mean), atol=1e-15)
    assert not np.allclose(rows[0], rows[2])                 # pairs differ
    key, base = StreamKeys(isl.seed, 0, 1).counter_start()
    block = np.empty(3)
    isl.algorithm.member_into(block, 3, key, base, 0.01, start=3)   # an odd start, mid-pair
    assert np.array_equal(block, rows[3, 3:6])
    out = np.empty(5)
    es_noise.combine(out, np.array([2.0, -1.0]), key, base, stride=2, start=2)
    z = noise_matrix(key, base, 2, 7).astype(np.float64)
    np.testing.assert_allclose(out, 2.0 * z[0, 2:7] - z[1, 2:7], rtol=1e-12)


def test_ranges_across_the_lanes_rebuild_the_scalar_generators_genes():
    dim, key, base = 2 * es_noise._GENES + 53, (3, 1, 7, 1), 11
    z = noise_matrix(key, base, 3, dim).astype(np.float64)
    mean = np.linspace(-1, 1, dim)
    stride = es_noise.pair_stride(dim)
    for start, stop in ((0, dim), (es_noise._GENES - 3, 2 * es_noise._GENES + 5), (dim - 2, dim)):
        row = np.empty(stop - start)
        es_noise.perturb(row, mean[start:stop], 0.5, -1.0, key, base, pair=2, stride=stride, start=start)
        assert np.array_equal(row, mean[start:stop] - 0.5 * z[2, start:stop])
        drawn = np.empty(stop - start, np.float32)
        es_noise.noise(drawn, key, base, pair=2, stride=stride, start=start)
        assert np.array_equal(drawn, z[2, start:stop].astype(np.float32))
        sums = np.empty(stop - start)
        es_noise.combine(sums, np.array([0.25, -2.0, 1.0]), key, base, stride=stride, start=start)
        np.testing.assert_allclose(sums, np.array([0.25, -2.0, 1.0]) @ z[:, start:stop], rtol=1e-12, atol=1e-15)
    rows, kept = np.empty((6, dim), np.float32), np.empty((3, dim), np.float32)
    es_noise.members(rows, mean, 0.5, key, base, kept)
    assert np.array_equal(kept, z.astype(np.float32))
    assert np.array_equal(rows[1::2], (mean - 0.5 * z).astype(np.float32))


def test_shaping():
    f = np.array([5.0, 1.0, 3.0, np.inf])
    np.testing.assert_allclose(centered_ranks(f), [-1 / 6, 0.5, 1 / 6, -0.5], rtol=1e-15)
    z = zscores(f)          # inf counts as the worst finite value
    np.testing.assert_allclose(z, -(np.array([5, 1, 3, 5.0]) - 3.5) / np.std([5, 1, 3, 5.0]))
    assert np.array_equal(zscores(np.ones(4)), np.zeros(4))
    assert np.array_equal(shape_fitness(f, "none"), [-5.0, -1.0, -3.0, 0.0])
    with pytest.raises(ValueError, match="expected shaping among"):
        shape_fitness(f, "softmax")


def test_schedules_decay_to_their_floors():
    isl = es_island(es_sigma=0.1, es_sigma_decay=0.5, es_sigma_min=0.03, es_lr_decay=0.9, es_learning_rate=0.1)
    isl.run(3)
    es = isl.algorithm
    assert es.updates == 3 and es.current_sigma() == 0.03          # 0.1 * 0.5**3 = 0.0125 < floor
    assert es.current_learning_rate() == pytest.approx(0.1 * 0.9 ** 3)
    rows = isl.ask(4)
    np.testing.assert_allclose(np.abs(rows[0] - es.mean), np.abs(rows[1] - es.mean))


def test_es_minimises_a_shifted_sphere():
    isl = es_island(dim=20, problem="sphere", es_sigma=0.1, es_learning_rate=0.1)
    isl.initialize()
    start = isl.best()[1]
    isl.run(150)
    assert isl.best()[1] < 1e-2 * start


def test_resume_mid_run_is_bit_identical():
    whole = es_island(dim=10, es_sigma=0.05, es_weight_decay=0.001).run(8)
    half = es_island(dim=10, es_sigma=0.05, es_weight_decay=0.001).run(4)
    resumed = es_island(dim=10, es_sigma=0.05, es_weight_decay=0.001)
    resumed.load_state_dict(through_hdf5(half.state_dict()))
    resumed.run(4)
    assert trees_equal(whole.state_dict(), resumed.state_dict())
    assert np.array_equal(whole.algorithm.mean, resumed.algorithm.mean)


def test_a_better_immigrant_replaces_the_mean():
    isl = es_island(dim=4).run(2)
    es = isl.algorithm
    worse = np.full((1, 4), 4.0)
    es.migrate_in(worse, np.array([es.last_best + 1.0]))
    assert not np.array_equal(es.mean, worse[0])
    es.migrate_in(worse, np.array([es.last_best - 1.0]))
    assert np.array_equal(es.mean, worse[0]) and not es.moment1.any()


@pytest.mark.parametrize("settings, message", [
    ({"sigma": 0.0}, "expected sigma > 0, got 0.0"),
    ({"sigma": -1e-3}, "expected sigma > 0, got -0.001"),
    ({"popsize": 7}, "expected popsize to be an even int >= 2 (antithetic pairs), got 7"),
    ({"learning_rate": 0}, "expected learning_rate > 0, got 0"),
    ({"optimizer": "rmsprop"}, "expected optimizer among ['adam', 'sgd'], got 'rmsprop'"),
    ({"momentum": 1.0}, "expected momentum in [0, 1), got 1.0"),
])
def test_bad_settings_are_refused_before_any_work(settings, message):
    with pytest.raises(ValueError) as err:
        ES(**settings)
    assert str(err.value) == message


def test_bad_config_is_refused_with_expected_got():
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_dict({"algorithm": "es", "es_popsize": 31, "es_sigma": 0})
    text = str(err.value)
    assert "engine.es_popsize: expected an even int >= 2" in text and "got 31" in text
    assert "engine.es_sigma: expected" in text and "got 0" in text


def test_es_islands_share_a_ring_with_other_algorithms():
    import mpievo

    config = {"engine": {"algorithm": ["es", "cmaes"], "population": 8, "dtype": "float64", "es_sigma": 0.05,
                         "es_learning_rate": 0.05},
              "migration": {"interval": 5, "emigrants": 1}}
    result = mpievo.minimize("sphere", dim=8, islands=2, budget=3000, config=config, seed=2)
    es_island_log = result.islands[0]
    assert result.migrations >= 1 and es_island_log["evaluations"] > 1000
    assert result.fun < 1e-2


def test_a_migrant_from_the_ring_replaces_the_mean_only_when_better():
    isl = es_island(dim=5).run(3)
    es = isl.algorithm
    mean = es.mean.copy()
    worse = np.full((1, 5), 3.0)
    # policy "worst": the migrant enters the archive, yet the mean stays (not better than the members)
    assert isl.immigrate(worse, np.array([es.last_best + 1.0]), [7], 1, policy="worst") == 1
    assert np.array_equal(es.mean, mean) and es.moment1.any()
    better = np.full((1, 5), 0.5)
    assert isl.immigrate(better, np.array([es.last_best - 1.0]), [8], 1, policy="worst") == 1
    assert np.array_equal(es.mean, better[0]) and not es.moment1.any() and not es.moment2.any()
    rows = isl.ask(isl.generation + 1)                 # the next generation is drawn around the migrant
    assert np.abs(rows - 0.5).max() < 10 * es.sigma


def test_the_memory_estimate_counts_members_mean_and_moments():
    from mpievo.parallel.memory import island_bytes

    assert island_bytes(EngineConfig(algorithm="es", capacity=2), 10**6) == (2 + 30 + 3 + 15) * 10**6 * 4


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_kept_noise_gives_the_bits_of_the_noise_drawn_again(monkeypatch, optimizer):
    from mpievo.evo.algorithms import es as es_module

    kept = es_island(dim=13, es_optimizer=optimizer, es_sigma=0.05).run(5)
    assert kept.algorithm._noise is not None
    monkeypatch.setattr(es_module, "NOISE_CACHE_BYTES", 0)
    drawn = es_island(dim=13, es_optimizer=optimizer, es_sigma=0.05).run(5)
    assert drawn.algorithm._noise is None
    assert np.array_equal(kept.algorithm.mean, drawn.algorithm.mean)
    with pytest.raises(ValueError, match="expected start 0 with kept noise"):
        es_noise.adam_update(np.zeros(4), np.zeros(4), np.zeros(4), np.ones(1), (0, 0, 0, 0), 1, stride=1, start=1,
                             decay=0.0, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, step=1,
                             noise=np.zeros((1, 4), np.float32))
