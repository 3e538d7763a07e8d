"""mpievo.torch.row_scores: a ModelProblem or RecipeProblem scored on rows of its data (all
rows: its full fitness), searched with cheaper fitness; bad input refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpievo  # noqa: E402
from mpievo.comm.protocol import SelfComm  # noqa: E402
from mpievo.evo.fidelity import with_fidelity  # noqa: E402
from mpievo.torch import ModelProblem, RecipeProblem, row_scores  # noqa: E402

X = torch.linspace(-1, 1, 64)[:, None].repeat(1, 3) * torch.tensor([1.0, -0.5, 0.25])
Y = X @ torch.tensor([[0.5], [1.0], [-2.0]])


def score_rows(model, rows):
    rows = torch.as_tensor(np.asarray(rows))
    return -float(((model(X[rows]) - Y[rows]) ** 2).mean())


def models(count: int = 3):
    torch.manual_seed(0)
    return [torch.nn.Linear(3, 1) for _ in range(count)]


@pytest.mark.parametrize("kind", ["model", "recipe"])
def test_all_rows_give_the_full_fitness_and_a_sample_is_cheaper(kind):
    model, *sources = models()
    if kind == "model":
        problem = ModelProblem(model, lambda m: score_rows(m, np.arange(64)), sources=sources)
    else:
        problem = RecipeProblem(model, lambda m: score_rows(m, np.arange(64)), sources, method="linear")
    problem = row_scores(problem, score_rows, rows=64)
    genomes = problem.initial_genomes(np.random.default_rng(1), 4, np.float32 if kind == "model" else np.float64)
    full = -problem.evaluate(genomes)           # evaluate is minimised; ModelProblem maximises
    assert np.allclose(problem.evaluate_rows(genomes, np.arange(64)), full, rtol=1e-6)
    assert not np.allclose(problem.evaluate_rows(genomes, np.arange(8)), full, rtol=1e-6)
    stages = (16 * problem.evaluate_rows(genomes, np.arange(16)) + 48 * problem.evaluate_rows(genomes, np.arange(16, 64)))
    assert np.allclose(stages / 64, full, rtol=1e-6)         # the race's stages add up to the full score
    if kind == "recipe":
        return      # the search below is the same for both kinds
    searched = with_fidelity(problem, 0.25, 0.05)
    config = {"engine": {"capacity": 4, "batch_size": 8}, "run": {"log_every": 100}}
    first = mpievo.minimize(searched, budget=60, islands=1, seed=2, comm=SelfComm(), config=config)
    again = mpievo.minimize(searched, budget=60, islands=1, seed=2, comm=SelfComm(), config=config)
    assert first.nfev <= 60 and first.fun == again.fun and np.array_equal(first.x, again.x)


def test_bad_input_is_refused():
    model, *sources = models()
    problem = ModelProblem(model, lambda m: 0.0, sources=sources)
    with pytest.raises(ValueError, match="rows: expected an int >= 1, got 0"):
        row_scores(problem, score_rows, rows=0)
    with pytest.raises(TypeError, match="expected a callable score_rows"):
        row_scores(problem, None, rows=4)
    with pytest.raises(ValueError, match="expected a ModelProblem or RecipeProblem, got int"):
        row_scores(3, score_rows, rows=4)
