"""Host reduction kernels: ``dst = dst op src`` in place, no temporaries.

NaN semantics (shared by every algorithm in mpievo.comm): ``sum``, ``prod`` and
``mean`` follow IEEE arithmetic; ``max`` and ``min`` propagate NaN whatever rank
holds it (like ``numpy.maximum``), unlike MPI_MAX in some MPI libraries.
"""

from __future__ import annotations

import numpy as np

try:  # bfloat16 comes from ml_dtypes (a dependency); keep import optional for safety
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    BFLOAT16 = None

#: op name -> binary ufunc used to combine two buffers element-wise.
REDUCE_OPS = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "mean": np.add,  # mean = sum, then one division by the number of ranks
}

_INT_DTYPES = tuple(np.dtype(t) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
_FLOAT_DTYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))
SUPPORTED_DTYPES = _INT_DTYPES + _FLOAT_DTYPES + ((BFLOAT16,) if BFLOAT16 is not None else ())
_SUPPORTED_SET = frozenset(SUPPORTED_DTYPES)
_FLOAT_SET = frozenset(_FLOAT_DTYPES + ((BFLOAT16,) if BFLOAT16 is not None else ()))


def supported_dtype(dtype) -> bool:
    """Return True when mpievo's collectives can reduce buffers of ``dtype``."""
    return np.dtype(dtype) in _SUPPORTED_SET


def is_floating(dtype) -> bool:
    """True for float16/32/64 and bfloat16."""
    return np.dtype(dtype) in _FLOAT_SET


def check_reducible(dtype, op: str) -> None:
    """Validate a (dtype, op) pair.

    Raises:
        ValueError: unknown op, or ``mean`` on an integer dtype.
        TypeError: dtype not supported.
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"expected op in {sorted(REDUCE_OPS)}, got {op!r}")
    dtype = np.dtype(dtype)
    if not supported_dtype(dtype):
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"expected a dtype among ({names}), got {dtype}")
    if op == "mean" and not is_floating(dtype):
        raise ValueError(
            f"op 'mean' expected a floating-point dtype, got {dtype} "
            "(use op='sum' and divide, so the integer result stays exact)")


def reduce_into(dst: np.ndarray, src: np.ndarray, op: str) -> None:
    """Combine in place: ``dst = dst op src`` (no temporary).

    Args:
        dst: destination, same shape and dtype as ``src``; overwritten.
        src: second operand.
        op: one of REDUCE_OPS.
    """
    REDUCE_OPS[op](dst, src, out=dst)


def reduce_into_swapped(dst: np.ndarray, src: np.ndarray, op: str) -> None:
    """Combine in place with swapped operands: ``dst = src op dst``.

    Used where two ranks combine the same pair and must get identical bits
    (NaN payloads depend on operand order): both compute ``low op high``.
    """
    REDUCE_OPS[op](src, dst, out=dst)


def reduce_all(dst: np.ndarray, operands, op: str) -> None:
    """``dst = operands[0] op operands[1] op ...`` left to right, without temporaries.

    ``dst`` may alias ``operands[0]`` (the first combination reads it before writing)
    but no later operand. Needs at least two operands.
    """
    ufunc = REDUCE_OPS[op]
    ufunc(operands[0], operands[1], out=dst)
    for src in operands[2:]:
        ufunc(dst, src, out=dst)


def divide_into(dst: np.ndarray, divisor: int) -> None:
    """``dst /= divisor`` in place (the final step of ``mean``)."""
    np.divide(dst, dst.dtype.type(divisor), out=dst)


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` without a temporary."""
    np.copyto(dst, src)
