"""Collectives against a numpy reference built from every rank's input.

Runs at any number of ranks (1..5 in tests/run.sh). Every rank regenerates every
rank's input from (seed, rank), so the reference needs no communication, and
results must be bit-identical on all ranks (NaN payloads aside: NaN is NaN).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpi4py import MPI

from mpievo.comm import Communicator
from mpievo.comm.ring import displacements, even_counts
from mpi_support import all_ranks_agree

pytestmark = pytest.mark.mpi(min_size=1)

P = MPI.COMM_WORLD.Get_size()
BF16 = np.dtype(ml_dtypes.bfloat16)
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32)]
FLOATS = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BF16]
OPS = ["sum", "prod", "max", "min", "mean"]
# 0, 1, P-1, P, P+1, primes, and a large one (crosses the ring threshold, several segments)
SIZES = sorted({0, 1, max(P - 1, 0), P, P + 1, 7, 13, 101, 1009, 300_007})
REFERENCE_UFUNC = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
                   "mean": np.add}


@pytest.fixture(scope="module")
def comm():
    c = Communicator()
    yield c
    c.free()


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


def reference(seed, n, dtype, op, nan):
    stack = np.stack([rank_input(seed, q, n, dtype, op, nan) for q in range(P)])
    if np.dtype(dtype).kind in "iu":
        return REFERENCE_UFUNC[op].reduce(stack, axis=0, dtype=dtype)
    wide = stack.astype(np.float64)
    ref = REFERENCE_UFUNC[op].reduce(wide, axis=0) if n else np.zeros(0)
    return ref / P if op == "mean" else ref


def matches(result, ref, dtype, op) -> tuple[bool, str]:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" or op in ("max", "min"):
        ok = np.array_equal(result.astype(np.float64) if dtype.kind == "f" or dtype == BF16 else result,
                            ref, equal_nan=True)
        return ok, "exact mismatch"
    got = result.astype(np.float64)
    rtol = {2: 6e-2, 4: 1e-5, 8: 1e-12}[dtype.itemsize]
    scale = np.abs(ref) + 1.0
    ok = bool(np.all((np.abs(got - ref) <= rtol * scale * P) | (np.isnan(got) & np.isnan(ref))))
    return ok, f"max error {np.nanmax(np.abs(got - ref), initial=0.0)}"


def identical_on_all_ranks(world, arr: np.ndarray) -> bool:
    canon = arr.astype(np.float64) if arr.dtype == BF16 else arr.copy()
    if canon.dtype.kind == "f":
        canon[np.isnan(canon)] = np.nan  # one NaN bit pattern
    blobs = world.allgather(canon.tobytes())
    return all(b == blobs[0] for b in blobs)


@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), op=st.sampled_from(OPS),
       algorithm=st.sampled_from([None, "ring", "recursive_doubling", "native"]),
       in_place=st.booleans(), nan=st.booleans(), seed=st.integers(0, 2**16))
def test_allreduce_matches_numpy(comm, world, n, dtype, op, algorithm, in_place, nan, seed):
    if op == "mean" and dtype.kind in "iu":
        op = "sum"
    x = rank_input(seed, comm.rank, n, dtype, op, nan and dtype.kind == "f" or nan and dtype == BF16)
    original = x.copy()
    if in_place:
        out = comm.allreduce(x, x, op, algorithm=algorithm)
        assert out is x
    else:
        out = comm.allreduce(x, None, op, algorithm=algorithm)
        assert np.array_equal(x.view(np.uint8), original.view(np.uint8)), "sendbuf modified"
    ok, why = matches(out, reference(seed, n, dtype, op, nan and (dtype.kind == "f" or dtype == BF16)), dtype, op)
    all_ranks_agree(world, ok and identical_on_all_ranks(world, out), f"{why} n={n} {dtype} {op} {algorithm}")


@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), op=st.sampled_from(OPS),
       algorithm=st.sampled_from([None, "ring", "native"]), uneven=st.booleans(),
       seed=st.integers(0, 2**16))
def test_reduce_scatter_matches_numpy(comm, world, n, dtype, op, algorithm, uneven, seed):
    if op == "mean" and dtype.kind in "iu":
        op = "sum"
    counts = even_counts(n, P)
    if uneven:  # weights 1..P, the remainder on the last rank (zeros at small n)
        counts = [n * (q + 1) // (P * (P + 1) // 2) for q in range(P)]
        counts[-1] += n - sum(counts)
    x = rank_input(seed, comm.rank, n, dtype, op, False)
    out = comm.reduce_scatter(x, None, op, counts=counts, algorithm=algorithm)
    d = displacements(counts)
    ref = reference(seed, n, dtype, op, False)[d[comm.rank]:d[comm.rank] + counts[comm.rank]]
    ok, why = matches(out, ref, dtype, op)
    all_ranks_agree(world, ok and out.size == counts[comm.rank], f"{why} n={n} {dtype} {op} {counts}")


@given(base=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS),
       algorithm=st.sampled_from([None, "ring", "native"]), in_place=st.booleans(),
       explicit_counts=st.booleans(), seed=st.integers(0, 2**16))
def test_allgather_uneven_counts(comm, world, base, dtype, algorithm, in_place, explicit_counts, seed):
    counts = [(base + 3 * q) % (base + 2) for q in range(P)]  # uneven, zeros possible
    blocks = [rank_input(seed, q, counts[q], dtype, "sum", False) for q in range(P)]
    expected = np.concatenate(blocks) if blocks else np.zeros(0, dtype)
    d = displacements(counts)
    if in_place:
        out = np.zeros(sum(counts), dtype)
        own = out[d[comm.rank]:d[comm.rank] + counts[comm.rank]]
        own[...] = blocks[comm.rank]
        result = comm.allgather(own, out, counts=counts, algorithm=algorithm)
    else:
        result = comm.allgather(blocks[comm.rank], counts=counts if explicit_counts else None,
                                algorithm=algorithm)
    ok = np.array_equal(result.view(np.uint8), expected.view(np.uint8))
    all_ranks_agree(world, ok, f"allgather counts={counts} {dtype} {algorithm}")


@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), root=st.integers(0, 4),
       algorithm=st.sampled_from([None, "chain", "native"]), seed=st.integers(0, 2**16))
def test_broadcast_any_root(comm, world, n, dtype, root, algorithm, seed):
    root = root % P
    data = rank_input(seed, root, n, dtype, "sum", False)
    buf = data.copy() if comm.rank == root else np.zeros(n, dtype)
    comm.broadcast(buf, root, algorithm=algorithm)
    all_ranks_agree(world, np.array_equal(buf.view(np.uint8), data.view(np.uint8)),
                    f"broadcast n={n} root={root} {algorithm}")


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "native"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nan_propagates_whatever_rank_holds_it(comm, world, algorithm, op, dtype):
    # Each position has its NaN on a different rank; Open MPI's MPI_MAX loses some.
    n = 4 * P + 3
    x = np.arange(n, dtype=dtype) + comm.rank
    x[comm.rank::P] = np.nan
    out = comm.allreduce(x, None, op, algorithm=algorithm)
    expect_nan = np.zeros(n, bool)
    for q in range(P):
        expect_nan[q::P] = True
    all_ranks_agree(world, np.array_equal(np.isnan(out), expect_nan)
                    and identical_on_all_ranks(world, out), f"{out}")


def test_shapes_are_kept_and_reduced_elementwise(comm, world):
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * (comm.rank + 1)
    out = comm.allreduce(x)
    all_ranks_agree(world, out.shape == (2, 3, 4)
                    and np.allclose(out, np.arange(24).reshape(2, 3, 4) * P * (P + 1) / 2))


def test_traffic_is_counted_by_purpose(comm, world):
    n = 1 << 18
    counts = even_counts(n, P)
    before = dict(comm.traffic)
    with comm.purpose("gradients"):
        comm.allreduce(np.ones(n, np.float32), algorithm="ring")
    sent = comm.traffic.get("gradients", 0) - before.get("gradients", 0)
    expected = 0 if P == 1 else 4 * (2 * n - counts[comm.rank] - counts[(comm.rank + 1) % P])
    all_ranks_agree(world, sent == expected, f"sent {sent}, expected {expected}")
