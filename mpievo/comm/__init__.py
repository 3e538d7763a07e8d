"""Custom collectives over mpi4py point-to-point messages.

``Communicator`` wraps any mpi4py intracommunicator (on a private duplicate) and
offers ring all-reduce (reduce-scatter + all-gather), reduce-scatter, all-gather
(uneven counts too) and broadcast, with sum/prod/max/min/mean, a latency algorithm,
the MPI library's own collective, shared-memory algorithms inside a node and
hierarchical ones across nodes (chosen by a calibrated table by size, op and node
layout), bucketing, non-blocking variants, timeouts and a validate mode.
``EngineComm`` (mpievo.comm.protocol) is what the layers above use of it, and
``SelfComm`` its one-rank implementation without MPI.

NaN semantics: sum/prod/mean follow IEEE arithmetic (a NaN anywhere gives NaN; the
NaN's payload bits are unspecified); max and min return NaN wherever any rank holds
NaN (like numpy.maximum), identically on every rank and whatever algorithm runs.

The names below are imported on first use (PEP 562), so importing this package, or
``mpievo.comm.protocol``, does not import mpi4py. This package knows nothing of the
evolutionary engine and never imports it.
"""

from __future__ import annotations

import importlib

#: public name -> submodule defining it
_EXPORTS = {
    "Communicator": "communicator",
    "DEFAULT_BUCKET_BYTES": "buckets",
    "EngineComm": "protocol",
    "SelfComm": "protocol",
    "abort_on_error": "abort",
    "report_and_abort": "abort",
    "SharedArray": "shared_array",
    "node_shared_array": "shared_array",
    "CommError": "errors",
    "CollectiveTimeoutError": "errors",
    "CollectiveMismatchError": "errors",
    "CommunicatorBrokenError": "errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
