"""Build (or find cached) the base model and the experts, and print their scores::

    python examples/merge_transformers/build.py [--size small] [--cache DIR]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from zoo import SPECS, Zoo
from scoring import task_scores


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SPECS), default="full")
    parser.add_argument("--cache", help="cache folder (default: $MERGE_TRANSFORMERS_CACHE or ~/.cache/mpievo-example)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    zoo = Zoo(SPECS[args.size], args.cache)
    start = time.perf_counter()
    folder = zoo.build()
    print(f"{folder} ({time.perf_counter() - start:.1f} s)")
    for name in ["base"] + zoo.expert_names:
        scores = task_scores(zoo.load(name), zoo.splits, "validation")
        print(f"{name:<16}" + "  ".join(f"{task} {value:.3f}" for task, value in scores.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
