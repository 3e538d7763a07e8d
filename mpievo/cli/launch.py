"""``mpievo launch -n P COMMAND ...``: mpiexec with the MPI wheel's settings made."""

from __future__ import annotations

import argparse

HELP = "start COMMAND on P ranks with mpiexec, setting what the PyPI MPI wheels need"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--np", dest="nranks", type=int, default=2,
                        help="number of ranks (default 2)")
    parser.add_argument("argv", nargs=argparse.REMAINDER,
                        help="command to run on every rank, e.g. `mpievo run` or `python -m pytest`")


def main(args: argparse.Namespace) -> int:
    from ..launcher import launch

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    return launch(args.nranks, argv)
