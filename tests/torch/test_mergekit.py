"""mergekit configurations in and out: mergekit's documented examples parsed, bad keys
refused with their line, `mpievo merge` on tiny GPT-2 directories against the formulas,
recipes written as YAML that reproduces them, a YAML as the start of a search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
pytest.importorskip("yaml")
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from mpievo.torch import merge_methods as mm  # noqa: E402
from mpievo.torch.hf import hf_bases, load_model, save_best  # noqa: E402
from mpievo.torch.merge import slerp_tensor  # noqa: E402
from mpievo.torch.mergekit_apply import BASE_FILES, TOKENIZER_FILES, apply_config  # noqa: E402
from mpievo.torch.mergekit_config import (MergeConfigError, evaluate_setting, lookup, parse_config,  # noqa: E402
                                          read_config)
from mpievo.torch.mergekit_export import recipe_start, recipe_yaml  # noqa: E402
from mpievo.torch.recipes import RecipeProblem  # noqa: E402

EXAMPLES = Path(__file__).parent / "data" / "mergekit"
LAYERS = 4


def gpt2(seed: int, layers: int = LAYERS):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=32, n_positions=16,
                                     bos_token_id=0, eos_token_id=1)
    return transformers.GPT2LMHeadModel(config).eval()


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(32)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token="t1")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mergekit")
    out = {}
    for name, seed in (("base", 0), ("a", 1), ("b", 2), ("c", 3)):
        out[name] = root / name
        gpt2(seed).save_pretrained(out[name])
    tokenizer().save_pretrained(out["base"])
    torch.manual_seed(5)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=32))
    out["llama"] = root / "llama"
    llama.save_pretrained(out["llama"])
    out["root"] = root
    return out


def tensors(directory) -> dict:
    return load_file(str(Path(directory) / "model.safetensors"))


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "merge.yml"
    path.write_text(text)
    return path


# --- parsing ------------------------------------------------------------------------

def test_mergekits_examples_parse_as_mergekit_reads_them():
    ties = read_config(EXAMPLES / "ties.yml")
    assert ties.merge_method == "ties" and ties.base_model == "TheBloke/Llama-2-13B-fp16" and ties.dtype == "float16"
    first, second, third = ties.models
    assert ties.parameters == {"normalize": True, "int8_mask": True}
    assert lookup("density", "model.layers.3.mlp.up_proj.weight", 0.25, first.parameters) == pytest.approx(0.85)
    assert lookup("weight", "x", 0.5, second.parameters) == pytest.approx(0.5)             # [0, .3, .7, 1] at 1/2
    assert lookup("weight", "model.layers.3.mlp.up_proj.weight", 0.0, third.parameters) == 0.5
    assert lookup("weight", "model.layers.3.self_attn.q_proj.weight", 0.0, third.parameters) == 0
    slerp = read_config(EXAMPLES / "gradient-slerp.yml")
    (piece,) = slerp.slices
    assert [s.layer_range for s in piece.sources] == [(0, 40), (0, 40)]
    assert evaluate_setting("model.layers.20.self_attn.o_proj.weight", slerp.parameters["t"], 0.5) == 0.3
    assert evaluate_setting("model.layers.20.mlp.up_proj.weight", slerp.parameters["t"], 0.5) == 0.7
    assert evaluate_setting("model.norm.weight", slerp.parameters["t"], 0.0) == 0.5
    frank = read_config(EXAMPLES / "orcamini-platy-44layer.yml")
    assert frank.merge_method == "passthrough" and [s.sources[0].layer_range for s in frank.slices] == [(0, 24),
                                                                                                         (20, 40)]
    linear = read_config(EXAMPLES / "linear.yml")
    assert [m.parameters["weight"] for m in linear.models] == [1.0, 0.3, 0.5]
    assert read_config(EXAMPLES / "bio-merge.yml").parameters["normalize"] is False


@pytest.mark.parametrize("text,message", [
    ("merge_method: ties\nmodles:\n  - model: a\n", "<string>:2: .*unknown key 'modles'"),
    ("merge_method: ties\nmodels:\n  - model: a\n    parameters:\n      desnity: 0.5\n",
     "<string>:5: .*'desnity' \\(ties reads"),
    ("merge_method: ties\nmodels:\n  - model: a\n    parameters:\n      lambda: 0.5\n",
     "<string>:5: .*'lambda' \\(a parameter of the whole merge"),
    ("merge_method: nuslerp\nmodels:\n  - model: a\n", "<string>:1: .*'nuslerp' \\(a mergekit method mpievo"),
    ("merge_method: linear\nmodels: [{model: a\n", "<string>:3: expected valid YAML"),
    ("merge_method: linear\nmodules: {}\n", "<string>:2: .*'modules' \\(per-module merges are not supported"),
    ("merge_method: passthrough\nslices:\n  - sources:\n      - model: a\n        layer_range: [4, 2]\n",
     "<string>:5: expected layer_range"),
    ("merge_method: linear\nmodels: [{model: a}]\nslices: [{sources: [{model: a, layer_range: [0, 1]}]}]\n",
     "exactly one of 'models' and 'slices'"),
    ("merge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: [{filter: mlp}]}\n",
     "<string>:4: expected a 'value'"),
    ("merge_method: linear\ndtype: float8\nmodels: [{model: a}]\n", "<string>:2: expected dtype among"),
])
def test_bad_configurations_are_refused_with_their_line(text, message):
    with pytest.raises(MergeConfigError, match=message):
        parse_config(text)


# --- applying ----------------------------------------------------------------------

def layer_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[2]) if len(parts) > 2 and parts[1] == "h" else None


def test_linear_with_a_gradient_and_the_tokenizer_carried(dirs, tmp_path):
    config = write(tmp_path, f"""merge_method: linear
