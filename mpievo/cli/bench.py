"""``mpievo bench``: benchmarks, run under mpiexec.

    mpievo bench collectives [--sizes 4K,1M,256M] [--json PATH]   mpievo vs native MPI
    mpievo bench calibrate [--update mpievo/comm/tuning.json]      selection thresholds
    mpievo bench engine [--json PATH]                              island engine vs pygmo
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
    coll.add_argument("--target-seconds", type=float, default=0.3, help="time per measurement")
    coll.add_argument("--json", dest="json_path", default=None, help="write rows as JSON here")
    cal = sub.add_parser("calibrate", help="time every algorithm, print/merge selection thresholds")
    cal.add_argument("--update", default=None, help="merge the result into this tuning JSON")
    cal.add_argument("--json", dest="json_path", default=None, help="write the result here")
    eng = sub.add_parser("engine", help="island engine throughput and scaling (vs pygmo)")
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
                                     target_s=args.target_seconds)
        elif args.bench == "calibrate":
            result = _calibrate(args.update, rank)
        else:
            from mpievo.parallel.bench import bench_engine
            from mpievo.comm import Communicator

            result = bench_engine(Communicator(), json_path=None)
        if rank == 0 and args.json_path:
            with open(args.json_path, "w") as f:
                json.dump(result, f, indent=1)
            print(f"wrote {args.json_path}")
    return 0


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _calibrate(update_path, rank) -> dict:
    from mpievo.comm.benchmark import calibrate, merge_tuning

    result = calibrate()
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
