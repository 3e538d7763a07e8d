"""ES islands with low-rank noise (``engine.es_noise = "lowrank"``): each member is the mean
plus sigma U V^T / sqrt(r) on every weight matrix and full noise elsewhere, rebuilt against
numpy; the update is the sum of those terms; the model learns; bad ranks refused first."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mpievo.evo import EngineConfig, Island, make_problem  # noqa: E402
from mpievo.evo.algorithms.es import centered_ranks, model_matrices  # noqa: E402
from mpievo.evo.streams import StreamKeys  # noqa: E402
from mpievo.kernels import es_noise  # noqa: E402
from mpievo.torch import ModelProblem  # noqa: E402

X = torch.linspace(-1, 1, 40, dtype=torch.float64).reshape(8, 5)
Y = torch.stack([torch.sin(3 * X).sum(dim=1), X[:, 0] * X[:, 1]], dim=1)


def mlp_problem():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy()
    return ModelProblem(model, lambda m: float(((m(X) - Y) ** 2).mean()), maximize=False, lower=-10.0,
                        upper=10.0, initial=lambda rng, n: np.tile(start, (n, 1)))


def island(problem, **settings):
    config = EngineConfig(algorithm="es", population=2, dtype="float64", es_noise="lowrank",
                          **{"es_rank": 2, **settings})
    return Island(0, problem, config, seed=3)


def reference_delta(compact, dim, matrices, rank):
    """A pair's perturbation in numpy: U V^T / sqrt(r) per matrix, the compact tail elsewhere."""
    delta, at, covered = np.empty(dim), 0, np.zeros(dim, bool)
    for offset, rows, cols in matrices:
        u = compact[at:at + rows * rank].reshape(rows, rank)
        v = compact[at + rows * rank:at + (rows + cols) * rank].reshape(cols, rank)
        delta[offset:offset + rows * cols] = (u @ v.T).reshape(-1) / np.sqrt(rank)
        covered[offset:offset + rows * cols] = True
        at += (rows + cols) * rank
    delta[~covered] = compact[at:]
    return delta


def test_members_and_update_are_the_low_rank_terms():
    problem = mlp_problem()
    matrices = model_matrices(problem)
    assert matrices == [(0, 4, 5), (24, 2, 4)]         # weights, not biases
    isl = island(problem, es_popsize=6, es_sigma=0.1, es_learning_rate=0.05, es_optimizer="sgd",
                 es_momentum=0.0)
    isl.initialize()
    es = isl.algorithm
    compact_len = 2 * (4 + 5 + 2 + 4) + 4 + 2               # factors, then the two biases
    for g in range(1, 3):
        mean = es.mean.copy()
        rows = isl.ask(g)
        key, base = StreamKeys(isl.seed, 0, g).counter_start()
        deltas = []
        for j in range(3):
            compact = np.empty(compact_len, np.float32)
            es_noise.noise(compact, key, base, pair=j, stride=es_noise.pair_stride(compact_len))
            deltas.append(reference_delta(compact.astype(np.float64), problem.dim, matrices, 2))
            np.testing.assert_allclose(rows[2 * j], mean + 0.1 * deltas[-1], rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(rows[2 * j + 1], mean - 0.1 * deltas[-1], rtol=1e-13, atol=1e-15)
        weight = rows[0, :20].reshape(4, 5) - mean[:20].reshape(4, 5)
        assert np.linalg.matrix_rank(weight, tol=1e-12) == 2          # a rank-2 perturbation
        fitness = isl.evaluate(rows)
        isl.tell(fitness)
        u = centered_ranks(fitness)
        step = (u[0::2] - u[1::2]) / (6 * 0.1) @ np.array(deltas)
        np.testing.assert_allclose(es.mean, mean + 0.05 * step, rtol=1e-12, atol=1e-14)


def test_the_model_learns_with_low_rank_noise_and_resumes_bit_for_bit():
    problem = mlp_problem()
    isl = island(problem, es_popsize=10, es_sigma=0.05, es_learning_rate=0.03)
    isl.initialize()
    start = isl.best()[1]
    isl.run(40)
    assert isl.best()[1] < 0.5 * start
    again = island(mlp_problem(), es_popsize=10, es_sigma=0.05, es_learning_rate=0.03)
    again.initialize()
    again.run(20)
    later = island(mlp_problem(), es_popsize=10, es_sigma=0.05, es_learning_rate=0.03)
    later.load_state_dict(again.state_dict())
    later.run(20)
    assert np.array_equal(later.algorithm.mean, isl.algorithm.mean)


@pytest.mark.parametrize("problem, rank, message", [
    (mlp_problem, 2, None),
    (mlp_problem, 3, "es_rank: expected at most the smaller side 2 of matrix 1 (2 x 4), got 3"),
    (lambda: make_problem("sphere", dim=6), 1,
     "expected at least one weight matrix (a ModelProblem's 2-D tensor) for low-rank noise, got none"),
])
def test_low_rank_noise_is_refused_before_any_work(problem, rank, message):
    made = problem()
    calls = []
    if message is None:
        island(made, es_rank=rank)
        return
    made.evaluate = lambda *args: calls.append(args)
    with pytest.raises(ValueError) as err:
        island(made, es_rank=rank)
    assert str(err.value) == message and not calls


def test_a_bfloat16_model_takes_low_rank_noise():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    target = Y.to(torch.bfloat16)
    problem = ModelProblem(model, lambda m: float(((m(X.to(torch.bfloat16)) - target).float() ** 2).mean()),
                           maximize=False)
    config = EngineConfig(algorithm="es", population=2, dtype="float32", es_noise="lowrank", es_rank=2,
                          es_popsize=8, es_sigma=0.05, es_learning_rate=0.05)
    isl = Island(0, problem, config, seed=1)
    isl.initialize()
    start, mean = isl.best()[1], isl.algorithm.mean.copy()
    isl.run(5)
    assert isl.algorithm.mean.dtype == np.float32 and not np.array_equal(isl.algorithm.mean, mean)
    assert np.isfinite(isl.archive.fitness).all() and isl.best()[1] <= start