models:
  - model: {dirs['base']}
    parameters: {{weight: [0.0, 3.0]}}
  - model: {dirs['a']}
    parameters: {{weight: 1.0}}
dtype: float32
""")
    out = apply_config(read_config(config), tmp_path / "out")
    got, base, a = tensors(out), tensors(dirs["base"]), tensors(dirs["a"])
    assert set(got) == set(base)
    for name, value in got.items():
        layer = layer_of(name)
        w = 0.0 if layer is None else 3.0 * layer / (LAYERS - 1)              # t = 0 outside the layers
        torch.testing.assert_close(value, (w * base[name] + a[name]) / (w + 1), rtol=1e-6, atol=1e-7)
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.n_layer == LAYERS
    assert transformers.AutoTokenizer.from_pretrained(out)("t3 t5")["input_ids"] == [3, 5]
    carried = [f for f in TOKENIZER_FILES + BASE_FILES if (dirs["base"] / f).is_file()]
    assert {"tokenizer_config.json", "tokenizer.json", "generation_config.json"} <= set(carried)
    for name in carried:
        assert (out / name).read_bytes() == (dirs["base"] / name).read_bytes(), name
    assert (out / "mergekit_config.yml").read_text() == config.read_text()


def test_ties_reads_filters_and_gradients_per_tensor(dirs, tmp_path):
    config = write(tmp_path, f"""merge_method: ties
base_model: {dirs['base']}
models:
  - model: {dirs['a']}
    parameters:
      weight: [0.0, 1.0]
      density: [{{filter: mlp, value: 0.5}}, {{value: 1.0}}]
  - model: {dirs['b']}
    parameters: {{weight: 0.7, density: 0.3}}
parameters: {{lambda: 0.9}}
""")
    got = tensors(apply_config(read_config(config), tmp_path / "out"))
    base, a, b = tensors(dirs["base"]), tensors(dirs["a"]), tensors(dirs["b"])
    for name, value in got.items():
        layer = layer_of(name)
        w = 0.0 if layer is None else layer / (LAYERS - 1)
        density = [0.5 if "mlp" in name else 1.0, 0.3]
        want = mm.gta_tensor(torch.stack([a[name], b[name]]), base[name], [w, 0.7], sparsifier="magnitude",
                             consensus=True, normalize=True, lam=0.9, density=density)
        torch.testing.assert_close(value, want.float(), rtol=1e-6, atol=1e-7)


def test_slerp_per_filter_gradient(dirs, tmp_path):
    config = write(tmp_path, f"""slices:
  - sources:
      - model: {dirs['base']}
        layer_range: [0, {LAYERS}]
      - model: {dirs['a']}
        layer_range: [0, {LAYERS}]
merge_method: slerp
base_model: {dirs['base']}
parameters:
  t:
    - filter: attn
      value: [0, 1]
    - filter: mlp
      value: [1, 0]
    - value: 0.5
dtype: bfloat16
""")
    got = tensors(apply_config(read_config(config), tmp_path / "out"))
    base, a = tensors(dirs["base"]), tensors(dirs["a"])
    for name, value in got.items():
        assert value.dtype == torch.bfloat16
        layer = layer_of(name)
        pos = 0.0 if layer is None else layer / (LAYERS - 1)
        t = pos if "attn" in name else 1 - pos if "mlp" in name else 0.5
        want = slerp_tensor(t, base[name].bfloat16(), a[name].bfloat16())
        torch.testing.assert_close(value, want.bfloat16(), rtol=0, atol=0)


def test_passthrough_slices_stack_layers_and_load(dirs, tmp_path):
    config = write(tmp_path, f"""slices:
  - sources: [{{model: {dirs['a']}, layer_range: [0, 3]}}]
  - sources: [{{model: {dirs['b']}, layer_range: [1, 4]}}]
