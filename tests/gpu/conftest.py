"""tests/gpu run against the CUDA backend that is present: the Numba CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``, as in CI) or a real GPU (numba-cuda, and CuPy where it
is installed). Without either they are skipped with that reason.

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba.cuda is first imported, so it
is set by the caller (tests/run.sh's cudasim stages), never here: setting it from a
conftest would switch the rest of a combined pytest run to the simulator.
"""

from __future__ import annotations

import os
import sys

import pytest

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _real_gpu() -> bool:
    if SIMULATOR:
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # no numba-cuda, no driver: no GPU
        return False


REAL_GPU = _real_gpu()
BACKEND = "simulator" if SIMULATOR else ("gpu" if REAL_GPU else None)

if SIMULATOR and os.environ.get("MPIEVO_SIMULATOR_SWITCH_INTERVAL"):
    # The simulator runs every GPU thread as a Python thread, and its scheduler polls them
    # in a tight loop: at Python's default 5 ms GIL switch interval most of a kernel's wall
    # time is that poller holding the GIL; at 0.2 ms a launch takes about half the time.
    # Opt-in only: at 0.2 ms the threads interleave finely enough that a device-island test
    # failed once in a CI run (one archive fitness not its row's), a race still to be found.
    sys.setswitchinterval(float(os.environ["MPIEVO_SIMULATOR_SWITCH_INTERVAL"]))


def pytest_report_header(config):
    return f"tests/gpu backend: {BACKEND or 'none (skipped)'}"


def pytest_collection_modifyitems(config, items):
    if BACKEND is not None:
        return
    skip = pytest.mark.skip(reason="tests/gpu need a GPU or the CUDA simulator: run them with "
                                   "NUMBA_ENABLE_CUDASIM=1 (tests/run.sh cudasim stages)")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(12345)
