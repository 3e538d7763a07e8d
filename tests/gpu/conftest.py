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

import numpy as np
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



def _atomic_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` allocate one array per block and line.

    The simulator (numba-cuda 0.30) looks an allocation up by source line and stores a
    new one if it is missing: a check then a set, with no lock. Two threads of a block
    that both miss get two arrays, so that block's threads no longer share memory and a
    reduction sums the wrong values (a device island then records a fitness that is not
    its row's). Rare at Python's 5 ms switch interval, common at fine ones: at 1e-6 s,
    5 of 10 device-island runs recorded a wrong fitness, none with this patch.
    ``dict.setdefault`` is one atomic step under the GIL.
    """
    import traceback

    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    def array(self, shape, dtype, alignment=None, _original=kernelapi.FakeCUDAShared.array):
        if alignment is not None or shape == 0:  # errors and dynamic shared memory: unchanged
            return _original(self, shape, dtype, alignment)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = traceback.extract_stack(sys._getframe())[-2][0:2]
        return self._allocations.setdefault(caller, np.empty(shape, dtype))

    kernelapi.FakeCUDAShared.array = array


if SIMULATOR:
    _atomic_shared_arrays()
    # The simulator runs every GPU thread as a Python thread, and its scheduler polls them
    # in a tight loop: at Python's default 5 ms GIL switch interval most of a kernel's wall
    # time is that poller holding the GIL; at 0.2 ms a launch takes about half the time.
    sys.setswitchinterval(float(os.environ.get("MPIEVO_SIMULATOR_SWITCH_INTERVAL", "2e-4")))


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
