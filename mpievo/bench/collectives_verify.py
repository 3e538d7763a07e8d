"""Benchmark inputs and their numpy references: a timed result is only reported once
it has been checked.

Every rank's input is a hash of (rank, element index), so any rank can regenerate
any slice of any rank's input: the reference needs no communication and is built in
chunks (bounded memory at 256 MiB messages). Inputs for floating max/min hold NaN
at the indices ``i`` with ``i % 61 == rank % 61``, so the NaN handling is part of
what is timed.

How results are compared:

- integers: exact (sums wrap like numpy);
- floating sums: ``|got - exact| <= (P - 1) * eps * sum(|x_r|)`` per element, the
  rounding bound of P - 1 additions in any order (exact is the float64 sum, which is
  exact for these inputs);
- max/min, mpievo: exact, NaN wherever any rank holds NaN (like ``numpy.maximum``);
- max/min, native MPI: exact where no rank holds NaN; where one does, MPI_MAX/MPI_MIN
  give an order-dependent value (NaN or not), so those elements are not compared;
- all-gather and broadcast: exact copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: reductions the benchmark verifies; all-gather and broadcast copy and have op None
OPS = ("sum", "max", "min")
REDUCING = ("allreduce", "reduce_scatter")
_NAN_STRIDE = 61             # prime: NaN positions of different ranks rarely coincide
_CHUNK = 1 << 20             # elements per reference chunk
_SENTINEL_BYTE = 0xA5        # unwritten output: float32 -2.9e-16 is no input value


@dataclass(frozen=True)
class Spec:
    """One timed case: which collective on which data, on how many ranks."""

    collective: str
    dtype: np.dtype
    op: str | None   # None for all-gather and broadcast
    count: int       # elements of the full array (a multiple of nranks)
    nranks: int

    @property
    def block(self) -> int:
        return self.count // self.nranks

    def label(self) -> str:
        what = str(self.dtype) if self.op is None else f"{self.dtype}:{self.op}"
        return f"{self.collective} {what} {self.count * self.dtype.itemsize} B"


def check_case(dtype, op: str | None) -> tuple[np.dtype, str | None]:
    """Validate a (dtype, op) pair the benchmark can time and verify.

    Raises:
        ValueError: op not in OPS, or a dtype that is neither integer nor float32/64
            (the MPI library has no type for float16 or bfloat16).
    """
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"expected a numpy dtype name such as float32 or int32, got {dtype!r}") from None
    if not dtype.isnative or (dtype.kind not in "iu" and dtype not in (np.float32, np.float64)):
        raise ValueError(f"expected a native-order integer dtype, float32 or float64, got {dtype}")
    if op is not None and op not in OPS:
        raise ValueError(f"expected op in {OPS}, got {op!r}")
    return dtype, op


def parse_cases(text: str) -> list[tuple[np.dtype, str]]:
    """'float32:sum,int32:sum' -> [(float32, 'sum'), (int32, 'sum')].

    Raises:
        ValueError: an entry that is not dtype:op with a valid dtype and op.
    """
    cases = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        dtype, sep, op = item.partition(":")
        if not sep:
            raise ValueError(f"expected dtype:op such as float32:max, got {item!r}")
        cases.append(check_case(dtype.strip(), op.strip()))
    if not cases:
        raise ValueError(f"expected at least one dtype:op case, got {text!r}")
    return cases


def _nan_inputs(dtype: np.dtype, op: str | None) -> bool:
    return dtype.kind == "f" and op in ("max", "min")


def rank_input(rank: int, start: int, stop: int, dtype, op: str | None) -> np.ndarray:
    """Elements ``[start, stop)`` of rank ``rank``'s input.

    Floats are k / 2**23 - 1 in [-1, 1) (exact in float32); integers take the hash's
    bits, so sums wrap.
    """
    dtype = np.dtype(dtype)
    index = np.arange(start, stop, dtype=np.uint64).astype(np.uint32)
    nan = (index % _NAN_STRIDE) == rank % _NAN_STRIDE if _nan_inputs(dtype, op) else None
    h = index  # murmur3's finaliser over index * golden ratio + rank, in place (uint32 wraps)
    h *= np.uint32(0x9E3779B1)
    h += np.uint32((rank + 1) * 0x632BE5AB & 0xFFFFFFFF)
    for shift, mult in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h ^= h >> np.uint32(shift)
        h *= np.uint32(mult)
    h ^= h >> np.uint32(16)
    if dtype.kind in "iu":
        return (h.view(np.int32) if dtype.kind == "i" else h).astype(dtype)
    x = (h >> np.uint32(8)).astype(dtype)
    x *= dtype.type(2.0 ** -23)
    x -= dtype.type(1)
    if nan is not None:
        x[nan] = np.nan
    return x


def fill_unwritten(buf: np.ndarray) -> np.ndarray:
    """Fill an output with a byte pattern, so that elements never written fail the check."""
    buf.view(np.uint8).fill(_SENTINEL_BYTE)
    return buf


def _reference(spec: Spec, start: int, stop: int):
    """(expected, bound or None) for elements [start, stop) of the full result."""
    if spec.collective == "broadcast":
        return rank_input(0, start, stop, spec.dtype, None), None
    if spec.collective == "allgather":  # rank r sends its elements [r*block, (r+1)*block)
        parts = [rank_input(r, max(start, r * spec.block), min(stop, (r + 1) * spec.block), spec.dtype, None)
                 for r in range(start // spec.block, (stop - 1) // spec.block + 1)]
        return np.concatenate(parts), None
    floating_sum = spec.op == "sum" and spec.dtype.kind == "f"
    acc = total = None
    for r in range(spec.nranks):
        x = rank_input(r, start, stop, spec.dtype, spec.op)
        if floating_sum:
            x = x.astype(np.float64)
            acc = x if acc is None else acc + x
            total = np.abs(x) if total is None else total + np.abs(x)
        elif acc is None:
            acc = x
        else:
            {"sum": np.add, "max": np.maximum, "min": np.minimum}[spec.op](acc, x, out=acc)
    if floating_sum:
        return acc, total * ((spec.nranks - 1) * float(np.finfo(spec.dtype).eps))
    return acc, None


def _wrong(got: np.ndarray, expected: np.ndarray, bound, native: bool) -> np.ndarray:
    """Boolean mask of wrong elements in one chunk."""
    if bound is not None:
        with np.errstate(invalid="ignore"):
            return ~(np.abs(got.astype(np.float64) - expected) <= bound)  # NaN got: wrong
    if expected.dtype.kind != "f":
        return got != expected
    expected_nan = np.isnan(expected)
    if native:  # MPI_MAX/MPI_MIN with NaN: order-dependent, not compared (module docstring)
        return ~expected_nan & (got != expected)
    return (expected_nan != np.isnan(got)) | (~expected_nan & (got != expected))


def verify(spec: Spec, got: np.ndarray, offset: int, *, native: bool = False) -> str | None:
    """Compare ``got`` (elements ``[offset, offset + got.size)`` of the full result)
    with the reference; return None when right, else what is wrong."""
    wrong, first = 0, None
    for start in range(0, got.size, _CHUNK):
        part = got[start:start + _CHUNK]
        expected, bound = _reference(spec, offset + start, offset + start + part.size)
        bad = np.flatnonzero(_wrong(part, expected, bound, native))
        if bad.size and first is None:
            i = int(bad[0])
            limit = "" if bound is None else f" +- {float(bound[i]):.3g}"
            first = (f"element {offset + start + i}: expected {expected[i].item()!r}{limit}, "
                     f"got {part[i].item()!r}")
        wrong += bad.size
    if not wrong:
        return None
    return f"expected the numpy reference, got {wrong} of {got.size} elements wrong (first: {first})"
