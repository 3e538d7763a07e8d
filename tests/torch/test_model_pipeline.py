"""Pipelined evaluation of a ModelProblem (mpievo.evo.pipeline): the next child made on a
helper thread into the model's second buffer while the model runs on this one gives the
run of making and evaluating the children one after the other, bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import gpt2, logits, tokens  # noqa: E402

import mpievo  # noqa: E402
from mpievo.evo import pipeline as mpievo_pipeline  # noqa: E402
from mpievo.evo.genomes import DeltaProblem  # noqa: E402
from mpievo.torch import ModelProblem  # noqa: E402

IDS = tokens()
DEFER = mpievo_pipeline.defer
CASES = [("dense", "float32"), ("dense", "bfloat16"), ("delta", "float32"), ("delta", "bfloat16"),
         ("seeded", "float32")]


def run(genome: str, dtype: str, pipeline: bool, monkeypatch):
    """A GA run over a small GPT-2 of ``dtype`` (103k genes: half-precision children are
    bred in one pass, and deferred); (result, fitness values in call order, the model
    buffers the model ran from, the threads that bred deferred children)."""
    values, buffers, bred_on = [], set(), []
    torch_dtype = getattr(torch, dtype)

    def spy(rows, breed):
        def breed_one(index):
            bred_on.append(threading.current_thread().name)
            breed(index)
        DEFER(rows, breed_one)

    monkeypatch.setattr(mpievo_pipeline, "defer", spy)

    def loss(model) -> float:
        buffers.add(model.transformer.wte.weight.data_ptr())
        value = float(logits(model, IDS).float().pow(2).mean())
        values.append(value)
        return value

    problem = ModelProblem(gpt2(3, 64, torch_dtype), loss, maximize=False, pipeline=pipeline,
                           sources=[gpt2(1, 64, torch_dtype), gpt2(2, 64, torch_dtype)])
    engine = {"genome": genome, "dtype": dtype, "capacity": 4, "batch_size": 4}
    result = mpievo.minimize(problem, budget=16, islands=1, seed=7, config={"engine": engine})
    return result, values, buffers, bred_on


@pytest.mark.parametrize("genome,dtype", CASES)
def test_pipelined_runs_are_the_plain_runs_bit_for_bit(genome, dtype, monkeypatch):
    plain, plain_values, plain_buffers, plain_bred = run(genome, dtype, False, monkeypatch)
    piped, piped_values, piped_buffers, piped_bred = run(genome, dtype, True, monkeypatch)
    assert len(plain_buffers) == 1 and not plain_bred
    if dtype == "bfloat16":                 # 3 generations of 4 children bred where they were made
        assert len(piped_bred) == 12 and set(piped_bred) == {"mpievo-pipeline_0"}
    assert len(piped_buffers) == 2          # the model ran from both buffers: the pipeline was used
    assert piped_values == plain_values     # every child's fitness, in order
    assert piped.x.dtype == plain.x.dtype and piped.x.tobytes() == plain.x.tobytes()
    assert piped.fun == plain.fun and piped.evaluations == plain.evaluations == 16


def test_an_error_making_a_child_on_the_helper_thread_is_raised_by_the_run(monkeypatch):
    made_on = []
    materialize = DeltaProblem.materialize_into

    def failing(self, rows, out):
        made_on.append(threading.current_thread().name)
        if len(made_on) == 6:               # generation 1's second child: on the helper thread
            raise RuntimeError("broken child")
        materialize(self, rows, out)

    monkeypatch.setattr(DeltaProblem, "materialize_into", failing)
    problem = ModelProblem(gpt2(3), lambda m: float(logits(m, IDS).pow(2).mean()), sources=[gpt2(1), gpt2(2)])
    with pytest.raises(RuntimeError, match="broken child"):
        mpievo.minimize(problem, budget=16, islands=1, seed=7,
                        config={"engine": {"genome": "delta", "capacity": 4, "batch_size": 4}})
    assert made_on[-1].startswith("mpievo-pipeline")


def test_a_model_runs_from_either_buffer_written_without_a_copy():
    problem = ModelProblem(gpt2(3), lambda m: 0.0)
    first, second = problem.genome_blocks(np.float32)
    assert problem.genome_blocks(np.float64) is None
    second[:] = first * 0.5
    expected = logits(gpt2(3), IDS)
    problem.flat.write(second)              # the model now runs from the second buffer
    assert problem.model.transformer.wte.weight.data_ptr() == second.ctypes.data
    assert not torch.equal(logits(problem.model, IDS), expected)
    problem.flat.write(first)
    assert torch.equal(logits(problem.model, IDS), expected)
    problem.pipeline = False
    assert problem.genome_blocks(np.float32) is None
    with pytest.raises(TypeError, match="pipeline: expected True or False, got 'yes'"):
        ModelProblem(gpt2(3), lambda m: 0.0, pipeline="yes")


def test_the_bench_part_prints_utilisation_with_and_without_pipelining(capsys):
    from mpievo.cli.main import main as cli_main

    assert cli_main(["bench", "models", "pipeline", "--layers", "1", "--width", "16", "--vocab", "32",
                     "--positions", "16", "--capacity", "2", "--batch", "2", "--generations", "2",
                     "--fitness", "forward"]) == 0
    out = capsys.readouterr().out
    assert "rank 0: forward fitness" in out and "with (target >= 0.9)" in out, out
    assert out.count("same values and best genome: yes") == 1, out


@pytest.mark.parametrize("genome, limit", [("delta", 2), ("delta", 1), ("dense", 1)])   # 1 child: evaluated without the pipeline
def test_children_left_unevaluated_are_bred_before_the_algorithm_reads_them(genome, limit):
    from mpievo.evo.engine_config import EngineConfig
    from mpievo.evo.island import Island

    children, fitness = [], []
    for pipeline in (False, True):
        problem = ModelProblem(gpt2(3, 64, torch.bfloat16), lambda m: float(logits(m, IDS).float().sum()),
                               sources=[gpt2(1, 64, torch.bfloat16), gpt2(2, 64, torch.bfloat16)], pipeline=pipeline)
        island = Island(0, problem, EngineConfig(dtype="bfloat16", genome=genome, capacity=4, batch_size=4), seed=3)
        island.initialize()
        island.step(1, limit=limit)         # some of the 4 children evaluated (a budget's last generation)
        children.append(island.algorithm._children.view(np.uint16).copy())
        fitness.append(np.sort(island.archive.fitness))
    assert np.array_equal(children[0], children[1])
    assert np.array_equal(fitness[0], fitness[1])


def test_the_memory_estimate_counts_the_second_buffer_of_a_pipelining_model():
    from types import SimpleNamespace

    from mpievo.evo.engine_config import EngineConfig
    from mpievo.parallel.memory import rank_estimate

    engine = EngineConfig(dtype="float32", genome="delta", capacity=4, batch_size=4)
    host = {}
    for pipeline in (True, False):
        problem = ModelProblem(gpt2(3, 64), lambda m: 0.0, sources=[gpt2(1, 64), gpt2(2, 64)], pipeline=pipeline)
        assert problem.model_buffers(np.float32) == (2 if pipeline else 1)
        assert problem.model_buffers(np.float64) == 1          # not the model's dtype: no pipeline
        host[pipeline], _ = rank_estimate(SimpleNamespace(problem=problem, engines=[engine], n_islands=1), 1)
    assert host[True] - host[False] == problem.dim * 4
