"""bfloat16 models with bfloat16 genomes, end to end: GA runs (dense and delta) over a
ModelProblem of a bfloat16 GPT-2, the rows written into its bfloat16 buffer as they are."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import gpt2, logits, tokens  # noqa: E402

import mpievo  # noqa: E402
from mpievo.torch import FlatParameters, ModelProblem, load_model, save_best  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
IDS = tokens()


def recording_problem(seen_logits: dict, rows: list) -> ModelProblem:
    """A bf16 GPT-2 merge problem that records, per evaluated genome (its bytes), the
    logits it gave, and every row handed to the model's buffer."""
    def loss(model):
        out = logits(model, IDS)
        seen_logits[problem.flat.read().tobytes()] = out
        return float(out.float().pow(2).mean())

    model = gpt2(3, dtype=torch.bfloat16)
    problem = ModelProblem(model, loss, sources=[gpt2(1, dtype=torch.bfloat16), gpt2(2, dtype=torch.bfloat16)],
                           maximize=False)
    write = problem.flat.write

    def spy(genome):
        rows.append(genome)
        write(genome)
    problem.flat.write = spy
    return problem


@pytest.mark.parametrize("genome", ["dense", "delta"])
def test_a_bfloat16_run_writes_bfloat16_rows_and_its_genome_gives_the_logits_it_was_scored_by(genome, tmp_path):
    seen, rows = {}, []
    problem = recording_problem(seen, rows)
    buffers = problem.flat.double_buffer()       # the model's two buffers (pipelined evaluation)
    assert problem.bases.dtype == BF16               # half sources stay in their dtype: 2 bytes a gene
    assert problem.bases.nbytes == 2 * 2 * problem.dim
    result = mpievo.minimize(problem, budget=96, islands=1, seed=4,
                             config={"engine": {"dtype": "bfloat16", "genome": genome, "capacity": 8,
                                                "batch_size": 8}})
    assert result.x.dtype == BF16 and result.x.shape == (problem.dim,)
    assert rows and all(np.asarray(row).dtype == BF16 for row in rows)    # no widening on the way in
    if genome == "delta":       # base + delta is materialised straight into the model's buffers
        assert all(any(np.shares_memory(np.asarray(row), buffer) for buffer in buffers) for row in rows)
    fresh = gpt2(9, dtype=torch.bfloat16)
    FlatParameters(fresh).write(result.x)
    assert torch.equal(logits(fresh, IDS), seen[result.x.tobytes()])
    assert float(logits(fresh, IDS).float().pow(2).mean()) == result.fun
    # the best model written as a Hugging Face directory loads in bfloat16 and gives those logits
    problem.flat.write(np.zeros(problem.dim, BF16))
    loaded = load_model(save_best(problem, result, tmp_path / "best"))
    assert loaded.dtype == torch.bfloat16
    assert torch.equal(logits(loaded, IDS), seen[result.x.tobytes()])
