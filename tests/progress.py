"""A pytest plugin that records, per rank, which test started and how each ended.

Loaded by tests/conftest.py when ``MPIEVO_TEST_PROGRESS`` names a file: rank r writes
``FILE.r`` (one line per event, flushed at once), so when a per-test timeout ends the
whole process (pytest-timeout's thread method calls ``os._exit``; under mpiexec every
rank goes with it), tests/stage.py can tell which test was running, count it failed and
start pytest again on the tests that never ran. A timeout so fails one test, never the
rest of its stage.

Lines: ``start NODEID`` before a test's setup, ``end OUTCOME NODEID`` after its teardown,
OUTCOME being passed, failed or skipped (failed when any phase failed); a file that
fails to collect is an ``end failed FILE`` line.
"""

from __future__ import annotations

import os

_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def rank() -> int:
    """This process's MPI rank from the launcher's environment (0 without one)."""
    for name in _RANK_VARS:
        if name in os.environ:
            return int(os.environ[name])
    return 0


class Progress:
    def __init__(self, path: str):
        self.file = open(f"{path}.{rank()}", "a", buffering=1, encoding="utf-8")
        self.outcome: dict[str, str] = {}

    def _write(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()

    def pytest_runtest_logstart(self, nodeid, location):
        self.outcome[nodeid] = "passed"
        self._write(f"start {nodeid}")

    def pytest_runtest_logreport(self, report):
        if report.when not in ("setup", "call", "teardown"):    # pytest-xdist: its worker died in it
            self.outcome.pop(report.nodeid, None)
            self._write(f"end failed {report.nodeid}")
            return
        if report.failed:
            self.outcome[report.nodeid] = "failed"
        elif report.skipped and self.outcome.get(report.nodeid) == "passed":
            self.outcome[report.nodeid] = "skipped"

    def pytest_collectreport(self, report):
        if report.failed:       # a test file that does not import fails the stage
            self._write(f"end failed {report.nodeid or 'collection'}")

    def pytest_runtest_logfinish(self, nodeid, location):
        self._write(f"end {self.outcome.pop(nodeid, 'passed')} {nodeid}")


def register(config) -> None:
    """Record progress when asked; under pytest-xdist only in the controller, which sees
    every worker's tests (and reports a test whose worker died as failed, then goes on)."""
    path = os.environ.get("MPIEVO_TEST_PROGRESS")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Progress(path), "mpievo-progress")
