"""Inputs and numpy references for the collectives' property tests (any rank count).

Every rank regenerates every rank's input from (seed, rank), so the reference needs
no communication; results must be bit-identical on all ranks (NaN payloads aside).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32)]
FLOATS = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BF16]
OPS = ["sum", "prod", "max", "min", "mean"]
REFERENCE_UFUNC = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
                   "mean": np.add}


def sizes(p: int) -> list[int]:
    """0, 1, P-1, P, P+1, primes, and a large one (several pipeline segments)."""
    return sorted({0, 1, max(p - 1, 0), p, p + 1, 7, 13, 101, 1009, 300_007})


def floating(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) == BF16


def rank_input(seed: int, rank: int, n: int, dtype, op: str, nan: bool) -> np.ndarray:
    """Rank ``rank``'s contribution; values keep products and float16 sums in range."""
    rng = np.random.default_rng([seed, rank, n])
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        low, high = (-3, 4) if dtype.kind == "i" else (0, 6)
        if op != "prod":
            info = np.iinfo(dtype)
            low, high = max(info.min, -1000), min(info.max, 1000) + 1  # sums may wrap: fine, exact
        return rng.integers(low, high, size=n).astype(dtype)
    x = rng.uniform(0.5, 1.5, size=n) if op == "prod" else rng.standard_normal(n) * 4
    x = x.astype(np.float32).astype(dtype)
    if nan and n:
        x[rng.integers(0, n, size=max(1, n // 50))] = np.nan
    return x


def reference(seed, n, dtype, op, nan, p: int):
    stack = np.stack([rank_input(seed, q, n, dtype, op, nan) for q in range(p)])
    if np.dtype(dtype).kind in "iu":
        return REFERENCE_UFUNC[op].reduce(stack, axis=0, dtype=dtype)
    wide = stack.astype(np.float64)
    ref = REFERENCE_UFUNC[op].reduce(wide, axis=0) if n else np.zeros(0)
    return ref / p if op == "mean" else ref


def matches(result, ref, dtype, op, p: int) -> tuple[bool, str]:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" or op in ("max", "min"):
        ok = np.array_equal(result.astype(np.float64) if floating(dtype) else result, ref, equal_nan=True)
        return ok, "exact mismatch"
    got = result.astype(np.float64)
    rtol = {2: 6e-2, 4: 1e-5, 8: 1e-12}[dtype.itemsize]
    scale = np.abs(ref) + 1.0
    ok = bool(np.all((np.abs(got - ref) <= rtol * scale * p) | (np.isnan(got) & np.isnan(ref))))
    return ok, f"max error {np.nanmax(np.abs(got - ref), initial=0.0)}"


def identical_on_all_ranks(world, arr: np.ndarray) -> bool:
    canon = arr.astype(np.float64) if arr.dtype == BF16 else arr.copy()
    if canon.dtype.kind == "f":
        canon[np.isnan(canon)] = np.nan  # one NaN bit pattern
    blobs = world.allgather(canon.tobytes())
    return all(b == blobs[0] for b in blobs)


def uneven_counts(base: int, p: int) -> list[int]:
    """Per-rank all-gather counts: uneven, zeros possible."""
    return [(base + 3 * q) % (base + 2) for q in range(p)]
