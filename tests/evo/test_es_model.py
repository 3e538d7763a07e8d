"""ES islands on a torch model (ModelProblem): the mean starts at the source model and ES
improves it (skipped without torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpievo  # noqa: E402
from mpievo.torch import ModelProblem  # noqa: E402


def test_es_finetunes_a_model_problem_from_its_source():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    x = torch.linspace(-1, 1, 64).reshape(16, 4)
    y = x.sum(dim=1, keepdim=True).sin()

    @torch.no_grad()
    def neg_mse(m):
        return -float(((m(x) - y) ** 2).mean())

    base = neg_mse(model)
    problem = ModelProblem(model, neg_mse, sources=[model])
    result = mpievo.minimize(problem, islands=1, budget=2 + 30 * 40, seed=1,
                             config={"engine": {"algorithm": "es", "population": 2, "es_sigma": 0.02,
                                                "es_learning_rate": 0.03}})
    assert result.fun > 0.6 * base, (base, result.fun)      # the error down by 40 % at least
    problem.flat.write(result.x)
    assert neg_mse(model) == pytest.approx(result.fun, rel=1e-5)
    assert np.isfinite(result.x).all()