merge_method: passthrough
""")
    out = apply_config(read_config(config), tmp_path / "out")
    got, a, b = tensors(out), tensors(dirs["a"]), tensors(dirs["b"])
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.n_layer == 6 and len(model.transformer.h) == 6
    torch.testing.assert_close(got["transformer.h.1.mlp.c_fc.weight"], a["transformer.h.1.mlp.c_fc.weight"])
    torch.testing.assert_close(got["transformer.h.3.attn.c_attn.bias"], b["transformer.h.1.attn.c_attn.bias"])
    torch.testing.assert_close(got["transformer.h.5.ln_1.weight"], b["transformer.h.3.ln_1.weight"])
    torch.testing.assert_close(got["transformer.wte.weight"], a["transformer.wte.weight"])     # before: first slice
    torch.testing.assert_close(got["transformer.ln_f.weight"], b["transformer.ln_f.weight"])   # after: last slice


@pytest.mark.parametrize("body,message", [
    ("merge_method: linear\nmodels:\n  - model: {a}\n    parameters: {{weight: 1}}\n"
     "  - model: {llama}\n    parameters: {{weight: 1}}\n", ":5: expected every model of architecture GPT2LMHeadModel"),
    ("merge_method: passthrough\nslices:\n  - sources:\n    - model: {a}\n      layer_range: [2, 6]\n",
     ":4: expected layer_range within the 4 layers"),
    ("merge_method: linear\nmodels:\n  - model: {a}\n    parameters: {{weight: 1}}\ntokenizer_source: {root}/none\n",
     ":5: expected tokenizer_source 'base' or a model directory, got .*missing"),
    ("merge_method: linear\nmodels:\n  - model: {root}/nowhere\n", ":3: expected a local model directory"),
    ("merge_method: ties\nbase_model: {base}\nmodels:\n  - model: {a}\n    parameters: {{density: 0.5}}\n",
     "expected parameter 'weight' of model"),
    ("merge_method: linear\nbase_model: {root}/gone\nmodels:\n  - model: {a}\n    parameters: {{weight: 1}}\n",
     ":2: expected a local model directory"),
])
def test_bad_merges_are_refused_before_any_tensor_is_read(dirs, tmp_path, body, message):
    config = write(tmp_path, body.format(**{k: str(v) for k, v in dirs.items()}))
    with pytest.raises(MergeConfigError, match=message):
        apply_config(read_config(config), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_source_is_never_the_output(dirs, tmp_path):
    config = read_config(write(tmp_path, f"merge_method: passthrough\nmodels: [{{model: {dirs['a']}}}]\n"))
    before = (dirs["a"] / "config.json").read_text()
    with pytest.raises(MergeConfigError, match="an output directory other than the sources"):
        apply_config(config, dirs["a"])
    assert (dirs["a"] / "config.json").read_text() == before


def test_the_command_line(dirs, tmp_path, capsys):
    from mpievo.cli.main import main

    good = write(tmp_path, f"merge_method: passthrough\nmodels: [{{model: {dirs['a']}}}]\n")
    assert main(["merge", str(good), "--out", str(tmp_path / "out"), "--check"]) == 0
    assert "passthrough: 52 tensors, 4 layers" in capsys.readouterr().out and not (tmp_path / "out").exists()
    assert main(["merge", str(good), "--out", str(tmp_path / "out")]) == 0
    torch.testing.assert_close(tensors(tmp_path / "out")["transformer.h.2.ln_2.bias"],
                               tensors(dirs["a"])["transformer.h.2.ln_2.bias"])
    bad = tmp_path / "bad.yml"
    bad.write_text("merge_method: linear\nmodels: [{model: a}]\nweights: 1\n")
    assert main(["merge", str(bad), "--out", str(tmp_path / "no")]) == 2
    assert "bad.yml:3: expected a key among" in capsys.readouterr().err


# --- recipes out and in -------------------------------------------------------------

def score(model):
    return 0.0


@pytest.fixture(scope="module")
def sources(dirs):
    """The model merged into, and the sources loaded once: [base, a, b, c] and [a, b] (slerp)."""
    from mpievo.torch.flat import FlatParameters

    flat = FlatParameters(load_model(dirs["base"]))
    four = hf_bases([dirs["base"], dirs["a"], dirs["b"], dirs["c"]], flat)
    two = hf_bases([dirs["a"], dirs["b"]], flat)
    return flat, four, two


def recipe_problem(sources, method):
    flat, four, two = sources
    if method == "slerp":
        return RecipeProblem(flat, score, two, method=method)
    return RecipeProblem(flat, score, four, method=method, base=None if method in ("linear", "passthrough") else 0)


@pytest.mark.parametrize("method", ["linear", "task_arithmetic", "ties", "dare", "slerp", "model_stock",
                                    "breadcrumbs", "della", "passthrough"])
def test_a_recipe_written_as_yaml_merges_the_same_model(sources, tmp_path, method):
    problem = recipe_problem(sources, method)
    genome = np.random.default_rng(3).uniform(problem.lower, problem.upper)
    names = problem.space.names
    for i, name in enumerate(names):
        if name.endswith("/density") and method in ("dare", "della"):
            genome[i] = 1.0                               # random masks: the two draws differ
        if name.endswith("/scale"):
            genome[i] = 1.0                               # mergekit's model stock has no scale
    if method == "passthrough":
        genome[:] = [1.2, 0.5, 3.9, 1.0, 1.7]             # layers 0-3, other: other = the first and last slices'
    save_best(problem, type("Result", (), {"x": genome, "fun": 0.5})(), tmp_path / "best")
    text = (tmp_path / "best" / "mergekit_config.yml").read_text()
    assert text.startswith(f"# written by mpievo from a {method} recipe (score 0.5)")
    merged = apply_config(read_config(tmp_path / "best" / "mergekit_config.yml"), tmp_path / "again")
    got, want = tensors(merged), dict(problem.model.state_dict())
    for name in problem.flat.names:
        torch.testing.assert_close(got[name], want[name], rtol=2e-6, atol=2e-7, msg=name)


def test_a_yaml_starts_a_search(dirs, sources, tmp_path):
    config = read_config(write(tmp_path, f"""merge_method: ties
