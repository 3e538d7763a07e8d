"""Stop signals that reach ``mpievo run`` while it is still importing.

A launcher may pass on a stop request (SIGUSR1, SIGTERM, SIGINT) the moment the ranks
exist, a second before ``mpievo run`` has loaded the code that installs its handlers,
and the signal's default action would end the rank. ``python -m mpievo run`` calls
:func:`install` first thing; :func:`mpievo.faults.install_stop_handlers` takes over the
signals and turns any recorded here into a stop request. Standard library only: it
runs before anything else is imported.
"""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
#: the signals recorded, in arrival order
received: list[int] = []


def record(signum: int, frame) -> None:
    """The early handler: only remembers the signal."""
    received.append(signum)


def install() -> None:
    """Record :data:`SIGNALS` until the real handlers are installed."""
    for signum in SIGNALS:
        signal.signal(signum, record)
