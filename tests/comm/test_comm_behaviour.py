"""Communicator behaviour: bad input, timeouts, validate mode, non-blocking calls,
bucketing, point-to-point exchange, private traffic."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

from mpi_support import all_ranks_agree
from mpievo.comm import (CollectiveMismatchError, CollectiveTimeoutError, Communicator,
                         CommunicatorBrokenError)

P = MPI.COMM_WORLD.Get_size()


@pytest.fixture
def comm():
    c = Communicator()
    yield c
    if c.broken is None:
        c.free()


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("call, match", [
    (lambda c: c.allreduce(np.ones(10, np.complex128)), r"expected a dtype among .* got complex128"),
    (lambda c: c.allreduce(np.ones(10), op="avg"), r"expected op in .* got 'avg'"),
    (lambda c: c.allreduce(np.ones(10, np.int32), op="mean"), r"expected a floating-point dtype, got int32"),
    (lambda c: c.allreduce(np.ones((4, 4))[:, 1]), r"expected sendbuf to be C-contiguous, got strides"),
    (lambda c: c.allreduce(np.ones(10), np.ones(9)), r"expected recvbuf with 10 elements of float64, got 9"),
    (lambda c: c.allreduce(np.ones(10), np.ones(10, np.float32)), r"10 elements of float64, got 10 elements of float32"),
    (lambda c: c.allreduce([1.0, 2.0]), r"expected sendbuf to be a numpy array .* got builtins.list"),
    (lambda c: c.allreduce(np.ones(4), algorithm="magic"), r"expected allreduce algorithm in .* got 'magic'"),
    (lambda c: c.broadcast(np.ones(3), root=P), rf"expected root in \[0, {P - 1}\], got {P}"),
    (lambda c: c.broadcast(np.ones(3), root=-1), r"expected root in .* got -1"),
    (lambda c: c.allgather(np.ones(3), counts=[3] * (P + 1)), r"expected counts to be .* \(one per rank\), got"),
    (lambda c: c.reduce_scatter(np.ones(10), counts=[11] + [0] * (P - 1)), r"expected counts summing to sendbuf's 10"),
    (lambda c: c.allreduce_buckets([np.ones(3)], bucket_bytes=0), r"expected bucket_bytes >= 1, got 0"),
])
def test_bad_input_says_expected_and_got(comm, call, match):
    # validation happens before any message, so every rank raises and nothing is left in flight
    with pytest.raises((TypeError, ValueError), match=match):
        call(comm)
    comm.barrier(timeout=30)


@pytest.mark.mpi(min_size=1)
def test_read_only_recvbuf_is_refused(comm):
    out = np.empty(4)
    out.flags.writeable = False
    with pytest.raises(TypeError, match="expected recvbuf to be writable, got a read-only array"):
        comm.allreduce(np.ones(4), out)


@pytest.mark.mpi(min_size=2)
def test_timeout_names_operation_and_peers(world):
    comm = Communicator()
    if comm.rank == 0:
        start = time.monotonic()
        with pytest.raises(CollectiveTimeoutError, match=r"allreduce on rank 0 timed out after 0.5 s waiting for from rank") as info:
            comm.allreduce(np.ones(1 << 16), algorithm="ring", timeout=0.5)
        assert time.monotonic() - start < 10
        assert ("from", P - 1) in info.value.peers
        with pytest.raises(CommunicatorBrokenError, match="communicator unusable"):
            comm.allreduce(np.ones(4))
    world.Barrier()  # the other ranks never joined: rank 0's messages stay on the private dup


@pytest.mark.mpi(min_size=2)
def test_validate_mode_reports_mismatched_calls(world):
    comm = Communicator(validate=True, timeout=30)
    with pytest.raises(CollectiveMismatchError, match=r"rank 0: allreduce\(count=10.*rank 1: allreduce\(count=11"):
        comm.allreduce(np.ones(10 + min(comm.rank, 1)))
    with pytest.raises(CollectiveMismatchError, match=r"rank 0: broadcast.*rank 1: allreduce"):
        if comm.rank == 0:
            comm.broadcast(np.ones(10))
        else:
            comm.allreduce(np.ones(10))
    with pytest.raises(CollectiveMismatchError, match=r"op=sum.*op=max|op=max.*op=sum"):
        comm.allreduce(np.ones(4), op="sum" if comm.rank == 0 else "max")
    out = comm.allreduce(np.ones(6))  # still usable: nothing was sent after the check
    all_ranks_agree(world, np.all(out == P))


@pytest.mark.mpi(min_size=1)
def test_nonblocking_requests_complete_in_any_order(comm, world):
    a, b = np.full(1 << 17, comm.rank + 1.0), np.arange(50.0) * (comm.rank + 1)
    req_a = comm.iallreduce(a, None, "sum", algorithm="ring")
    req_b = comm.iallreduce(b, None, "max")
    req_c = comm.ibroadcast(np.arange(1000.0) if comm.rank == 0 else np.zeros(1000), 0)
    while not req_b.test():
        pass
    out_c = req_c.wait()
    out_a = req_a.wait()
    out_b = req_b.wait()
    ok = (np.all(out_a == P * (P + 1) / 2) and np.array_equal(out_b, np.arange(50.0) * P)
          and np.array_equal(out_c, np.arange(1000.0)) and req_a.done)
    all_ranks_agree(world, ok)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("bucket_bytes", [1, 64, 1 << 20])
def test_buckets_reduce_mixed_arrays_in_place(comm, world, bucket_bytes):
    rng = np.random.default_rng(7)
    shapes = [(3, 4), (5,), (2, 2, 2), (1,), (17, 3)]
    dtypes = [np.float32, np.int64, np.float32, np.float64, np.int64]
    base = [rng.integers(-9, 9, size=s).astype(d) for s, d in zip(shapes, dtypes)]
    arrays = [b * (comm.rank + 1) for b in base]
    ids = [id(a) for a in arrays]
    out = comm.allreduce_buckets(arrays, "sum", bucket_bytes=bucket_bytes)
    factor = P * (P + 1) // 2
    ok = (out is arrays and [id(a) for a in arrays] == ids
          and all(a.shape == s and a.dtype == d and np.array_equal(a, b * factor)
                  for a, s, d, b in zip(arrays, shapes, dtypes, base)))
    all_ranks_agree(world, ok)


@pytest.mark.mpi(min_size=2)
def test_exchange_everyone_sends_large_at_once(comm, world):
    # every rank sends 24 MiB to both neighbours before anyone receives: must not deadlock
    n = 3 << 20
    right, left = (comm.rank + 1) % P, (comm.rank - 1) % P
    out_r, out_l = np.full(n, comm.rank, np.float64), np.full(n, -comm.rank, np.float64)
    in_l, in_r = np.empty(n), np.empty(n)
    with comm.purpose("migration"):
        comm.exchange(sends=[(right, out_r), (left, out_l)], recvs=[(left, in_l), (right, in_r)], timeout=60)
    ok = np.all(in_l == left) and np.all(in_r == -right) and comm.traffic["migration"] == 2 * n * 8
    all_ranks_agree(world, ok)


@pytest.mark.mpi(min_size=2)
def test_library_traffic_never_matches_user_messages(comm, world):
    # a user message with an mpievo-like tag is posted first on the user's communicator
    rank, right, left = comm.rank, (comm.rank + 1) % P, (comm.rank - 1) % P
    user_in = np.empty(8)
    req = world.Irecv(user_in, source=left, tag=101)
    out = comm.allreduce(np.ones(1 << 16) * rank, algorithm="ring")
    world.Send(np.full(8, 42.0), dest=right, tag=101)
    req.Wait()
    all_ranks_agree(world, np.all(out == sum(range(P))) and np.all(user_in == 42.0))


@pytest.mark.mpi(min_size=1)
def test_object_helpers(comm, world):
    got = comm.allgather_object({"rank": comm.rank})
    root_view = comm.gather_object(comm.rank * 2, root=P - 1)
    cfg = comm.bcast_object({"seed": 5} if comm.rank == 0 else None)
    ok = [g["rank"] for g in got] == list(range(P)) and cfg == {"seed": 5}
    ok &= root_view == [2 * r for r in range(P)] if comm.rank == P - 1 else root_view is None
    all_ranks_agree(world, ok)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_compression_option_compresses_float32_only(comm, world, compression):
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal(10_001).astype(np.float32)
    via_option = comm.allreduce(x, None, "sum", compression=compression)
    nonblocking = comm.iallreduce(x, None, "sum", compression=compression).wait()
    exact = comm.allreduce(x, None, "sum")
    ints = [np.arange(5, dtype=np.int64) * (comm.rank + 1), x.copy()]
    comm.allreduce_buckets(ints, "sum", compression=compression)
    wire_changes_bits = P == 1 or not np.array_equal(via_option, exact)
    ok = (np.array_equal(via_option, nonblocking) and np.allclose(via_option, exact, rtol=0.05, atol=0.05 * P)
          and wire_changes_bits and np.array_equal(ints[0], np.arange(5) * P * (P + 1) // 2)
          and np.array_equal(ints[1], via_option))
    all_ranks_agree(world, ok)
    with pytest.raises(ValueError, match=r"expected compression among .* got 'zip'"):
        comm.allreduce(x, compression="zip")


@pytest.mark.mpi(min_size=1)
def test_direct_native_paths_give_the_same_results_and_errors(comm, world):
    # equal counts and a given recvbuf take the direct MPI call when the table picks native
    n = 64
    mine = np.arange(n, dtype=np.int16) + 100 * comm.rank
    out = np.empty(n * P, np.int16)
    got = comm.allgather(mine, out, counts=[n] * P)
    ok = got is out and np.array_equal(out, np.concatenate([np.arange(n) + 100 * r for r in range(P)]))
    buf = np.arange(10.0) if comm.rank == P - 1 else np.zeros(10)
    ok &= np.array_equal(comm.broadcast(buf, P - 1), np.arange(10.0))
    all_ranks_agree(world, ok)
    with pytest.raises(TypeError, match="expected recvbuf to be C-contiguous"):
        comm.allgather(mine, np.empty((n * P, 2), np.int16)[:, 0], counts=[n] * P)
    with pytest.raises(ValueError, match=r"expected recvbuf with .* elements of int16, got .* of int32"):
        comm.allgather(mine, np.empty(n * P, np.int32), counts=[n] * P)


@pytest.mark.mpi(min_size=1)
def test_in_place_allgather_of_equal_blocks_on_the_direct_path(monkeypatch, world):
    # the block is a view into the result: MPI must be told IN_PLACE (MPICH refuses aliases)
    monkeypatch.delenv("MPIEVO_COMM_TIMEOUT", raising=False)
    comm = Communicator()
    out = np.zeros(3 * P, np.int32)
    own = out[3 * comm.rank:3 * comm.rank + 3]
    own[...] = comm.rank + 1
    got = comm.allgather(own, out, counts=[3] * P)
    comm.free()
    all_ranks_agree(world, got is out and np.array_equal(out, np.repeat(np.arange(1, P + 1), 3)), f"{out}")


@pytest.mark.mpi(min_size=2)
def test_small_calls_skip_the_drivers_unless_they_need_them(monkeypatch, world):
    # the direct MPI calls are what keeps a tiny collective within ~0.5 us of raw mpi4py
    from mpievo.comm import allgather, allreduce, broadcast

    monkeypatch.delenv("MPIEVO_COMM_TIMEOUT", raising=False)
    calls = []
    for driver in (allreduce, allgather, broadcast):
        def run(*args, _run=driver.run, _name=driver.__name__.rsplit(".")[-1], **kwargs):
            calls.append(_name)
            return _run(*args, **kwargs)

        monkeypatch.setattr(driver, "run", run)
    comm = Communicator()
    x, out, gathered = np.full(8, comm.rank + 1.0), np.empty(8), np.empty(8 * P)
    comm.allreduce(x, out)
    comm.allgather(x, gathered, counts=[8] * P)
    payload = np.arange(8.0) if comm.rank == 0 else np.zeros(8)
    comm.broadcast(payload, 0)
    direct = list(calls)
    sent = comm.traffic["collective"]
    comm.allreduce(x, out, timeout=30)  # a timeout needs the general path
    comm.timeout = 30  # so does a default timeout
    comm.allreduce(x, out)
    ok = (direct == [] and calls == ["allreduce"] * 2 and np.all(out == P * (P + 1) / 2)
          and np.array_equal(gathered, np.repeat(np.arange(1.0, P + 1), 8))
          and np.array_equal(payload, np.arange(8.0))
          and sent == 64 * 2 * (P - 1) // P + 64 * (P - 1) + (64 * (P - 1) if comm.rank == 0 else 0))
    comm.free()
    all_ranks_agree(world, ok, f"drivers called {calls}, sent {sent}")


@pytest.mark.mpi(min_size=2)
def test_small_reduce_scatters_of_equal_blocks_skip_the_driver(monkeypatch, world):
    from mpievo.comm import reduce_scatter

    monkeypatch.delenv("MPIEVO_COMM_TIMEOUT", raising=False)
    calls = []
    real = reduce_scatter.run
    monkeypatch.setattr(reduce_scatter, "run", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    comm = Communicator()
    x = np.arange(8.0 * P) + comm.rank
    out = np.empty(8)
    got = comm.reduce_scatter(x, out)
    ok = got is out and np.array_equal(out, P * np.arange(8.0 * comm.rank, 8.0 * comm.rank + 8) + P * (P - 1) / 2)
    ok &= comm.traffic["collective"] == 64 * (P - 1) and calls == []
    nan = x.copy()
    nan[0] = np.nan
    comm.reduce_scatter(nan, out, "max")                          # NaN order: the general path
    ok &= bool(np.isnan(out[0])) == (comm.rank == 0)
    comm.reduce_scatter(x, out, counts=[8] * P)                   # counts given: the general path
    comm.reduce_scatter(x[:-1], np.empty(8 - (comm.rank == P - 1)))  # uneven blocks: the general path
    ok &= calls == ["max", "sum", "sum"]
    comm.free()
    all_ranks_agree(world, ok, f"drivers called for {calls}")
