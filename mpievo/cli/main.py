"""Entry point of the ``mpievo`` command.

Each subcommand lives in its own module exposing ``HELP``, ``add_arguments(parser)``
and ``main(args) -> int``; modules are imported here only to build the parser and
must not initialise MPI at import time (``mpievo launch`` runs before MPI exists).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .._version import __version__

#: subcommand name -> module implementing it
SUBCOMMANDS = {
    "run": "mpievo.cli.run",
    "bench": "mpievo.cli.bench",
    "inspect": "mpievo.cli.inspect",
    "launch": "mpievo.cli.launch",
    "plan": "mpievo.cli.plan",
    "merge": "mpievo.cli.merge",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpievo", description="Distributed evolutionary optimisation over MPI.")
    parser.add_argument("--version", action="version", version=f"mpievo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(handler=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default sys.argv[1:]) and run the chosen subcommand."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
