"""Shared fixtures. MPI-marked tests run under `mpiexec -n P python -m pytest --with-mpi`.

Hypothesis under MPI: every rank must draw the same examples and agree on pass/fail,
or the ranks diverge and the next collective hangs. The "mpi" profile derandomises
generation; tests combine their verdict over ranks (``mpi_support.all_ranks_agree``) so that
all ranks fail, and shrink, together.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def pytest_configure(config):
    import progress   # tests/ is on sys.path: this conftest lives there

    progress.register(config)


#: the words tests/run.sh's Open MPI stages look for (grep) to pick the files they collect
MPI_MARK = "pytest.mark.mpi"
#: where every ``heavy`` test lives: tests/run.sh's heavy stage collects this directory only
HEAVY_DIR = Path(__file__).resolve().parent / "plan"


def pytest_collection_modifyitems(config, items):
    """Heavy tests (``@pytest.mark.heavy``: real calibrations, minutes) run only in their own
    budgeted stage, ``MPIEVO_TEST_HEAVY=1``; there they run alone. That stage collects only
    :data:`HEAVY_DIR` (not the whole tree), so a heavy test anywhere else is an error here.

    Under ``--only-mpi`` the tests without the ``mpi`` marker are deselected here rather
    than skipped one by one on every rank (pytest-mpi's way): the MPI stages then spend
    no per-test set-up, timeout thread or progress line on the ~1700 tests they never run.
    The Open MPI stages collect only the files that spell :data:`MPI_MARK`; under
    ``--with-mpi`` (the serial stage sees every test) an MPI test elsewhere is an error."""
    heavy = os.environ.get("MPIEVO_TEST_HEAVY") == "1"
    only_mpi = config.getoption("--only-mpi", default=False)
    keep, drop = [], []
    checked: dict[str, bool] = {}
    for item in items:
        if item.get_closest_marker("mpi") is not None and config.getoption("--with-mpi", default=False):
            path = str(item.fspath)
            if path not in checked:
                with open(path, encoding="utf-8") as f:
                    checked[path] = MPI_MARK in f.read()
            if not checked[path]:
                raise pytest.UsageError(f"MPI test {item.nodeid}: expected its file to spell {MPI_MARK} "
                                        "(tests/run.sh's MPI stages collect only such files), got none")
        is_heavy = item.get_closest_marker("heavy") is not None
        if is_heavy and HEAVY_DIR not in Path(str(item.fspath)).resolve().parents:
            raise pytest.UsageError(f"heavy test {item.nodeid}: expected under {HEAVY_DIR} (the only "
                                    f"directory tests/run.sh's heavy stage collects), got {item.fspath}")
        wanted = is_heavy == heavy
        if only_mpi and item.get_closest_marker("mpi") is None:
            wanted = False
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def world():
    """The mpi4py world communicator (initialises MPI on first use)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD
