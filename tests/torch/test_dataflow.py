"""Data-flow-space merges (mpievo.torch.dataflow): the merged module against a model built
by hand, the written model through ``from_pretrained``, the search at 1 and 2 ranks, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

import mpievo  # noqa: E402
from mpi_support import all_ranks_agree  # noqa: E402
from mpievo.comm import SelfComm  # noqa: E402
from mpievo.torch.dataflow import DataFlowModel, DataFlowProblem, DataFlowSpace, save_dataflow  # noqa: E402

IDS = torch.randint(0, 32, (3, 8), generator=torch.Generator().manual_seed(1))
#: mixed sources, a layer twice, a repeat, scales on both sides of 1
PATH = [(0, 0, 1.0), (1, 1, 0.7), (0, 1, 1.3), (1, 0, 0.9), (0, 1, 1.0)]
SMALL = {"engine": {"capacity": 8, "batch_size": 8}}


def gpt2(seed: int, n_embd: int = 16, n_layer: int = 2, eps: float = 1e-12) -> GPT2LMHeadModel:
    """A tiny GPT-2 (norm epsilon 1e-12: a scale folded into the projections is exact)."""
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=2, vocab_size=32, n_positions=8,
                        layer_norm_epsilon=eps, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def by_hand(sources, path, ids) -> torch.Tensor:
    """Source 0's embeddings, then each (source, layer) block on its scaled input under a
    causal mask, then source 0's final norm and head."""
    head = sources[0].transformer
    mask = torch.full((ids.shape[1],) * 2, float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        h = head.wte(ids) + head.wpe(torch.arange(ids.shape[1]))[None]
        for source, layer, scale in path:
            h = sources[source].transformer.h[layer](h * scale, attention_mask=mask)
        return sources[0].lm_head(head.ln_f(h))


def test_the_merged_module_runs_the_path_as_a_hand_built_model_and_copies_no_weight():
    sources = [gpt2(0), gpt2(1, n_layer=3)]
    model = DataFlowModel(sources)
    model.set_path(PATH)
    with torch.no_grad():
        out = model(input_ids=IDS).logits
    assert torch.allclose(out, by_hand(sources, PATH, IDS), atol=1e-6, rtol=0)
    assert model.shell.transformer.h[1].block is sources[1].transformer.h[1]      # the source's own module
    assert model.shell.lm_head is sources[0].lm_head and model.shell.config.n_layer == len(PATH)
    model.set_path([(0, 0, 1.0), (0, 1, 1.0)])                                  # source 0's own path
    with torch.no_grad():
        assert torch.equal(model(input_ids=IDS).logits, sources[0](input_ids=IDS).logits)


def test_the_written_model_loads_with_from_pretrained_and_gives_the_modules_outputs(tmp_path):
    sources = [gpt2(0), gpt2(1)]
    problem = DataFlowProblem(sources, lambda m: 0.0, repeats=3)
    genome = problem.space.encode(PATH)
    save_dataflow(problem, genome, tmp_path / "merged", score=0.5)
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path / "merged").eval()
    assert loaded.config.n_layer == len(PATH)
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=IDS).logits, by_hand(sources, PATH, IDS), atol=1e-5, rtol=0)
    note = json.loads((tmp_path / "merged" / "mpievo_merge.json").read_text())
    assert note["recipe"]["path"] == [list(entry) for entry in PATH] and note["score"] == 0.5


