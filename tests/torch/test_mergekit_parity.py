"""`mpievo merge` against mergekit's own `mergekit-yaml` on tiny GPT-2 and Llama models.

Runs only where mergekit is installed in a virtual environment of its own (it pulls
transformers >= 5): set ``MERGEKIT_YAML`` to its ``mergekit-yaml`` (unset: skipped, so
a mergekit left on a machine does not add minutes to CI), e.g.::

    python3 -m venv /tmp/mk-venv && /tmp/mk-venv/bin/pip install torch==2.13.0 mergekit
    MERGEKIT_YAML=/tmp/mk-venv/bin/mergekit-yaml python -m pytest -q tests/torch/test_mergekit_parity.py

Deterministic methods must agree within the dtype's rounding. DARE and DELLA draw their
masks from different generators in the two tools, so for them one source is merged and
mergekit's mask (the entries it changed) is replayed through mpievo's formula.
The results are recorded in docs/guides/merging.md.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
pytest.importorskip("yaml")
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from mpievo.torch import merge_methods as mm  # noqa: E402
from mpievo.torch.mergekit_apply import apply_config  # noqa: E402
from mpievo.torch.mergekit_config import parse_config  # noqa: E402

MERGEKIT = Path(os.environ.get("MERGEKIT_YAML", ""))
pytestmark = pytest.mark.skipif(not MERGEKIT.is_file(), reason="MERGEKIT_YAML names no mergekit-yaml")

DETERMINISTIC = {
    "linear": "models:\n{models_w}",
    "task_arithmetic": "base_model: {base}\nparameters: {{lambda: 0.8}}\nmodels:\n{models_w}",
    "ties": "base_model: {base}\nmodels:\n{models_wd}",
    "breadcrumbs": "base_model: {base}\nmodels:\n{models_wdg}",
    "breadcrumbs_ties": "base_model: {base}\nmodels:\n{models_wdg}",
    "model_stock": "base_model: {base}\nmodels:\n{models}",
    "slerp": "base_model: {base}\nparameters:\n  t: [{{filter: attn, value: [0, 1]}}, {{value: 0.3}}]\n"
             "models:\n  - model: {base}\n  - model: {a}\n",
    "passthrough": "slices:\n  - sources: [{{model: {a}, layer_range: [0, 2]}}]\n"
                   "  - sources: [{{model: {b}, layer_range: [1, 4]}}]\n",
}
RANDOM = ("dare_linear", "dare_ties", "della", "della_linear")
SPARSIFIED = ("ties", "breadcrumbs", "breadcrumbs_ties")


def models(kind: str, root: Path) -> dict:
    out = {}
    for name, seed in (("base", 0), ("a", 1), ("b", 2), ("c", 3)):
        torch.manual_seed(seed)
        if kind == "gpt2":
            config = transformers.GPT2Config(n_layer=4, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
            model = transformers.GPT2LMHeadModel(config)
        else:
            config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                              num_attention_heads=2, num_key_value_heads=2, vocab_size=64)
            model = transformers.LlamaForCausalLM(config)
        out[name] = root / f"{kind}-{name}"
        model.save_pretrained(out[name])
    return out


def yaml_for(method: str, paths: dict, dtype: str) -> str:
    ms = ["a", "b", "c"]
    fill = {
        "base": paths["base"], "a": paths["a"], "b": paths["b"],
        "models": "".join(f"  - model: {paths[m]}\n" for m in ms),
        "models_w": "".join(f"  - model: {paths[m]}\n    parameters: {{weight: {w}}}\n"
                            for m, w in zip(ms, ("[0.2, 1.0]", 0.5, 0.9))),
        "models_wd": "".join(f"  - model: {paths[m]}\n    parameters: {{weight: {w}, density: {d}}}\n"
                             for m, w, d in zip(ms, (0.6, "[{filter: mlp, value: 0.2}, {value: 1.0}]", 0.9),
                                                (0.5, 0.7, "[0.3, 0.9]"))),
        "models_wdg": "".join(f"  - model: {paths[m]}\n    parameters: {{weight: {w}, density: 0.8, gamma: 0.05}}\n"
                              for m, w in zip(ms, (0.6, 0.4, 0.9))),
    }
    return f"merge_method: {method}\ndtype: {dtype}\n" + DETERMINISTIC[method].format(**fill)


def run_both(text: str, root: Path, name: str):
    path = root / f"{name}.yml"
    path.write_text(text)
    theirs, ours = root / f"{name}-mergekit", root / f"{name}-mpievo"
    done = subprocess.run([str(MERGEKIT), str(path), str(theirs), "--random-seed", "0", "--no-copy-tokenizer"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    apply_config(parse_config(text, str(path)), ours)
    their = {}
    for file in theirs.glob("*.safetensors"):
        their.update(load_file(str(file)))
    return their, load_file(str(ours / "model.safetensors"))


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    return root, {kind: models(kind, root) for kind in ("gpt2", "llama")}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("method", list(DETERMINISTIC))
def test_deterministic_methods_match_mergekit(trees, method, kind, dtype):
    root, paths = trees
    theirs, ours = run_both(yaml_for(method, paths[kind], dtype), root, f"{method}-{kind}-{dtype}")
    common = sorted(set(theirs) & set(ours))
    assert common and set(ours) - set(theirs) <= {"lm_head.weight"}, sorted(set(ours) ^ set(theirs))[:5]
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=2 ** -7, atol=2 ** -7)
    off = total = 0
    for name in common:
        assert theirs[name].dtype == ours[name].dtype, name
        if dtype == "bfloat16" and method in SPARSIFIED:
            diff = (ours[name].float() - theirs[name].float()).abs()
            off += int((diff > tol["atol"] + tol["rtol"] * theirs[name].float().abs()).sum())
            total += diff.numel()
        else:
            torch.testing.assert_close(ours[name].float(), theirs[name].float(), **tol, msg=name)
    # bfloat16 magnitude ranks: equal magnitudes (ties) and signs of near-zero sums in bfloat16
    # arithmetic decide a few entries otherwise (docs/guides/merging.md, parity)
    assert off <= 0.005 * total, f"{off} of {total} entries differ"


@pytest.mark.parametrize("method", RANDOM)
def test_random_methods_replay_mergekits_mask(trees, method):
    root, paths = trees
    p = paths["llama"]
    density = 0.6
    extra = ", epsilon: 0.2" if "della" in method else ""
    text = (f"merge_method: {method}\ndtype: float32\nbase_model: {p['base']}\nparameters: {{lambda: 0.9}}\n"
            f"models:\n  - model: {p['a']}\n    parameters: {{weight: 0.7, density: {density}{extra}}}\n")
    theirs, _ = run_both(text, root, method)
    base, a = load_file(str(next(p["base"].glob("*.safetensors")))), load_file(str(next(p["a"].glob("*.safetensors"))))
    sparsifier, consensus, normalize, rescale = mm.GTA[method]
    rates = []
    for name, merged in theirs.items():
        tau = a[name] - base[name]
        mask = (merged - base[name]).abs() > 1e-12 * (1 + base[name].abs())
        if bool((tau != 0).any()):                         # (norm weights start at 1 in both: no task vector)
            rates.append(float(mask[tau != 0].double().mean()))
        masked = mm.rescale_l1(tau, tau * mask) if rescale else tau * mask
        want = mm.gta_tensor((base[name] + masked)[None], base[name], [0.7], consensus=consensus,
                             normalize=normalize, lam=0.9)
        torch.testing.assert_close(merged, want.float(), rtol=1e-5, atol=1e-6, msg=name)
    assert abs(sum(rates) / len(rates) - density) < 0.1


@pytest.mark.parametrize("method", ["linear", "ties", "breadcrumbs", "model_stock", "slerp", "passthrough"])
def test_mergekit_reproduces_an_evolved_recipe(trees, method):
    import numpy as np

    from mpievo.torch.flat import FlatParameters
    from mpievo.torch.hf import hf_bases, load_model, save_best
    from mpievo.torch.recipes import RecipeProblem

    root, paths = trees
    p = paths["gpt2"]
    flat = FlatParameters(load_model(p["base"]))
    rows = [p["a"], p["b"]] if method == "slerp" else [p["base"], p["a"], p["b"], p["c"]]
    base = None if method in ("linear", "slerp", "passthrough") else 0
    problem = RecipeProblem(flat, lambda model: 0.0, hf_bases(rows, flat), method=method, base=base)
    genome = np.random.default_rng(8).uniform(problem.lower, problem.upper)
    for i, name in enumerate(problem.space.names):
        if name.endswith("/scale"):
            genome[i] = 1.0
    if method == "passthrough":
        genome[:] = [2.5, 0.2, 3.1, 1.9, 2.0]
    save_best(problem, type("Result", (), {"x": genome, "fun": 0.0})(), root / f"recipe-{method}")
    out = root / f"recipe-{method}-mergekit"
    done = subprocess.run([str(MERGEKIT), str(root / f"recipe-{method}" / "mergekit_config.yml"), str(out),
                           "--no-copy-tokenizer"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = load_file(str(next(out.glob("*.safetensors"))))
    state = problem.model.state_dict()
    for name in problem.flat.names:
        torch.testing.assert_close(theirs[name], state[name], rtol=1e-5, atol=1e-6, msg=name)
