"""Every algorithm of every collective against a numpy reference built from every
rank's input (comm_reference).

Runs at any number of ranks (1..5 in tests/run.sh), on one node or on fake nodes
(MPIEVO_FAKE_NODES). Results must be bit-identical on all ranks (NaN payloads
aside: NaN is NaN).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from mpi4py import MPI

from comm_reference import (FLOATS, INTS, OPS, floating, identical_on_all_ranks, matches, rank_input,
                            reference, sizes, uneven_counts)
from mpievo.comm import Communicator
from mpievo.comm.ring import displacements, even_counts
from mpi_support import all_ranks_agree

pytestmark = pytest.mark.mpi(min_size=1)

P = MPI.COMM_WORLD.Get_size()
SIZES = sizes(P)
PIECE = 16 << 10  # the smallest shared-window piece: large inputs take many pipeline steps


@pytest.fixture(scope="module")
def comm():
    c = Communicator(shm_piece_bytes=PIECE)
    yield c
    c.free()


def runnable(comm, algorithm):
    """``shm`` needs one node: under fake nodes (MPIEVO_FAKE_NODES) it becomes the
    node-aware algorithm."""
    return "hierarchical" if algorithm == "shm" and len(comm.nodes) > 1 else algorithm


@pytest.mark.parametrize("algorithm", [None, "ring", "recursive_doubling", "native", "shm", "hierarchical"])
@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), op=st.sampled_from(OPS),
       in_place=st.booleans(), nan=st.booleans(), seed=st.integers(0, 2**16))
@example(n=1009, dtype=np.dtype(np.float64), op="mean", in_place=False, nan=False, seed=1)
@example(n=300_007, dtype=np.dtype(np.float32), op="max", in_place=True, nan=True, seed=2)
def test_allreduce_matches_numpy(comm, world, n, dtype, op, algorithm, in_place, nan, seed):
    if op == "mean" and dtype.kind in "iu":
        op = "sum"
    algorithm, nan = runnable(comm, algorithm), nan and floating(dtype)
    x = rank_input(seed, comm.rank, n, dtype, op, nan)
    original = x.copy()
    if in_place:
        out = comm.allreduce(x, x, op, algorithm=algorithm)
        assert out is x
    else:
        out = comm.allreduce(x, None, op, algorithm=algorithm)
        assert np.array_equal(x.view(np.uint8), original.view(np.uint8)), "sendbuf modified"
    ok, why = matches(out, reference(seed, n, dtype, op, nan, P), dtype, op, P)
    all_ranks_agree(world, ok and identical_on_all_ranks(world, out), f"{why} n={n} {dtype} {op} {algorithm}")


@pytest.mark.parametrize("algorithm", [None, "ring", "native", "shm"])
@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), op=st.sampled_from(OPS),
       uneven=st.booleans(), seed=st.integers(0, 2**16))
def test_reduce_scatter_matches_numpy(comm, world, n, dtype, op, algorithm, uneven, seed):
    if op == "mean" and dtype.kind in "iu":
        op = "sum"
    if algorithm == "shm" and len(comm.nodes) > 1:
        algorithm = "ring"  # reduce-scatter has no node-aware algorithm
    counts = even_counts(n, P)
    if uneven:  # weights 1..P, the remainder on the last rank (zeros at small n)
        counts = [n * (q + 1) // (P * (P + 1) // 2) for q in range(P)]
        counts[-1] += n - sum(counts)
    x = rank_input(seed, comm.rank, n, dtype, op, False)
    out = comm.reduce_scatter(x, None, op, counts=counts, algorithm=algorithm)
    d = displacements(counts)
    ref = reference(seed, n, dtype, op, False, P)[d[comm.rank]:d[comm.rank] + counts[comm.rank]]
    ok, why = matches(out, ref, dtype, op, P)
    all_ranks_agree(world, ok and out.size == counts[comm.rank], f"{why} n={n} {dtype} {op} {counts}")


@pytest.mark.parametrize("algorithm", [None, "ring", "native", "shm", "hierarchical"])
@given(base=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), in_place=st.booleans(),
       explicit_counts=st.booleans(), seed=st.integers(0, 2**16))
def test_allgather_uneven_counts(comm, world, base, dtype, algorithm, in_place, explicit_counts, seed):
    algorithm = runnable(comm, algorithm)
    counts = uneven_counts(base, P)
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


@pytest.mark.parametrize("algorithm", [None, "chain", "native", "shm", "hierarchical"])
@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), root=st.integers(0, 4),
       seed=st.integers(0, 2**16))
def test_broadcast_any_root(comm, world, n, dtype, root, algorithm, seed):
    root, algorithm = root % P, runnable(comm, algorithm)
    data = rank_input(seed, root, n, dtype, "sum", False)
    buf = data.copy() if comm.rank == root else np.zeros(n, dtype)
    comm.broadcast(buf, root, algorithm=algorithm)
    all_ranks_agree(world, np.array_equal(buf.view(np.uint8), data.view(np.uint8)),
                    f"broadcast n={n} root={root} {algorithm}")


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "native", "shm", "hierarchical"])
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nan_propagates_whatever_rank_holds_it(comm, world, algorithm, op, dtype):
    algorithm = runnable(comm, algorithm)
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
