"""``mpievo bench``: benchmarks, run under mpiexec.

    mpievo bench collectives [--sizes 4K,1M,256M] [--cases float32:max] [--json PATH]
                                                                   mpievo vs native MPI
    mpievo bench calibrate [--update mpievo/comm/tuning.json]      selection thresholds
    mpievo bench engine [--json PATH]                              engine vs pygmo, weak scaling
"""

from __future__ import annotations

import argparse
import json
import re

HELP = "benchmarks: collectives (vs native MPI), calibrate (selection table), engine"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'4096', '4K', '1M', '2G' -> bytes.

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 4096, 4K, 1M or 256M, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="WHAT")
    sub.required = True
    coll = sub.add_parser("collectives", help="mpievo's collectives vs the MPI library's")
    coll.add_argument("--sizes", type=parse_sizes, default=None,
                      help="comma-separated sizes (default 4K..256M doubling)")
    coll.add_argument("--collectives", default="allreduce,reduce_scatter,allgather,broadcast",
                      help="comma-separated subset")
    coll.add_argument("--malloc", default="default,tuned",
                      help="'default', 'tuned' (glibc keeps freed memory) or both (default)")
    coll.add_argument("--algorithm", default=None, help="force one mpievo algorithm")
    coll.add_argument("--cases", type=_parse_cases, default=None,
                      help="dtype:op pairs for all-reduce and reduce-scatter, e.g. float32:sum,int32:sum "
                           "(ops sum, max, min); all-gather and broadcast run once per dtype. Default: "
                           "float32:sum,float32:max,float32:min,int32:sum for all-reduce, float32:sum "
                           "for reduce-scatter, float32 for all-gather and broadcast")
    coll.add_argument("--target-seconds", type=float, default=0.3, help="time per measurement")
    coll.add_argument("--json", dest="json_path", default=None, help="write rows as JSON here")
    cal = sub.add_parser("calibrate", help="time every algorithm, print/merge selection thresholds")
    cal.add_argument("--update", default=None, help="merge the result into this tuning JSON")
    cal.add_argument("--sizes", type=parse_sizes, default=None,
                     help="comma-separated sizes (default 256..64M doubling)")
    cal.add_argument("--repeats", type=int, default=3,
                     help="sweeps over every size (candidates interleaved in each); the median wins")
    cal.add_argument("--target-seconds", type=float, default=0.05, help="time per candidate and size")
    cal.add_argument("--json", dest="json_path", default=None, help="write the result here")
    eng = sub.add_parser("engine", help="one island vs pygmo (like for like), weak scaling, migration cost")
    eng.add_argument("--json", dest="json_path", default=None, help="write results as JSON here")


def main(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from mpievo.comm import abort_on_error

    rank = MPI.COMM_WORLD.Get_rank()
    with abort_on_error():
        if args.bench == "collectives":
            from mpievo.comm.benchmark import run_collectives

            result = run_collectives(sizes=args.sizes, collectives=_split(args.collectives),
                                     malloc_modes=_split(args.malloc), algorithm=args.algorithm,
                                     target_s=args.target_seconds, cases=args.cases)
        elif args.bench == "calibrate":
            result = _calibrate(args, rank)
        else:
            from mpievo.parallel.bench import bench_engine
            from mpievo.comm import Communicator

            result = bench_engine(Communicator(), json_path=None)
        if rank == 0 and args.json_path:
            with open(args.json_path, "w") as f:
                json.dump(result, f, indent=1)
            print(f"wrote {args.json_path}")
    return 0


def _parse_cases(text: str) -> list:
    """--cases value -> [(dtype, op)]; argparse reports a bad entry as a usage error."""
    from mpievo.comm.bench_verify import parse_cases  # lazy, like every mpievo.comm import here

    try:
        return parse_cases(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _calibrate(args, rank) -> dict:
    from mpievo.comm.calibration import calibrate, merge_tuning

    update_path = args.update
    result = calibrate(sizes=args.sizes, target_s=args.target_seconds, repeats=args.repeats)
    if rank == 0:
        print(json.dumps(result))
        if update_path:
            try:
                with open(update_path) as f:
                    table = json.load(f)
            except FileNotFoundError:
                table = {}
            with open(update_path, "w") as f:
                json.dump(merge_tuning(table, result), f, indent=1)
                f.write("\n")
            print(f"merged into {update_path}")
    return result
