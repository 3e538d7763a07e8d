"""``mpievo merge``: apply a mergekit YAML configuration to local Hugging Face directories.

    mpievo merge CONFIG.yml --out DIR [--seed N] [--check]

The methods, keys and what is refused: :mod:`mpievo.torch.mergekit_config` and
:mod:`mpievo.torch.mergekit_apply`; the guide is docs/guides/merging.md. One process,
no MPI: torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys

HELP = "apply a mergekit YAML (linear, ties, dare, slerp, model_stock, della, breadcrumbs, passthrough, ...)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="the mergekit YAML file")
    parser.add_argument("--out", required=True, help="the directory to write the merged model into")
    parser.add_argument("--seed", type=int, default=0,
                        help="key of the random masks of dare_ties, dare_linear, della (default 0)")
    parser.add_argument("--check", action="store_true",
                        help="check the configuration and its models, print the plan, merge nothing")


def main(args: argparse.Namespace) -> int:
    from mpievo.torch.mergekit_apply import apply_config, plan_merge
    from mpievo.torch.mergekit_config import MergeConfigError, read_config

    try:
        config = read_config(args.config)
        if args.check:
            plan = plan_merge(config)
            print(f"{config.merge_method}: {len(plan.tasks)} tensors, {plan.layers} layers, config of "
                  f"{plan.base}, tokenizer of {plan.tokenizer}")
            return 0
        out = apply_config(config, args.out, seed=args.seed)
    except (MergeConfigError, FileNotFoundError) as error:
        print(f"mpievo merge: {error}", file=sys.stderr)
        return 2
    print(f"mpievo merge: wrote {out}")
    return 0