base_model: {dirs['base']}
models:
  - model: {dirs['a']}
    parameters: {{weight: [0.2, 0.4, 0.6, 0.8], density: 0.5}}
  - model: {dirs['b']}
    parameters: {{weight: 0.3, density: 0.5}}
  - model: {dirs['c']}
    parameters: {{weight: 0.1, density: 0.5}}
parameters: {{lambda: 0.9}}
"""))
    problem = recipe_problem(sources, "ties")
    x0 = recipe_start(config, problem)
    searched = RecipeProblem(problem.flat, score, problem.sources, method="ties", base=0, x0=x0, search=["weight"])
    assert searched.dim == 3 * len(problem.space.groups)
    searched.materialize(x0[searched.searched])
    want = dict(searched.model.state_dict())
    got = tensors(apply_config(config, tmp_path / "out"))
    for name in problem.flat.names:
        torch.testing.assert_close(got[name], want[name], rtol=2e-6, atol=2e-7, msg=name)
    assert "lambda: 0.9" in recipe_yaml(searched, x0[searched.searched])
    other = parse_config(config.text.replace("merge_method: ties", "merge_method: della"))
    with pytest.raises(MergeConfigError, match="expected merge_method ties for a ties recipe, got della"):
        recipe_start(other, problem)


def test_dare_is_written_as_dare_linear_with_our_rescale(sources, tmp_path):
    problem = recipe_problem(sources, "dare")
    genome = problem.space.average_genome()
    names = problem.space.names
    genome[names.index("layer 1/weight 2")], genome[names.index("layer 1/density")] = 0.3, 0.4
    config = parse_config(recipe_yaml(problem, genome))
    assert config.merge_method == "dare_linear" and config.parameters["rescale"] is False
    tensor = "transformer.h.1.mlp.c_fc.weight"
    assert lookup("weight", tensor, 0.0, config.models[2].parameters) == pytest.approx(0.3 / 0.4)   # w / density
    assert lookup("density", tensor, 0.0, config.models[2].parameters) == pytest.approx(0.4)


def test_what_mergekit_cannot_say_is_said_in_a_comment(sources):
    stock = recipe_problem(sources, "model_stock")
    assert "has none" not in recipe_yaml(stock, np.ones(stock.dim))
    assert "mergekit's model_stock has none" in recipe_yaml(stock, np.full(stock.dim, 0.5))
    passthrough = recipe_problem(sources, "passthrough")
    assert "outside the layers take source [3]" in recipe_yaml(passthrough, [0.0, 1.0, 2.0, 1.0, 3.0])
