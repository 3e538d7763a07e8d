"""ModelProblem: evaluate(model) over flat genomes, dense and delta, sources as bases."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import Small  # noqa: E402

import mpievo  # noqa: E402
from mpievo.evo.genomes import encode  # noqa: E402
from mpievo.evo.engine_config import EngineConfig  # noqa: E402
from mpievo.torch.problem import ModelProblem  # noqa: E402

X = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))


def distance_to(target):
    """Fitness: squared distance of the model's outputs to ``target``'s (minimised)."""
    with torch.no_grad():
        want = target.eval()(X)

    def loss(model):
        with torch.no_grad():
            return float(((model(X) - want) ** 2).mean())
    return loss


def test_delta_genomes_materialise_straight_into_the_models_buffer():
    sources = [Small(1), Small(2)]
    model = Small(3)
    seen = []
    problem = ModelProblem(model, lambda m: seen.append(problem.flat.read()) or 0.0, sources=sources)
    encoded = encode(problem, EngineConfig(genome="delta"))
    block = next(encoded.blocks(np.zeros((1, problem.dim), np.float32)))[1]
    assert np.shares_memory(block, problem.flat.genome())       # the flat buffer is the block
    deltas = np.random.default_rng(0).uniform(-0.1, 0.1, (3, problem.dim)).astype(np.float32)
    encoded.evaluate(deltas)
    base = problem.bases.array[0]
    for got, delta in zip(seen, deltas):
        np.testing.assert_array_equal(got, base + delta)


def test_dense_run_writes_back_the_genome_it_reports():
    sources, target = [Small(1), Small(2)], Small(4)
    loss = distance_to(target)
    problem = ModelProblem(Small(3), loss, sources=sources, maximize=False)
    assert problem.maximize is False and problem.device is False and problem.bases.count == 2
    start = min(loss(s.eval()) for s in sources)
    result = mpievo.minimize(problem, budget=240, islands=2, seed=5)
    assert result.fun < start
    problem.flat.write(result.x)
    assert loss(problem.model.eval()) == pytest.approx(result.fun, rel=1e-6)


def test_bad_sources_are_refused_before_any_run():
    with pytest.raises(ValueError, match=r"source model 1: expected tensor 'first.weight' of shape \(6, 4\)"):
        ModelProblem(Small(0), lambda m: 0.0, sources=[Small(1), _wider()])
    with pytest.raises(TypeError, match="expected a callable evaluate"):
        ModelProblem(Small(0), 3.0)


def _wider():
    model = Small(1)
    model.first = torch.nn.Linear(5, 6)
    return model


def test_a_bfloat16_model_takes_float32_genomes_rounded_once():
    import ml_dtypes

    model = Small(3).to(torch.bfloat16)
    model.norm.float()          # batch norm stays float32 ...
    model.norm.requires_grad_(False)   # ... and frozen: the genes are one dtype
    seen = []
    problem = ModelProblem(model, lambda m: seen.append(problem.flat.read()) or 0.0,
                           sources=[Small(1).to(torch.bfloat16), Small(2).to(torch.bfloat16)])
    assert problem.bases.dtype == problem.flat.numpy_dtype == np.dtype(ml_dtypes.bfloat16)   # kept in bf16
    genome = np.random.default_rng(1).uniform(-1, 1, (1, problem.dim)).astype(np.float32)
    problem.evaluate(genome)
    np.testing.assert_array_equal(seen[0], genome[0].astype(ml_dtypes.bfloat16))


def test_a_callable_initial_gives_generation_0():
    sources = [Small(1), Small(2)]

    def halfway(rng, n):
        return np.repeat(problem.bases.array.astype(np.float64).mean(axis=0)[None], n, axis=0)

    problem = ModelProblem(Small(0), lambda m: 0.0, sources=sources, initial=halfway)
    start = problem.initial_genomes(np.random.default_rng(0), 3, np.float32)
    assert start.shape == (3, problem.dim) and np.array_equal(start[2], problem.bases.array.mean(axis=0))
