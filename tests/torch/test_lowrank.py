"""Low-rank ES populations: the batched forward equals materialising each member and running
it; the update is the ES gradient of the members' dense perturbations; bad ranks refused."""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mpievo.evo.algorithms.es import centered_ranks  # noqa: E402
from mpievo.torch.lowrank import LowRankPopulation, perturbed_modules  # noqa: E402

P, B = 4, 2
#: the same code on the model's device: the CPU here, and CUDA where torch sees one
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def tiny_gpt2(dtype=torch.float32):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval().to(dtype)


def tokens():
    return torch.randint(0, 64, (B, 8), generator=torch.Generator().manual_seed(1))


def materialised(model, population, member):
    clone = copy.deepcopy(model)
    modules = dict(clone.named_modules())
    with torch.no_grad():
        for (name, _), delta in zip(population.modules, population.member_deltas(member)):
            for key, value in delta.items():
                getattr(modules[name], key).add_(value)
    return clone


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-5), (torch.bfloat16, 0.1)])
def test_batched_low_rank_forward_equals_each_member_materialised(dtype, tol, device):
    model = tiny_gpt2(dtype).to(device)
    population = LowRankPopulation(model, popsize=P, rank=2, sigma=0.05, seed=3)
    x = tokens().to(device)
    with torch.no_grad(), population.generation(1):
        batched = model(x.repeat(P, 1)).logits
    base = model(x).logits
    for member in range(P):
        alone = materialised(model, population, member)(x).logits
        got = batched[member * B:(member + 1) * B]
        assert torch.allclose(got.float(), alone.float(), atol=tol, rtol=tol), (member, (got - alone).abs().max())
        assert not torch.allclose(got.float(), base.float(), atol=tol, rtol=tol)      # it is perturbed
    # antithetic pairs: member 1's perturbation is minus member 0's
    for plus, minus in zip(population.member_deltas(0), population.member_deltas(1)):
        assert all(torch.equal(plus[key], -minus[key]) for key in plus)


@pytest.mark.parametrize("device", DEVICES)
def test_step_is_the_es_gradient_of_the_dense_perturbations(device):
    model = tiny_gpt2().to(device)
    population = LowRankPopulation(model, popsize=P, rank=2, sigma=0.05, seed=3)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with population.generation(2):
        deltas = [population.member_deltas(k) for k in range(P)]
    fitness = np.array([3.0, 1.0, 4.0, 2.0])
    population.step(fitness, learning_rate=0.1)
    u = centered_ranks(fitness)
    for index, (name, module) in enumerate(population.modules):
        for key in ("weight", "bias"):
            expected = sum(u[k] * deltas[k][index][key] for k in range(P)) / (P * 0.05 ** 2) * 0.1
            got = getattr(module, key).detach() - before[f"{name}.{key}"]
            assert torch.allclose(got, expected, atol=1e-6), (name, key)
    assert torch.equal(model.transformer.wte.weight, before["transformer.wte.weight"])   # embeddings stay


def test_nothing_is_placed_off_the_models_device():
    # a model on the meta device: every tensor the population makes must follow it there
    # (a CPU tensor mixed into its element-wise arithmetic raises), as on a GPU
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)).to("meta")
    population = LowRankPopulation(model, popsize=P, rank=2, sigma=0.1)
    with torch.no_grad(), population.generation(1):
        out = model(torch.zeros(P * B, 4, device="meta"))
        deltas = population.member_deltas(1)
    population.step(np.arange(P, dtype=np.float64), learning_rate=0.1)
    placed = [out] + [v for entry in population._noise for v in entry.values()] \
        + [v for entry in deltas for v in entry.values()] + list(model.parameters())
    assert out.shape == (P * B, 3) and {t.device.type for t in placed} == {"meta"}


def test_perturbed_modules_skip_embeddings_and_a_tied_head():
    names = [name for name, _ in perturbed_modules(tiny_gpt2())]
    assert "lm_head" not in names and "transformer.wte" not in names
    assert "transformer.h.0.attn.c_attn" in names and "transformer.ln_f" in names


@pytest.mark.parametrize("settings, message", [
    ({"rank": 40}, "rank: expected at most the smaller side 32 of transformer.h.0.attn.c_attn.weight (32, 96), "
                   "got 40"),
    ({"popsize": 5}, "expected popsize to be an even int >= 2 (antithetic pairs), got 5"),
    ({"sigma": 0.0}, "expected sigma > 0, got 0.0"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError) as err:
        LowRankPopulation(tiny_gpt2(), **{"popsize": 4, "rank": 2, "sigma": 0.1, **settings})
    assert str(err.value) == message
