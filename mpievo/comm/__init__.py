"""Custom collectives over mpi4py point-to-point messages.

``Communicator`` wraps any mpi4py intracommunicator (on a private duplicate) and
offers ring all-reduce (reduce-scatter + all-gather), reduce-scatter, all-gather
(uneven counts too) and broadcast, with sum/prod/max/min/mean, a latency algorithm
and the MPI library's own collective for small messages (chosen by a calibrated
size table), bucketing, non-blocking variants, timeouts and a validate mode.

NaN semantics: sum/prod/mean follow IEEE arithmetic (a NaN anywhere gives NaN; the
NaN's payload bits are unspecified); max and min return NaN wherever any rank holds
NaN (like numpy.maximum), identically on every rank and whatever algorithm runs.

This package knows nothing of the evolutionary engine and never imports it.
"""

from .abort import abort_on_error, report_and_abort
from .communicator import DEFAULT_BUCKET_BYTES, Communicator
from .errors import (CollectiveMismatchError, CollectiveTimeoutError, CommError,
                     CommunicatorBrokenError)

__all__ = [
    "Communicator", "abort_on_error", "report_and_abort", "DEFAULT_BUCKET_BYTES",
    "CommError", "CollectiveTimeoutError", "CollectiveMismatchError", "CommunicatorBrokenError",
]
