"""model stock, DELLA, breadcrumbs, DARE (mergekit's), passthrough against formulas written
from mergekit's definitions; the new methods as recipe genomes, at 1 and 2 ranks."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import Small  # noqa: E402

from mpievo.torch import merge_methods as mm  # noqa: E402
from mpievo.torch.merge import dare_generator, merge_into  # noqa: E402
from mpievo.torch.problem import model_bases  # noqa: E402
from mpievo.torch.flat import FlatParameters  # noqa: E402
from mpievo.torch.recipes import RecipeProblem, RecipeSpace  # noqa: E402

RNG = np.random.default_rng(11)
BASE = RNG.standard_normal((6, 20))
SOURCES = BASE + RNG.standard_normal((3, 6, 20))
WEIGHTS = np.array([0.5, 0.3, 0.9])


def t(array) -> torch.Tensor:
    return torch.as_tensor(array)


def model_stock_reference(base, sources):
    """Model Stock (arXiv 2403.19522 as mergekit computes it): one ratio per tensor from the
    mean pairwise cosine of the task vectors (norm products below 1e-6 read as 1e-6)."""
    w0, ws = base.reshape(-1), sources.reshape(len(sources), -1)
    taus = ws - w0
    cos = [np.dot(taus[i], taus[j]) / max(np.linalg.norm(taus[i]) * np.linalg.norm(taus[j]), 1e-6)
           for i in range(len(taus)) for j in range(i + 1, len(taus))]
    c, n = np.mean(cos), len(taus)
    ratio = n * c / (1 + (n - 1) * c)
    return (ratio * ws.mean(0) + (1 - ratio) * w0).reshape(base.shape)


def breadcrumbs_reference(base, sources, weights, density, gamma, lam):
    """Breadcrumbs: per task vector drop the gamma largest and then the smallest magnitudes
    until density remain; the weighted sum times lambda."""
    out = np.zeros(base.size)
    for w, source in zip(weights, sources):
        tau = (source - base).reshape(-1)
        n = tau.size
        keep, top = int(density * n), int(gamma * n)
        bottom = max(n - keep - top, 0)
        top = n - keep - bottom
        order = np.argsort(np.abs(tau), kind="stable")
        kept = np.zeros(n)
        kept[order[bottom:n - top]] = 1
        out += w * tau * kept
    return base + lam * out.reshape(base.shape)


def test_model_stock_matches_the_papers_ratio():
    got = mm.model_stock_tensor(t(SOURCES), t(BASE)).numpy()
    np.testing.assert_allclose(got, model_stock_reference(BASE, SOURCES), rtol=1e-10)
    rows = mm.model_stock_tensor(t(SOURCES), t(BASE), filter_wise=True).numpy()
    for r in range(BASE.shape[0]):                                 # filter_wise: one ratio per row
        np.testing.assert_allclose(rows[r], model_stock_reference(BASE[r], SOURCES[:, r]), rtol=1e-10)
    with pytest.raises(ValueError, match="at least 2 sources"):
        mm.model_stock_tensor(t(SOURCES[:1]), t(BASE))


@pytest.mark.parametrize("density,gamma", [(0.8, 0.05), (0.5, 0.1), (0.95, 0.1)])
def test_breadcrumbs_drops_outliers_and_small_entries(density, gamma):
    sparsifier, consensus, normalize, rescale = mm.GTA["breadcrumbs"]
    got = mm.gta_tensor(t(SOURCES), t(BASE), WEIGHTS, sparsifier=sparsifier, consensus=consensus,
                        normalize=normalize, rescale=rescale, lam=0.8, density=density, gamma=gamma).numpy()
    want = breadcrumbs_reference(BASE, SOURCES, WEIGHTS, density, gamma, 0.8)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_della_keeps_large_entries_more_often_and_rescales_to_the_l1_norm():
    tau = t(np.tile(np.arange(1.0, 51.0), (400, 1)))               # each row: ranks 0..49 by magnitude
    kept = mm.sparsify(tau, "della_magprune", 0.5, epsilon=0.3, generator=dare_generator(1, 0, "cpu"))
    rate = (kept != 0).double().mean(0).numpy()
    want = 0.5 - 0.3 + 0.6 * np.arange(50) / 49                     # density -/+ epsilon by rank
    assert np.abs(rate - want).max() < 0.1, rate
    assert abs(rate[:10].mean() - want[:10].mean()) < 0.04 and abs(rate[-10:].mean() - want[-10:].mean()) < 0.04
    scaled = mm.sparsify(tau, "della_magprune", 0.5, epsilon=0.3, rescale=True, generator=dare_generator(1, 0, "cpu"))
    np.testing.assert_array_equal((scaled != 0).numpy(), (kept != 0).numpy())  # same key, same mask
    assert float(scaled.abs().sum()) == pytest.approx(float(tau.abs().sum()), rel=1e-9)
    with pytest.raises(ValueError, match="density \\+/- epsilon"):
        mm.sparsify(tau, "della_magprune", 0.2, epsilon=0.3, generator=dare_generator(1, 0, "cpu"))


def test_della_elects_signs_and_normalises_like_ties_at_full_density():
    sparsifier, consensus, normalize, rescale = mm.GTA["della"]
    got = mm.gta_tensor(t(SOURCES), t(BASE), WEIGHTS, sparsifier=sparsifier, consensus=consensus,
                        normalize=normalize, rescale=rescale, lam=1.2, density=1.0).numpy()
    weighted = WEIGHTS[:, None, None] * (SOURCES - BASE)
    sign = np.where(weighted.sum(0) >= 0, 1.0, -1.0)
    agree = np.sign(weighted) == sign
    total = (WEIGHTS[:, None, None] * agree).sum(0)
    want = BASE + 1.2 * (weighted * agree).sum(0) / np.where(total == 0, 1, total)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_dare_as_mergekit_rescales_each_task_vector_to_its_l1_norm():
    sparsifier, consensus, normalize, rescale = mm.GTA["dare_linear"]
    base, source = np.zeros((100, 40)), RNG.standard_normal((1, 100, 40))
    got = mm.gta_tensor(t(source), t(base), [1.0], sparsifier=sparsifier, consensus=consensus, normalize=normalize,
                        rescale=rescale, density=0.3, generator=dare_generator(5, 0, "cpu")).numpy()
    kept = got != 0
    assert abs(kept.mean() - 0.3) < 0.03
    scale = np.abs(source).sum() / np.abs(source[0][kept]).sum()
    np.testing.assert_allclose(got[kept], source[0][kept] * scale, rtol=1e-12)


def test_whole_model_functions_and_passthrough():
    model, sources = Small(0), [Small(1), Small(2), Small(3)]
    flat = FlatParameters(model)
    genomes = model_bases(sources, flat).array
    merge_into(flat, "passthrough", genomes, source=2, scale=0.5)
    np.testing.assert_allclose(flat.flat.numpy(), 0.5 * genomes[2], rtol=1e-6)
    from mpievo.torch.merge import model_stock

    model_stock(flat, genomes[0], genomes[1:])
    for (start, stop) in zip(flat.offsets[:-1], flat.offsets[1:]):
        part = slice(int(start), int(stop))
        np.testing.assert_allclose(flat.flat.numpy()[part],
                                   model_stock_reference(genomes[0][part], genomes[1:, part]), rtol=1e-5)


def test_recipe_spaces_of_the_new_methods():
    space = RecipeSpace("della", ["g0", "g1"], 2)
    assert space.names[:4] == ["g0/weight 0", "g0/weight 1", "g0/density", "g0/epsilon"]
    recipe = space.decode([0.2, 0.4, 0.3, 0.5, 1, 1, 0.9, 1.0, 1.5])
    assert recipe["groups"]["g0"]["epsilon"] == pytest.approx(0.5 * 0.999 * 0.3)       # within density's margin
    assert recipe["groups"]["g1"]["epsilon"] == pytest.approx(0.999 * 0.1) and recipe["lambda"] == 1.5
    assert RecipeSpace("breadcrumbs", ["g"], 2).names == ["g/weight 0", "g/weight 1", "g/density", "g/gamma",
                                                        "lambda"]
    assert RecipeSpace("model_stock", ["a", "b"], 3).names == ["a/scale", "b/scale"]
    passthrough = RecipeSpace("passthrough", ["a", "b"], 3)
    assert passthrough.upper.tolist() == [3.0, 3.0]
    assert [g["source"] for g in passthrough.decode([2.7, 3.0])["groups"].values()] == [2, 2]


def score(model):
    x = torch.linspace(-1, 1, 32).reshape(8, 4)
    with torch.no_grad():
        return float((model.eval()(x) ** 2).mean())


@pytest.mark.parametrize("method", ["model_stock", "della", "breadcrumbs", "passthrough"])
def test_recipes_of_the_new_methods_merge_what_the_functions_merge(method):
    sources = [Small(1), Small(2), Small(3)]
    based = method != "passthrough"
    problem = RecipeProblem(Small(9), score, sources, base=Small(0) if based else None, method=method)
    genome = np.random.default_rng(2).uniform(problem.lower, problem.upper)
    recipe = problem.materialize(genome)
    got = problem.flat.flat.clone().numpy()
    rows = torch.as_tensor(problem.sources.array)
    for index, (start, stop) in enumerate(zip(problem.flat.offsets[:-1], problem.flat.offsets[1:])):
        part = slice(int(start), int(stop))
        group = list(recipe["groups"].values())[problem.group_of[index]]
        stack = rows[problem.merged_rows][:, part]
        if method == "passthrough":
            want = stack[group["source"]]
        elif method == "model_stock":
            want = mm.model_stock_tensor(stack, rows[0, part], scale=group["scale"])
        else:
            sp, co, no, re = mm.GTA[method]
            want = mm.gta_tensor(stack, rows[0, part], group["weights"], sparsifier=sp, consensus=co, normalize=no,
                                 rescale=re, lam=recipe["lambda"], density=group["density"],
                                 gamma=group.get("gamma", 0.0), epsilon=group.get("epsilon", 0.0),
                                 generator=dare_generator(0, index, "cpu"))
        np.testing.assert_allclose(got[part], want.numpy(), rtol=1e-6, atol=1e-7)


def test_a_recipe_searches_a_declared_subset_from_x0():
    sources = [Small(1), Small(2)]
    full = RecipeProblem(Small(9), score, sources, base=Small(0), method="ties")
    x0 = full.space.average_genome()
    x0[full.space.names.index("lambda")] = 0.7
    problem = RecipeProblem(Small(9), score, sources, base=Small(0), method="ties", x0=x0, search=["weight"])
    assert problem.dim == sum("weight" in n for n in full.space.names)
    genomes = problem.initial_genomes(np.random.default_rng(0), 4, np.float64)
    np.testing.assert_array_equal(genomes[0], x0[problem.searched])           # x0 first
    recipe = problem.space.decode(problem.full_genome(genomes[1]))
    assert recipe["lambda"] == 0.7 and all(g["density"] == 1.0 for g in recipe["groups"].values())
    with pytest.raises(ValueError, match="expected genes to search"):
        RecipeProblem(Small(9), score, sources, base=Small(0), method="ties", search=["wieght"])
    with pytest.raises(ValueError, match="at least one gene"):
        RecipeProblem(Small(9), score, sources, base=Small(0), method="ties", search=[])
    assert RecipeProblem(Small(9), score, sources, base=Small(0), method="ties", search="lambda").dim == 1
    x0[0] = 3.0
    with pytest.raises(ValueError, match="within the recipe's box"):
        RecipeProblem(Small(9), score, sources, base=Small(0), method="ties", x0=x0)


@pytest.mark.mpi(min_size=2)
def test_della_recipe_search_matches_one_process():
    import mpievo
    from mpi_support import all_ranks_agree
    from mpievo.comm import SelfComm
    from mpievo.parallel.world import world_comm
    from mpi4py import MPI

    comm = world_comm()
    islands = max(2, comm.size)

    def make():
        return RecipeProblem(Small(3), score, [Small(1), Small(2)], base=Small(0), method="della", maximize=False)

    common = dict(budget=80 * islands, islands=islands, seed=4, config={"engine": {"algorithm": "cmaes"}})
    parallel, alone = mpievo.minimize(make(), comm=comm, **common), mpievo.minimize(make(), comm=SelfComm(), **common)
    same = np.array_equal(parallel.x, alone.x) and parallel.fun == alone.fun
    all_ranks_agree(MPI.COMM_WORLD, same, f"{parallel.fun} vs {alone.fun}")
