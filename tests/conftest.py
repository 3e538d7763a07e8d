"""Shared fixtures. MPI-marked tests run under `mpiexec -n P python -m pytest --with-mpi`.

Hypothesis under MPI: every rank must draw the same examples and agree on pass/fail,
or the ranks diverge and the next collective hangs. The "mpi" profile derandomises
generation; tests combine their verdict over ranks (``mpi_support.all_ranks_agree``) so that
all ranks fail, and shrink, together.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "mpi",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("MPIEVO_HYPOTHESIS_EXAMPLES", "25")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                          HealthCheck.function_scoped_fixture],  # our fixtures are stateless
    print_blob=False,
)
settings.load_profile("mpi")


@pytest.fixture
def world():
    """The mpi4py world communicator (initialises MPI on first use)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD
