"""Fine-tune every weight of a small network with an evolution strategy (seeds and scalars).

A two-layer tanh network (its 4,353 weights one flat genome) was "pretrained" on a sine;
the task is now a shifted, steeper sine. :class:`mpievo.parallel.es_group.SeededES`
fine-tunes all the weights from the pretrained ones with OpenAI-ES (antithetic pairs,
centred ranks, Adam): each rank evaluates its share of the 30 members, only their 30
losses travel, and every rank rebuilds the same update from the generation's key, so
the result is the same bits on 1, 2 or 4 ranks. Run::

    python examples/es_finetune.py                            # one process
    mpievo launch -n 2 -- python examples/es_finetune.py      # the same numbers on 2 ranks

The same algorithm as an island of a job is ``engine.algorithm = "es"`` (see
docs/guides/evolution-strategies.md).
"""

from __future__ import annotations

import numpy as np

from mpievo.evo.algorithms.es import ES
from mpievo.parallel.es_group import SeededES
from mpievo.parallel.world import world_comm

HIDDEN = 64
X = np.linspace(-3.0, 3.0, 128)[:, None]
SIZES = [(1, HIDDEN), (HIDDEN,), (HIDDEN, HIDDEN), (HIDDEN,), (HIDDEN, 1), (1,)]
DIM = sum(int(np.prod(shape)) for shape in SIZES)


def unpack(genome: np.ndarray) -> list[np.ndarray]:
    """The weight tensors of a flat genome (views, no copy)."""
    out, start = [], 0
    for shape in SIZES:
        size = int(np.prod(shape))
        out.append(genome[start:start + size].reshape(shape))
        start += size
    return out


def predict(genome: np.ndarray, x: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2, w3, b3 = unpack(genome.astype(np.float64))
    h = np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2)
    return (h @ w3 + b3)[:, 0]


def loss(genome: np.ndarray, target: np.ndarray) -> float:
    return float(np.mean((predict(genome, X) - target) ** 2))


def pretrained(seed: int = 0) -> np.ndarray:
    """Random features fit to sin(x) by least squares in the last layer: the base model."""
    rng = np.random.default_rng(seed)
    genome = (rng.standard_normal(DIM) * 0.5).astype(np.float32)
    w1, b1, w2, b2, w3, b3 = unpack(genome)
    h = np.tanh(np.tanh(X @ w1 + b1) @ w2 + b2)
    solution = np.linalg.lstsq(np.hstack([h, np.ones((len(X), 1))]), np.sin(X[:, 0]), rcond=None)[0]
    w3[:, 0], b3[0] = solution[:-1], solution[-1]
    return genome


def finetune(generations: int = 150, comm=None) -> tuple[float, float, np.ndarray]:
    """(loss before, loss after, the fine-tuned genome) on the new task."""
    target = np.sin(1.5 * X[:, 0] + 0.5)
    base = pretrained()
    es = ES(popsize=30, sigma=0.02, learning_rate=0.01)          # Salimans' settings
    run = SeededES(world_comm() if comm is None else comm, lambda g: loss(g, target), base, es, seed=1)
    run.run(generations)
    return loss(base, target), loss(run.es.mean, target), run.es.mean


if __name__ == "__main__":
    before, after, _ = finetune()
    print(f"{DIM} weights fine-tuned by ES: loss on the new task {before:.4f} -> {after:.4f}")
