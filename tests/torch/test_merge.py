"""Merge methods against independent numpy formulas; recipes as genomes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import Small, gpt2  # noqa: E402

from mpievo.torch import merge  # noqa: E402
from mpievo.torch.flat import FlatParameters  # noqa: E402
from mpievo.torch.problem import model_bases  # noqa: E402
from mpievo.torch.recipes import RecipeProblem, RecipeSpace, layer_groups  # noqa: E402

RNG = np.random.default_rng(7)
BASE = RNG.standard_normal((5, 8))
SOURCES = BASE + RNG.standard_normal((3, 5, 8))
WEIGHTS = np.array([0.2, 0.5, 0.3])


def t(array) -> torch.Tensor:
    return torch.as_tensor(array)


def ties_reference(base, sources, weights, density, lam):
    """TIES from the paper, written plainly: trim each task vector, elect, disjoint mean."""
    out = np.empty_like(base).reshape(-1)
    taus = (sources - base).reshape(len(sources), -1)
    trimmed = np.zeros_like(taus)
    for i, tau in enumerate(taus):
        k = max(1, int(density * tau.size))
        top = np.argsort(-np.abs(tau), kind="stable")[:k]
        trimmed[i, top] = tau[top]
    weighted = weights[:, None] * trimmed
    for j in range(out.size):
        sign = 1.0 if weighted[:, j].sum() >= 0 else -1.0
        agree = [i for i in range(len(taus)) if np.sign(weighted[i, j]) == sign]
        total = sum(weights[i] for i in agree)
        out[j] = sum(weighted[i, j] for i in agree) / (total if total else 1.0)
    return base + lam * out.reshape(base.shape)


def test_linear_and_task_arithmetic_match_their_formulas():
    got = merge.linear_tensor(t(SOURCES), WEIGHTS).numpy()
    np.testing.assert_allclose(got, np.tensordot(WEIGHTS, SOURCES, 1) / WEIGHTS.sum(), rtol=1e-12)
    got = merge.based_tensor("task_arithmetic", t(SOURCES), t(BASE), WEIGHTS, lam=0.7).numpy()
    np.testing.assert_allclose(got, BASE + 0.7 * np.tensordot(WEIGHTS, SOURCES - BASE, 1), rtol=1e-12)


@pytest.mark.parametrize("density", [1.0, 0.5, 0.2])
def test_ties_matches_the_plain_reference(density):
    got = merge.based_tensor("ties", t(SOURCES), t(BASE), WEIGHTS, lam=1.3, density=density).numpy()
    np.testing.assert_allclose(got, ties_reference(BASE, SOURCES, WEIGHTS, density, 1.3), rtol=1e-12, atol=1e-12)


def test_dare_drops_rescales_and_is_keyed_by_its_seed():
    base, source = t(np.zeros((200, 50))), t(np.ones((1, 200, 50)))
    def run(seed):
        return merge.based_tensor("dare", source, base, [1.0], density=0.25,
                                  generator=merge.dare_generator(seed, 3, "cpu")).numpy()
    first, again, other = run(11), run(11), run(12)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert set(np.unique(first)) == {0.0, 4.0}                      # kept entries rescaled by 1/density
    assert abs(np.mean(first != 0) - 0.25) < 0.02


def test_slerp_matches_the_formula_and_its_endpoints():
    a, b = RNG.standard_normal(40), RNG.standard_normal(40)
    na, nb = a / np.linalg.norm(a), b / np.linalg.norm(b)
    theta = np.arccos(np.dot(na, nb))
    want = (np.sin(0.3 * theta) * b + np.sin(0.7 * theta) * a) / np.sin(theta)
    np.testing.assert_allclose(merge.slerp_tensor(0.3, t(a), t(b)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(merge.slerp_tensor(0.0, t(a), t(b)).numpy(), a, rtol=1e-12)
    np.testing.assert_allclose(merge.slerp_tensor(1.0, t(a), t(b)).numpy(), b, rtol=1e-12)
    np.testing.assert_allclose(merge.slerp_tensor(0.4, t(a), t(2 * a)).numpy(), 1.4 * a, rtol=1e-12)  # parallel: linear


def test_mergekit_agrees_where_it_is_installed():
    mergekit_ties = pytest.importorskip("mergekit.merge_methods.generalized_task_arithmetic")
    sparsify = pytest.importorskip("mergekit.sparsify")
    deltas = t(SOURCES - BASE)
    trimmed = torch.stack([sparsify.magnitude(d, density=0.5) for d in deltas])
    ours = torch.stack([merge.trim(d, 0.5) for d in deltas])
    torch.testing.assert_close(ours, trimmed, rtol=0, atol=0)
    weighted = t(WEIGHTS).reshape(3, 1, 1) * ours
    mask = mergekit_ties.get_mask(weighted, method="sum")
    assert torch.equal(mask, torch.sign(weighted) == merge.elect_sign(weighted))
    mergekit_slerp = pytest.importorskip("mergekit.merge_methods.slerp")
    a, b = t(SOURCES[0].reshape(1, -1)), t(SOURCES[1].reshape(1, -1))     # one row: the whole tensor
    torch.testing.assert_close(merge.slerp_tensor(0.3, a, b), mergekit_slerp.slerp(torch.tensor(0.3), a, b))


def test_whole_model_merges_are_the_tensor_merges_of_each_parameter():
    models = [gpt2(seed) for seed in range(3)]
    target = gpt2(9)
    flat = FlatParameters(target)
    genomes = np.stack([FlatParameters(m).read() for m in models])
    merge.average(flat, genomes)
    np.testing.assert_allclose(flat.read(), genomes.mean(0), rtol=1e-6, atol=1e-7)
    merge.ties(flat, genomes[0], genomes[1:], density=0.3, lam=1.0)
    part = flat.segment("transformer.h.1.mlp.c_fc.weight")
    want = ties_reference(genomes[0, part].astype(np.float64), genomes[1:, part].astype(np.float64),
                          np.ones(2), 0.3, 1.0)
    np.testing.assert_allclose(flat.read()[part], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="expected a base model for 'ties'"):
        merge.merge_into(flat, "ties", genomes)
    with pytest.raises(ValueError, match="expected 2 source models for 'slerp', got 3"):
        merge.slerp(flat, genomes)
    with pytest.raises(ValueError, match=r"expected source genomes of shape \(count, 27008\), got \(3, 5\)"):
        merge.average(flat, genomes[:, :5])


def test_recipe_space_genes_and_decoding():
    groups, group_of = layer_groups(["transformer.wte.weight", "transformer.h.0.ln_1.weight",
                                     "transformer.h.3.mlp.c_fc.bias", "transformer.ln_f.weight"], 2)
    assert groups == ["layers 0-1", "layers 2-3", "other"] and group_of.tolist() == [2, 0, 1, 2]
    space = RecipeSpace("ties", ["layer 0", "other"], 2)
    assert space.names == ["layer 0/weight 0", "layer 0/weight 1", "layer 0/density",
                           "other/weight 0", "other/weight 1", "other/density", "lambda"]
    recipe = space.decode(np.arange(7) / 10)
    assert recipe == {"method": "ties", "lambda": 0.6, "groups": {
        "layer 0": {"weights": [0.0, 0.1], "density": 0.2}, "other": {"weights": [0.3, 0.4], "density": 0.5}}}
    with pytest.raises(ValueError, match="expected a merge method among"):
        RecipeSpace("median", ["other"], 2)


def test_a_recipe_materialises_its_merge_from_the_resident_sources():
    base, experts = Small(0), [Small(1), Small(2)]
    problem = RecipeProblem(Small(3), lambda m: 0.0, experts, method="task_arithmetic", base=base)
    assert problem.space.groups == ["other"] and problem.row_dtype == np.float64
    problem.materialize(np.array([0.25, 0.75, 0.5]))
    genomes = model_bases([base, *experts], problem.flat).array
    want = genomes[0] + 0.5 * (0.25 * (genomes[1] - genomes[0]) + 0.75 * (genomes[2] - genomes[0]))
    np.testing.assert_allclose(problem.flat.read(), want, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="expected a base model for 'dare'"):
        RecipeProblem(Small(3), lambda m: 0.0, experts, method="dare")


def test_groups_by_name_a_fixed_lambda_and_the_average_start():
    """group_by, lam and start="average": generation 0 begins with the plain average."""
    base, experts = Small(0), [Small(1), Small(2)]
    problem = RecipeProblem(Small(3), lambda m: 0.0, experts, method="task_arithmetic", base=base, lam=1.0,
                            group_by=lambda name: name.split(".")[0], start="average")
    assert problem.space.groups == ["first", "norm", "second"] and problem.group_of.tolist() == [0, 0, 1, 1, 2, 2]
    assert problem.space.names[:2] == ["first/weight 0", "first/weight 1"] and problem.dim == 6   # no lambda gene
    start = problem.initial_genomes(np.random.default_rng(0), 4, np.float64)
    assert np.array_equal(start[0], np.full(6, 0.5)) and np.all((start[1:] >= 0) & (start[1:] <= 1))
    problem.materialize(start[0])
    genomes = model_bases(experts, problem.flat).array
    np.testing.assert_allclose(problem.flat.read(), genomes.mean(axis=0), rtol=1e-6, atol=1e-7)
    assert problem.materialize(start[1])["lambda"] == 1.0
    assert RecipeSpace("ties", ["other"], 2).average_genome().tolist() == [0.5, 0.5, 1.0, 1.0]
    with pytest.raises(ValueError, match="expected group_by"):
        RecipeProblem(Small(3), lambda m: 0.0, experts, method="linear", group_by=lambda name: None)
    with pytest.raises(ValueError, match="expected start among"):
        RecipeProblem(Small(3), lambda m: 0.0, experts, method="linear", start="best")
