"""Abort the whole MPI job when one rank fails, instead of leaving the others hanging."""

from __future__ import annotations

import contextlib
import sys
import traceback


def report_and_abort(err: BaseException, exit_code: int = 1) -> None:
    """Print ``mpievo: rank R failed: ...`` with the traceback, then MPI_Abort the job."""
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    sys.stderr.write(f"mpievo: rank {rank} failed: {type(err).__name__}: {err}\n{text}"
                     f"mpievo: aborting all {MPI.COMM_WORLD.Get_size()} ranks\n")
    sys.stderr.flush()
    sys.stdout.flush()
    MPI.COMM_WORLD.Abort(exit_code)


@contextlib.contextmanager
def abort_on_error(exit_code: int = 1):
    """Run a block; an uncaught exception on this rank aborts every rank.

    SystemExit passes through (a deliberate exit that all ranks make together, such
    as a config error, must keep its own code). With a single rank the exception
    simply propagates.
    """
    try:
        yield
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 - any failure must end the job
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            report_and_abort(err, exit_code)
        raise
