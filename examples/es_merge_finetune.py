"""ES fine-tunes the merge example's GPT-2 base on one of its tasks, next to the gradient expert.

The base model and the experts of ``examples/merge_transformers`` (a small GPT-2 built
from a config and trained on a synthetic language; cached after the first build, a few
minutes on a 2-core CPU) are loaded; :class:`mpievo.parallel.es_group.SeededES` then
fine-tunes every weight of the base on one task from the base's weights, the fitness the
mean log-probability of the right answers on a fixed batch of training lines. Printed:
exact-match accuracy and answer log-probability on the task's held-out test split of
the base, the ES-tuned model and the gradient-fine-tuned expert (AdamW, the example's
training). Run::

    python examples/es_merge_finetune.py --task sort --generations 200
    mpievo launch -n 2 -- python examples/es_merge_finetune.py      # the same numbers, members shared
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "merge_transformers"))

from data import TASKS, Batch  # noqa: E402
from mpievo.evo.algorithms.es import ES  # noqa: E402
from mpievo.parallel.es_group import SeededES  # noqa: E402
from mpievo.parallel.world import world_comm  # noqa: E402
from mpievo.torch import FlatParameters  # noqa: E402
from scoring import answer_hits  # noqa: E402
from zoo import SPECS, Zoo  # noqa: E402


def scores(model, batch: Batch) -> tuple[float, float]:
    """(exact-match accuracy, mean answer log-probability) on ``batch``."""
    with torch.no_grad():
        hits, logp = answer_hits(model, batch)
    return float(hits.mean()), float(logp.mean())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=TASKS, default="sort")
    parser.add_argument("--size", choices=sorted(SPECS), default="full")
    parser.add_argument("--cache", default=None, help="the zoo's cache folder (as build.py)")
    parser.add_argument("--generations", type=int, default=200)
    parser.add_argument("--popsize", type=int, default=30)
    parser.add_argument("--sigma", type=float, default=1e-3)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--lines", type=int, default=256, help="training lines the fitness scores")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    zoo = Zoo(SPECS[args.size], args.cache)
    split = zoo.splits[args.task]
    train = Batch(split.train.ids[:args.lines], split.train.answer_mask[:args.lines])
    base, expert = zoo.load("base"), zoo.load(f"expert-{args.task}")
    model = zoo.load("base")
    flat = FlatParameters(model)

    def fitness(row: np.ndarray) -> float:
        flat.write(row)
        return -scores(model, train)[1]          # minimised: the negated answer log-probability

    comm = world_comm()
    es = ES(popsize=args.popsize, sigma=args.sigma, learning_rate=args.lr)
    run = SeededES(comm, fitness, flat.read().astype(np.float32), es, seed=0)
    start = time.perf_counter()
    run.run(args.generations)
    seconds = time.perf_counter() - start
    flat.write(run.es.mean)
    if comm.rank == 0:
        print(f"task {args.task}: {flat.dim:,d} weights, ES popsize {args.popsize}, sigma {args.sigma}, "
              f"Adam lr {args.lr}, {args.generations} generations ({run.evaluations} evaluations, {seconds:.0f} s "
              f"on {comm.size} rank(s)); held-out test split ({len(split.test)} lines):")
        for name, m in (("base", base), ("ES-tuned base", model), (f"expert-{args.task} (gradient)", expert)):
            accuracy, logp = scores(m, split.test)
            print(f"  {name:<28} accuracy {accuracy:.3f}   answer log-probability {logp:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
