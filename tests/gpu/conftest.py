"""tests/gpu run under the Numba CUDA simulator (no GPU needed).

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba.cuda is first imported, so it
is set by the caller (tests/run.sh's cudasim stages), never here: setting it from a
conftest would switch the rest of a combined pytest run to the simulator. Without
it these tests are skipped with that reason.
"""

from __future__ import annotations

import os

import pytest

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def pytest_collection_modifyitems(config, items):
    if SIMULATOR:
        return
    skip = pytest.mark.skip(reason="tests/gpu need the CUDA simulator: run them with "
                                   "NUMBA_ENABLE_CUDASIM=1 (tests/run.sh cudasim stages)")
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(12345)
