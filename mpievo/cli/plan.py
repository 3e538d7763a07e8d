"""``mpievo plan``: the parallel schemes' cost model (no MPI in this process).

    mpievo plan --calibrate [--dims 1e2,1e5,1e7] [--out cal.json]   measure the constants here (3-4 minutes)
    mpievo plan --constants cal.json --ranks 4 ...    each scheme's bytes and time per generation
    mpievo plan --scenario design [--inter-node-gbps 25]   the design study's table recomputed
    mpievo plan --measure [--schemes island,hybrid,hybrid_evaluator] [--measure-ranks 1,2,4] [--constants cal.json]
                                                      schemes run at each P against the model

Bytes come from :mod:`mpievo.plan.traffic` (exact for GA runs: every message the schemes
send), time from :mod:`mpievo.plan.timing` with the calibrated constants.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "cost model of the parallel schemes: bytes and time per generation, the design study's scenario"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibrate", action="store_true",
                        help="measure the model's constants on this machine (engine per child at --dims, "
                             "link latency and bandwidth by a 2-rank ping-pong, the run loop's fixed costs "
                             "per scheme from short real runs) and print them as JSON; 3-4 minutes at the "
                             "default dims on an idle 2-core machine")
    parser.add_argument("--out", default=None, help="with --calibrate: also write the JSON here")
    parser.add_argument("--dims", type=_dims, default=None,
                        help="with --calibrate: genome sizes to measure the engine at (default 1e2,1e5,1e7; "
                             "the model interpolates between them in log space)")
    parser.add_argument("--calibrate-ranks", type=_ranks, default=None,
                        help="with --calibrate: rank counts to measure the schemes' loop costs at "
                             "(default 1,2,4; 1 and 2 are always measured)")
    parser.add_argument("--constants", default=None,
                        help="a --calibrate JSON file (the intra-node link and the engine costs)")
    parser.add_argument("--scenario", choices=("design",), default=None,
                        help="print the design study's scenario recomputed (4 nodes x 8 GPUs, 1.5B bf16)")
    parser.add_argument("--inter-node-gbps", type=float, default=25.0, help="inter-node bandwidth, Gb/s")
    parser.add_argument("--inter-node-latency-us", type=float, default=5.0, help="inter-node latency, us")
    parser.add_argument("--intra-node-gbps", type=float, default=None,
                        help="scenario: intra-node bandwidth, Gb/s (default: --constants', else 80)")
    parser.add_argument("--breed-gbytes-per-s", type=float, default=141.0,
                        help="scenario: device breeding rate, GB of child per second (H100, README)")
    measure = parser.add_argument_group("runs against the model (--measure)")
    measure.add_argument("--measure", action="store_true",
                         help="run the bench's job with --schemes at each of --measure-ranks (launched jobs) and "
                              "print measured against predicted wall time")
    measure.add_argument("--schemes", type=lambda text: tuple(text.split(",")), default=("island", "hybrid", "hybrid_evaluator"),
                         help="bench schemes to measure (default island,hybrid,hybrid_evaluator: hybrid with "
                              "run.breed = evaluator)")
    measure.add_argument("--measure-ranks", type=_ranks, default=(1, 2, 4), help="rank counts (default 1,2,4)")
    measure.add_argument("--measure-dim", type=lambda text: int(float(text)), default=1_000_000,
                         help="genes per genome (default 1e6)")
    measure.add_argument("--repeats", type=int, default=3, help="runs per scheme and rank count")
    measure.add_argument("--calibrate-first", action="store_true",
                         help="without --constants: a full calibration (minutes) instead of the engine's costs "
                              "stepped in-process")
    measure.add_argument("--measure-cost-ms", type=float, default=20.0, help="fitness cost per child, ms")
    measure.add_argument("--measure-budget", type=int, default=64, help="evaluations per run")
    new = parser.add_argument_group("scenario: the new path (children bred where evaluated)")
    new.add_argument("--device-gbytes-per-s", type=float, default=1000.0,
                     help="device memory traffic, GB/s (default 1000: the device copy of mpievo bench gpu, H100)")
    new.add_argument("--nvlink-gbytes-per-s", type=float, default=400.0, help="NVLink per GPU and direction, GB/s")
    new.add_argument("--gpu-memory-gb", type=float, default=80.0, help="memory per GPU, GB")
    new.add_argument("--survivors", type=float, default=4.0, help="children entering the archive per generation")
    new.add_argument("--pipeline-spare", type=float, default=0.5,
                     help="share of a GPU a pipelined make gets beside an evaluation, 0-1")
    new.add_argument("--checkpoint-every", type=int, default=0, help="generations between checkpoints (0: none)")
    layout = parser.add_argument_group("a layout (with --constants)")
    layout.add_argument("--ranks", type=int, default=4)
    layout.add_argument("--ranks-per-node", type=int, default=0, help="0: one node")
    layout.add_argument("--islands", type=int, default=4)
    layout.add_argument("--dim", type=int, default=100)
    layout.add_argument("--capacity", type=int, default=8, help="archive capacity = GA batch")
    layout.add_argument("--itemsize", type=int, default=4, help="bytes per gene")
    layout.add_argument("--budget", type=int, default=192)
    layout.add_argument("--interval", type=int, default=2, help="generations between migrations")
    layout.add_argument("--ranks-per-island", type=int, default=2, help="hybrid group size")
    layout.add_argument("--cost-ms", type=float, default=0.0, help="workload cost per child")
    layout.add_argument("--mode", choices=("none", "sleep", "burn", "vary"), default="sleep")


def main(args: argparse.Namespace) -> int:
    if args.calibrate:
        from mpievo.plan.calibrate import calibrate, write

        kwargs = {name: value for name, value in (("dims", args.dims), ("ranks", args.calibrate_ranks))
                  if value is not None}
        result = calibrate(**kwargs)
        print(json.dumps(result, indent=1))
        if args.out:
            write(args.out, result)
        return 0
    if args.scenario:
        print(_scenario(args))
        return 0
    if args.measure:
        from mpievo.plan.measured import MeasureSpec, measure_against_model

        spec = MeasureSpec(schemes=args.schemes, ranks=args.measure_ranks, dim=args.measure_dim,
                           cost_ms=args.measure_cost_ms, repeats=args.repeats, budget=args.measure_budget)
        try:
            spec.check()
        except ValueError as error:
            print(f"mpievo plan --measure: {error}", file=sys.stderr)
            return 2
        print(measure_against_model(spec, args.constants, full=args.calibrate_first)[1])
        return 0
    if not args.constants:
        print("mpievo plan: expected --calibrate, --scenario or --constants FILE, got none", file=sys.stderr)
        return 2
    print(_layouts(args))
    return 0


def _counts(what: str, example: str, convert):
    """argparse type: comma-separated counts >= 1 (``convert`` each part), e.g. ``example``."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            counts = tuple(convert(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} such as {example}, got {text!r}") from None
        if min(counts) < 1:
            raise argparse.ArgumentTypeError(f"expected {what} >= 1, got {text!r}")
        return counts

    return parse