def test_the_written_directory_carries_the_tokenizer_and_the_bases_other_files(tmp_path):
    """As ``mpievo merge`` writes them (the same copy): from the first source loaded from a
    directory, or from ``files_from``; a ``files_from`` that is no directory is refused
    before anything is written."""
    from tokenizers import Tokenizer, models
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from mpievo.torch.mergekit_apply import BASE_FILES, TOKENIZER_FILES

    folder = tmp_path / "base"
    gpt2(0).save_pretrained(folder)
    vocabulary = Tokenizer(models.WordLevel({f"t{i}": i for i in range(32)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=vocabulary, unk_token="t0", eos_token="t1").save_pretrained(folder)
    sources = [gpt2(1), GPT2LMHeadModel.from_pretrained(folder).eval()]      # source 0 was never saved
    problem = DataFlowProblem(sources, lambda m: 0.0)
    genome = problem.space.encode(PATH[:2])
    out = save_dataflow(problem, genome, tmp_path / "merged")
    carried = [name for name in TOKENIZER_FILES + BASE_FILES if (folder / name).is_file()]
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= set(carried)
    for name in carried:
        assert (out / name).read_bytes() == (folder / name).read_bytes(), name
    assert AutoTokenizer.from_pretrained(out).eos_token == "t1"
    other = save_dataflow(DataFlowProblem([gpt2(1)], lambda m: 0.0), np.ones(2 + 2), tmp_path / "plain")
    assert not (other / "tokenizer.json").exists()                # no source from a directory: none
    again = save_dataflow(DataFlowProblem([gpt2(1)], lambda m: 0.0), np.ones(4), tmp_path / "given", files_from=folder)
    assert (again / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    with pytest.raises(ValueError, match="files_from: expected a model directory, got .*nowhere.* .not a directory."):
        save_dataflow(problem, genome, tmp_path / "refused", files_from=tmp_path / "nowhere")
    assert not (tmp_path / "refused").exists()


def test_the_genome_is_binary_run_genes_then_scales_and_the_search_keeps_them_binary():
    sources = [gpt2(0), gpt2(1)]
    target = by_hand(sources, [(1, 0, 1.0), (0, 1, 1.0)], IDS)

    def closeness(model):
        return -float(((model(input_ids=IDS).logits - target) ** 2).mean())

    problem = DataFlowProblem(sources, closeness, repeats=1)
    space = problem.space
    assert space.dim == 8 and list(problem.integer) == [0, 1, 2, 3] and space.slots[2] == (1, 0)
    assert problem(space.identity_genome(0)[None])[0] == pytest.approx(closeness(sources[0]))
    fixed = DataFlowSpace([2, 2], scales=False)          # run genes only, every scale 1
    assert fixed.dim == 4 and fixed.decode([0, 1, 1, 0])["path"] == [[0, 1, 1.0], [1, 0, 1.0]]
    result = mpievo.minimize(problem, budget=120, islands=2, seed=4, algorithm="ga", comm=SelfComm(), config=SMALL)
    runs = result.x[:4]
    assert set(runs.tolist()) <= {0.0, 1.0}
    assert result.fun >= problem(space.identity_genome(0)[None])[0]


@pytest.mark.parametrize("make, fragment", [
    (lambda: DataFlowModel([gpt2(0), gpt2(1, n_embd=8)]), "source 1: expected the architecture of source 0 "
                                                          "(n_embd = 16), got n_embd = 8"),
    (lambda: DataFlowModel([gpt2(0), torch.nn.Linear(2, 2)]), "source 1: expected a GPT-2 causal LM"),
    (lambda: DataFlowModel([]), "sources: expected at least one model, got none"),
    (lambda: DataFlowSpace([2, 2]).encode([(0, 5)]), "path: expected a layer of source 0 in 0..1, got 5"),
    (lambda: DataFlowSpace([2, 2]).encode([(2, 0)]), "path: expected a source in 0..1, got 2"),
    (lambda: DataFlowSpace([2, 2]).encode([(0, 1), (0, 0)]), "path: expected at most 1 passes over the layers"),
    (lambda: DataFlowSpace([2, 2]).encode([(0, 1, 3.0)]), "path: expected a scale in [0.5, 1.5], got 3.0"),
    (lambda: DataFlowSpace([2], repeats=0), "repeats: expected an int >= 1, got 0"),
    (lambda: DataFlowSpace([2], scales=False).encode([(0, 0, 0.8)]), "path: expected a scale of 1 (scales=False)"),
    (lambda: DataFlowModel([gpt2(0)]).set_path([(0, 2, 1.0)]), "path: expected (source, layer) within sources "
                                                                "of [2] layers, got (0, 2)"),
    (lambda: DataFlowProblem([gpt2(0), gpt2(1)], lambda m: 0.0, start=[(1, 4)]),
     "path: expected a layer of source 1 in 0..1, got 4"),
])
def test_bad_input_is_refused_naming_it(make, fragment):
    with pytest.raises(ValueError) as caught:
        make()
    assert fragment in str(caught.value)


@pytest.mark.mpi(min_size=2)
def test_a_dataflow_search_on_two_ranks_is_the_one_process_search(world):
    from mpievo.parallel.world import world_comm

    comm = world_comm()
    sources = [gpt2(0), gpt2(1)]
    target = by_hand(sources, [(1, 0, 1.0), (0, 1, 0.8)], IDS)

    def make():
        return DataFlowProblem(sources, lambda m: -float(((m(input_ids=IDS).logits - target) ** 2).mean()),
                               repeats=1)

    islands = max(2, comm.size)
    common = dict(budget=40 * islands, islands=islands, seed=2, algorithm="ga", config=SMALL)
    here, alone = (mpievo.minimize(make(), comm=c, **common) for c in (comm, SelfComm()))
    ok = here.x.tobytes() == alone.x.tobytes() and set(here.x[:4].tolist()) <= {0.0, 1.0}
    all_ranks_agree(world, ok, f"{here.x} against {alone.x}")
