"""`mpievo bench es finetune`: the pieces of the GPT-2 comparison on a tiny GPT-2 (the
mpievo side; the EvoX side only where $MPIEVO_EVOX_PYTHON names an interpreter with
evox, torch and transformers), and bad options refused before any work."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mpievo.bench.es import main  # noqa: E402
from mpievo.bench.es_finetune import (answer_fitness, example_modules, flat_weights, run_evox_finetune,  # noqa: E402
                                      run_mpievo_finetune, set_flat_weights)

SPLITS = (0, 16, 4, 8)       # make_splits(seed, train, validation, test): tiny
LR = 2e-3


@pytest.fixture(scope="module")
def tiny():
    data, scoring, _ = example_modules()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(data.VOCAB), n_positions=data.SEQ_LEN, n_embd=8, n_layer=1,
                                       n_head=2, pad_token_id=data.PAD)).eval()
    train = data.make_splits(*SPLITS)["sort"].train
    return model, data.Batch(train.ids[:8], train.answer_mask[:8]), scoring


def test_flat_weights_round_trip_and_bad_shape(tiny):
    model, _, _ = tiny
    x = flat_weights(model)
    assert x.dtype == np.float32 and len(x) == sum(p.numel() for p in model.parameters())
    set_flat_weights(model, x + 1)
    assert np.array_equal(flat_weights(model), x + 1)
    set_flat_weights(model, x)
    with pytest.raises(ValueError, match=rf"expected a weight vector of shape \({len(x)},\), got \(3,\)"):
        set_flat_weights(model, np.zeros(3))


def adam_first_steps(start, mean):
    """|mean - start| / LR of the coordinates that moved: Adam's first step without bias
    correction is lr * 0.1 / sqrt(0.001) = 3.16 lr on every coordinate (1 lr with it)."""
    step = np.abs(mean.astype(np.float64) - start) / LR
    return step[step > 0]


def test_mpievo_side_is_as_evox_and_repeats(tiny):
    model, train, scoring = tiny
    start = flat_weights(model)
    before = answer_fitness(model, train, scoring.answer_hits)
    settings = dict(seed=3, popsize=4, sigma=1e-3, lr=LR, generations=1, checkpoints={1})
    first = run_mpievo_finetune(model, train, scoring.answer_hits, **settings)
    assert np.array_equal(flat_weights(model), first["mean"])          # the model holds the final mean
    assert first["curve"] == [answer_fitness(model, train, scoring.answer_hits)] and first["curve"][0] != before
    assert np.median(adam_first_steps(start, first["mean"])) == pytest.approx(0.1 / 0.001 ** 0.5, rel=1e-3)
    set_flat_weights(model, start)
    again = run_mpievo_finetune(model, train, scoring.answer_hits, **settings)
    assert np.array_equal(first["mean"], again["mean"]) and first["curve"] == again["curve"]
    set_flat_weights(model, start)


@pytest.mark.skipif(not os.environ.get("MPIEVO_EVOX_PYTHON"), reason="set MPIEVO_EVOX_PYTHON to an evox interpreter")
def test_evox_side_same_fitness_and_adam(tiny, tmp_path):
    model, train, scoring = tiny
    model.save_pretrained(tmp_path / "tiny")
    start = flat_weights(model)
    result = run_evox_finetune(os.environ["MPIEVO_EVOX_PYTHON"], tmp_path / "tiny", SPLITS, "sort", 8, seed=0,
                               popsize=4, sigma=1e-3, lr=LR, generations=1, checkpoints={1})
    assert result["mean"].shape == start.shape and result["dim"] == len(start)
    assert np.median(adam_first_steps(start, result["mean"])) == pytest.approx(0.1 / 0.001 ** 0.5, rel=1e-3)
    set_flat_weights(model, result["mean"])          # EvoX's fitness of its mean, scored here the same
    assert result["curve"][0] == pytest.approx(answer_fitness(model, train, scoring.answer_hits), rel=1e-5)
    set_flat_weights(model, start)


def test_bad_options_are_refused(capsys):
    assert main(["finetune", "--sigma", "0"]) == 2
    assert "--sigma: expected a number > 0, got 0.0" in capsys.readouterr().err
    assert main(["finetune", "--task", "nope"]) == 2
    assert "expected one of ['reverse', 'sort', 'shift']" in capsys.readouterr().err
    assert main(["finetune", "--generations", "0"]) == 2
    assert "--generations: expected an int >= 1, got 0" in capsys.readouterr().err
    assert main(["finetune", "--evox-python", "/no/such/python"]) == 2
    assert "--evox-python: expected an interpreter, got /no/such/python" in capsys.readouterr().err
