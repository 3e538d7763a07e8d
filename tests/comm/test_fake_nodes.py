"""The hierarchical collectives on fake nodes (MPIEVO_FAKE_NODES) against numpy.

One machine plays 1, 2 or 3 nodes of consecutive ranks, or 2 nodes of interleaved
ranks (rank r on node r % 2), at whatever rank count the run has (2..5 in
tests/run.sh); layouts the rank count does not allow are skipped. Every rank must
get the reference, bit-identical everywhere.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from mpi4py import MPI

from comm_reference import (FLOATS, INTS, OPS, floating, identical_on_all_ranks, matches, rank_input,
                            reference, sizes, uneven_counts)
from mpievo.comm import Communicator
from mpievo.comm.nodes import FAKE_NODES_ENV
from mpievo.comm.ring import displacements
from mpi_support import all_ranks_agree

pytestmark = pytest.mark.mpi(min_size=1)

P = MPI.COMM_WORLD.Get_size()
SIZES = sizes(P)


def expected_nodes(layout: str) -> tuple:
    if layout == "interleaved":
        return tuple(tuple(r for r in range(P) if r % 2 == k) for k in range(min(2, P)))
    k = int(layout)
    return tuple(tuple(r for r in range(P) if r * k // P == j) for j in range(k))


@pytest.fixture(scope="module", params=["1", "2", "3", "interleaved"])
def fake(request):
    """A communicator on fake nodes; skipped where the rank count cannot make them."""
    layout = request.param
    if (layout == "interleaved" and P < 3) or (layout != "interleaved" and int(layout) > P):
        pytest.skip(f"{layout} fake nodes need more than {P} ranks")
    spec = ",".join(str(r % 2) for r in range(P)) if layout == "interleaved" else layout
    previous = os.environ.get(FAKE_NODES_ENV)
    os.environ[FAKE_NODES_ENV] = spec
    try:
        comm = Communicator(timeout=120, shm_piece_bytes=16 << 10)
    finally:
        if previous is None:
            del os.environ[FAKE_NODES_ENV]
        else:
            os.environ[FAKE_NODES_ENV] = previous
    assert comm.nodes == expected_nodes(layout), comm.nodes
    yield comm
    comm.free()


@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), op=st.sampled_from(OPS),
       in_place=st.booleans(), nan=st.booleans(), seed=st.integers(0, 2**16))
@example(n=1009, dtype=np.dtype(np.float64), op="mean", in_place=False, nan=False, seed=1)
@example(n=300_007, dtype=np.dtype(np.float32), op="max", in_place=True, nan=True, seed=2)
def test_allreduce(fake, world, n, dtype, op, in_place, nan, seed):
    if op == "mean" and dtype.kind in "iu":
        op = "sum"
    nan = nan and floating(dtype)
    x = rank_input(seed, fake.rank, n, dtype, op, nan)
    out = fake.allreduce(x, x if in_place else None, op, algorithm="hierarchical")
    ok, why = matches(out, reference(seed, n, dtype, op, nan, P), dtype, op, P)
    all_ranks_agree(world, ok and identical_on_all_ranks(world, out),
                    f"{why} n={n} {dtype} {op} nodes={fake.nodes}")


@given(base=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), in_place=st.booleans(),
       seed=st.integers(0, 2**16))
def test_allgather(fake, world, base, dtype, in_place, seed):
    counts = uneven_counts(base, P)
    blocks = [rank_input(seed, q, counts[q], dtype, "sum", False) for q in range(P)]
    d = displacements(counts)
    out = np.zeros(sum(counts), dtype)
    own = out[d[fake.rank]:d[fake.rank] + counts[fake.rank]]
    if in_place:
        own[...] = blocks[fake.rank]
    got = fake.allgather(own if in_place else blocks[fake.rank], out, counts=counts, algorithm="hierarchical")
    ok = got is out and np.array_equal(out.view(np.uint8), np.concatenate(blocks).view(np.uint8))
    all_ranks_agree(world, ok, f"counts={counts} {dtype} nodes={fake.nodes}")


@given(n=st.sampled_from(SIZES), dtype=st.sampled_from(INTS + FLOATS), seed=st.integers(0, 2**16))
def test_broadcast_from_every_root(fake, world, n, dtype, seed):
    ok = True
    for root in range(P):
        data = rank_input(seed, root, n, dtype, "sum", False)
        buf = data.copy() if fake.rank == root else np.zeros(n, dtype)
        fake.broadcast(buf, root, algorithm="hierarchical")
        ok &= np.array_equal(buf.view(np.uint8), data.view(np.uint8))
    all_ranks_agree(world, ok, f"n={n} {dtype} nodes={fake.nodes}")


def test_automatic_selection_runs_node_aware_algorithms(fake, world):
    # large calls: whatever the table picks must be runnable on this layout
    n = 3 << 20
    x = np.full(n, fake.rank + 1.0, np.float32)
    chosen = {c: fake.algorithm_for(c, 4 * n) for c in ("allreduce", "allgather", "broadcast", "reduce_scatter")}
    out = fake.allreduce(x)
    gathered = fake.allgather(x[:n // P], counts=[n // P] * P)
    ok = (np.all(out == P * (P + 1) / 2) and np.array_equal(gathered, np.repeat(np.arange(1.0, P + 1), n // P))
          and (len(fake.nodes) == 1 or "shm" not in chosen.values()))
    all_ranks_agree(world, ok, f"chosen {chosen}")