#: '1e2,1e5' -> (100, 100000); '1,2,4' -> (1, 2, 4)
_dims = _counts("genome sizes", "1e2,1e5", lambda part: int(float(part)))
_ranks = _counts("rank counts", "1,2,4", int)


def _scenario(args) -> str:
    from mpievo.plan.local import Node
    from mpievo.plan.scenario import Scenario, format_scenario
    from mpievo.plan.timing import Constants, Link

    intra = Scenario().intra
    if args.constants:
        intra = Constants.load(args.constants).intra
    if args.intra_node_gbps is not None:
        intra = Link(intra.latency_s, args.intra_node_gbps * 1e9 / 8)
    node = Node(device_Bps=args.device_gbytes_per_s * 1e9, peer_Bps=args.nvlink_gbytes_per_s * 1e9,
                device_bytes=args.gpu_memory_gb * 1e9)
    try:
        scenario = Scenario(args.inter_node_gbps, args.inter_node_latency_us * 1e-6, intra,
                            args.breed_gbytes_per_s * 1e9, node, args.survivors, args.pipeline_spare,
                            args.checkpoint_every)
        return format_scenario(scenario)
    except ValueError as error:
        raise SystemExit(f"mpievo plan --scenario: {error}") from None


def _layouts(args) -> str:
    from mpievo.plan.traffic import SCHEMES, Layout, traffic
    from mpievo.plan.timing import Constants, Cost, Link, predict_seconds

    inter = Link(args.inter_node_latency_us * 1e-6, args.inter_node_gbps * 1e9 / 8)
    constants = Constants.load(args.constants, inter)
    lines = [f"{args.ranks} ranks, {args.islands} islands, {args.dim} genes x {args.itemsize} B, "
             f"capacity = batch = {args.capacity}, budget {args.budget}, migration every {args.interval}, "
             f"cost {args.cost_ms:g} ms {args.mode}; constants: {constants.source or args.constants}",
             "", "| scheme | bytes/gen by purpose | inter-node bytes/gen | time/gen |", "|---|---|---|---|"]
    for scheme in SCHEMES:
        lay = Layout(scheme, args.ranks, args.islands, args.dim, args.capacity, args.capacity,
                     itemsize=args.itemsize, interval=args.interval, ranks_per_node=args.ranks_per_node,
                     ranks_per_island=args.ranks_per_island if scheme == "hybrid" else 1, budget=args.budget)
        plan = traffic(lay)
        purposes = ", ".join(f"{p} {n:.0f} B" for p, n in plan.per_generation().items()) or "none"
        seconds = predict_seconds(lay, constants, Cost(args.cost_ms / 1e3, args.mode))["per_generation_s"]
        lines.append(f"| {scheme} | {purposes} | {plan.by_link()['inter'] / plan.generations:.0f} B | "
                     f"{seconds * 1e3:.3g} ms |")
    return "\n".join(lines)
