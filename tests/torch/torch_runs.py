"""Merge runs for tests/torch: a run stopped at generation k, checkpointed and resumed,
against the straight run, on any communicator."""

from __future__ import annotations

import numpy as np
import torch
from torch_models import Small, gpt2, logits, tokens

from mpievo.config import validate
from mpievo.io import Checkpointer, load_latest
from mpievo.parallel import best_genome_bytes, run_job
from mpievo.parallel.groups import islands_to_load
from mpievo.torch import ModelProblem, RecipeProblem

IDS = tokens()
X = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))
GENERATIONS, STOP_AT = 6, 3
#: models scored in this process (a resumed run scores fewer than the straight one)
SCORED = [0]

#: engine tables of the runs checked: whole-weight GA (bf16 dense and delta) and a recipe under CMA-ES
ENGINES = {"bf16-dense": {"dtype": "bfloat16", "genome": "dense"},
           "bf16-delta": {"dtype": "bfloat16", "genome": "delta"},
           "recipe-cmaes": {"algorithm": "cmaes"}}


def gpt2_loss(model) -> float:
    SCORED[0] += 1
    return float(logits(model, IDS).float().pow(2).mean())


def small_loss(model) -> float:
    SCORED[0] += 1
    return float((model(X) ** 2).mean())


def make_problem(kind: str):
    """A fresh problem for ``kind`` (a key of :data:`ENGINES`): the same sources every time."""
    if kind.startswith("recipe"):
        return RecipeProblem(Small(3), small_loss, [Small(1), Small(2)], base=Small(0), method="ties",
                             maximize=False)
    return ModelProblem(gpt2(3, dtype=torch.bfloat16), gpt2_loss,
                        sources=[gpt2(1, dtype=torch.bfloat16), gpt2(2, dtype=torch.bfloat16)], maximize=False)


def job_for(kind: str, nranks: int, islands: int = 2):
    engine = {"capacity": 6, "batch_size": 4, **ENGINES[kind]}
    config = {"run": {"islands": islands, "generations": GENERATIONS, "seed": 5},
              "migration": {"interval": 2, "emigrants": 1}, "engine": engine}
    return validate(config, nranks, problem=make_problem(kind))


def stopped_and_resumed(kind: str, comm, directory: str, islands: int = 2):
    """(the run stopped at :data:`STOP_AT` then resumed from its checkpoint, the straight run);
    checks that the resumed run scored fewer models (here) than the straight one."""
    stopped = run_job(job_for(kind, comm.size, islands), comm, checkpointer=Checkpointer(directory, comm=comm),
                      generations=STOP_AT)
    assert stopped.generations == STOP_AT
    job = job_for(kind, comm.size, islands)
    restored = load_latest(directory, islands=islands_to_load(comm, job.run, islands), comm=comm)
    before = SCORED[0]
    resumed = run_job(job, comm, restored=restored)
    resumed_scored, before = SCORED[0] - before, SCORED[0]
    straight = run_job(job_for(kind, comm.size, islands), comm)
    assert 0 < resumed_scored < SCORED[0] - before, (resumed_scored, SCORED[0] - before)
    return resumed, straight


def same_run(a, b) -> bool:
    """Bit for bit the same best genome and fitness, generations and evaluations."""
    return (best_genome_bytes(a) == best_genome_bytes(b) and a.generations == b.generations
            and a.evaluations == b.evaluations and np.array_equal(a.best_fitness, b.best_fitness))
