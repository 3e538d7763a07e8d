"""Hugging Face directories in and out, and the bad-input errors before any breeding."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import gpt2, logits, tokens  # noqa: E402

from mpievo.torch import hf  # noqa: E402
from mpievo.torch.flat import FlatParameters  # noqa: E402
from mpievo.torch.problem import ModelProblem  # noqa: E402


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Two GPT-2 directories of one architecture."""
    root = tmp_path_factory.mktemp("sources")
    paths = []
    for seed in (1, 2):
        path = root / f"expert{seed}"
        gpt2(seed).save_pretrained(path)
        paths.append(path)
    return paths


def test_sources_load_as_bases_in_the_models_layout(sources):
    info = hf.inspect_sources(sources)
    assert info.architecture == "GPT2LMHeadModel" and info.numel == 27008
    flat = FlatParameters(gpt2(9))
    bases = hf.hf_bases(sources, flat)
    for row, path in zip(bases.array, sources):
        np.testing.assert_array_equal(row, FlatParameters(hf.load_model(path)).read())


def test_the_saved_model_loads_and_gives_the_evaluated_genomes_logits(sources, tmp_path):
    ids = tokens()
    seen = {}

    def score(model):
        seen["logits"] = logits(model, ids)
        return float(seen["logits"][..., 0].mean())

    model = gpt2(9)
    problem = ModelProblem(model, score, sources=[hf.load_model(p) for p in sources])
    genome = problem.bases.array.mean(0, dtype=np.float64).astype(np.float32)
    problem.evaluate(genome[None, :])
    out = hf.save_merged(model, tmp_path / "best", genome=genome, score=1.5, recipe={"method": "dense"})
    loaded = hf.load_model(out)
    assert torch.equal(logits(loaded, ids), seen["logits"])
    note = json.loads((out / hf.RECIPE_FILE).read_text())
    assert note["recipe"] == {"method": "dense"} and note["score"] == 1.5 and note["genome_dim"] == 27008
    np.testing.assert_array_equal(np.asarray(note["genome"], np.float32), genome)


def test_missing_directories_are_refused(sources, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"expected a source model directory, got .*nowhere \(missing\)"):
        hf.inspect_sources([sources[0], tmp_path / "nowhere"])
    with pytest.raises(FileNotFoundError, match="expected a model directory"):
        hf.load_model(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="with config.json"):
        hf.inspect_sources([tmp_path / "empty"])


def test_other_shapes_and_architectures_are_refused_naming_file_and_tensor(sources, tmp_path):
    wide = tmp_path / "wide"
    gpt2(3, n_embd=16).save_pretrained(wide)
    with pytest.raises(ValueError, match=r"expected tensor 'transformer.h.0.attn.c_attn.bias' of shape "
                                         r"\(96,\) .* got \(48,\) in .*wide/model.safetensors"):
        hf.inspect_sources([sources[0], wide])
    other = tmp_path / "other"
    gpt2(3).save_pretrained(other)
    config = json.loads((other / "config.json").read_text())
    config["architectures"] = ["GPT2Model"]
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"expected every source of architecture GPT2LMHeadModel .* "
                                         r"got GPT2Model in .*other/config.json"):
        hf.inspect_sources([sources[0], other])


def test_a_dtype_the_engine_does_not_take_is_refused(sources, tmp_path):
    from safetensors.torch import save_file

    quantized = tmp_path / "quantized"
    quantized.mkdir()
    (quantized / "config.json").write_text((sources[0] / "config.json").read_text())
    save_file({"transformer.wte.weight": torch.zeros(32, 32, dtype=torch.int8)}, quantized / "model.safetensors")
    with pytest.raises(TypeError, match=r"expected tensors of dtype \['BF16', 'F16', 'F32', 'F64'\] .* "
                                        r"got I8 for 'transformer.wte.weight' in .*quantized"):
        hf.inspect_sources([quantized])


def test_a_merge_too_large_for_the_memory_left_is_refused():
    need = hf.memory_estimate(1_000_000, 3, archive_rows=20, ranks_per_node=2)
    # per rank the rows, the row box (2 bounds) and the model's buffer; the best genome once (row, decoded, copy)
    assert need == 1_000_000 * 3 * 4 + 2 * 1_000_000 * (20 * 4 + 2 * 4 + 4) + 1_000_000 * 3 * 4
    hf.check_memory(need, available=need)
    with pytest.raises(MemoryError, match=r"expected the merge to fit in the 0.14 GiB .* got an estimate of 0.19 GiB"):
        hf.check_memory(need, available=need - 60_000_000)


def test_sources_are_checked_against_the_memory_before_loading(sources):
    flat = FlatParameters(gpt2(9))
    with pytest.raises(MemoryError, match="expected the merge to fit"):
        hf.hf_bases(sources, flat, archive_rows=16, available=27008 * 4 * (2 + 16 + 2 + 1 + 3) - 1)
    hf.hf_bases(sources, flat, archive_rows=16, available=27008 * 4 * (2 + 16 + 2 + 1 + 3))


def test_a_recipe_over_hf_sources_saves_the_model_it_evaluated(sources, tmp_path):
    from mpievo.torch.recipes import RecipeProblem

    ids, seen = tokens(), {}

    def score(model):
        seen["logits"] = logits(model, ids)
        return 0.0

    flat = FlatParameters(gpt2(9))
    problem = RecipeProblem(flat, score, hf.hf_bases(sources, flat), base=0, method="dare", seed=4)
    assert problem.model is flat.model and problem.space.groups == ["layer 0", "layer 1", "other"]
    genome = (problem.lower + problem.upper) / 2
    problem.evaluate(genome[None, :])
    recipe = problem.space.decode(genome)
    out = hf.save_merged(flat.model, tmp_path / "best", recipe=recipe, genome=genome)
    assert torch.equal(logits(hf.load_model(out), ids), seen["logits"])
    assert json.loads((out / hf.RECIPE_FILE).read_text())["recipe"] == recipe


def test_the_best_of_a_recipe_run_is_saved_as_the_model_that_scored_it(sources, tmp_path):
    import mpievo
    from mpievo.evo.problems import Problem
    from mpievo.torch.recipes import RecipeProblem

    ids, seen = tokens(), {}

    def score(model):
        out = logits(model, ids)
        seen[problem.flat.read().tobytes()] = out
        return float(out.pow(2).mean())

    flat = FlatParameters(gpt2(9))
    problem = RecipeProblem(flat, score, hf.hf_bases(sources, flat), base=0, method="ties", maximize=False)
    result = mpievo.minimize(problem, budget=80, islands=1, seed=2, algorithm="cmaes")
    problem.flat.write(np.zeros(flat.dim, np.float32))      # the model no longer holds the best merge
    out = hf.save_best(problem, result, tmp_path / "best")
    loaded = hf.load_model(out)
    got = logits(loaded, ids)
    assert any(torch.equal(got, want) for want in seen.values())
    assert float(got.pow(2).mean()) == result.fun
    note = json.loads((out / hf.RECIPE_FILE).read_text())
    assert note["recipe"] == problem.space.decode(result.x) and note["score"] == result.fun
    with pytest.raises(TypeError, match="expected a ModelProblem or RecipeProblem, got Problem"):
        hf.save_best(Problem(lambda x: x[:, 0], 2, -1, 1), result, tmp_path / "other")
    with pytest.raises(ValueError, match="expected a result with a best genome, got none"):
        hf.save_best(problem, type("OffRankZero", (), {"best_genome": None})(), tmp_path / "other")
