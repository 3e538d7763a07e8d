"""Multi-rank collectives on device buffers and compressed formats.

Run under ``mpiexec -n P`` (simulator or GPU); device results must equal the host
path's bit for bit, through both wires (CUDA-aware: DeviceWire, else StagedWire).
Segments are made tiny so that every ring runs pipelined over many segments.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_support import CudaArrayExport, all_agree, device_array, let_mpi_read_device_memory, to_host

from mpievo.comm.wire import cast as cast_wire, device as device_wire, host as wire
from mpievo.comm.device import support as cuda_support, buffers as devicebuf
from mpievo.comm import topk
from mpievo.kernels import host

pytestmark = [pytest.mark.mpi(min_size=2),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                         "ignore:invalid value encountered:RuntimeWarning")]

CASES = [("float32", "sum"), ("float32", "max"), ("float32", "mean"), ("float16", "sum"),
         ("bfloat16", "min"), ("int8", "prod"), ("uint64", "sum"), ("float64", "min")]


@pytest.fixture
def comm(monkeypatch):
    from mpievo.comm import Communicator

    monkeypatch.setenv("MPIEVO_SEGMENT_BYTES", "48")
    monkeypatch.setenv("MPIEVO_COPY_SEGMENT_BYTES", "48")
    c = Communicator()
    yield c
    c.free()


@pytest.fixture(params=[False, True], ids=["staged", "cuda-aware"])
def aware(request, monkeypatch):
    monkeypatch.setenv(cuda_support.ENV_CUDA_AWARE, "1" if request.param else "0")
    cuda_support.cuda_awareness.cache_clear()
    if request.param:  # device buffers go to MPI as they are
        let_mpi_read_device_memory(monkeypatch)
    yield request.param
    cuda_support.cuda_awareness.cache_clear()


def _dtype(name):
    return host.BFLOAT16 if name == "bfloat16" else np.dtype(name)


def _data(comm, name, n=101):
    rng = np.random.default_rng(100 + comm.rank)
    dtype = _dtype(name)
    if host.is_floating(dtype):
        x = (rng.standard_normal(n) * 8).astype(dtype)
        x[comm.rank % n] = np.nan  # NaN from a different rank in a different place
        return x
    return rng.integers(0, 5, n).astype(dtype)


def _bits(a):
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _bits_equal(got, want) -> bool:
    nan_got = np.isnan(got.astype(np.float64))
    nan_want = np.isnan(want.astype(np.float64))
    return bool((nan_got == nan_want).all() and (_bits(got)[~nan_want] == _bits(want)[~nan_want]).all())


@pytest.mark.parametrize("name, op", CASES)
def test_device_allreduce_equals_the_host_path(comm, aware, name, op):
    x = _data(comm, name)
    want = comm.allreduce(x.copy(), op=op, algorithm="ring")
    in_place = CudaArrayExport(x.copy().view(np.uint16) if name == "bfloat16" else x.copy())
    if name == "bfloat16":  # a CAI cannot say bfloat16: the wire is told the logical dtype
        logical = _LogicalBF16(in_place)
        comm.allreduce(logical, logical, op)
        got = to_host(in_place).view(host.BFLOAT16)
    else:
        comm.allreduce(in_place, in_place, op)
        got = to_host(in_place)
    all_agree(comm, _bits_equal(got, want), f"{name} {op}: {got[:6]} vs {want[:6]}")


class _LogicalBF16:
    """A uint16 CAI buffer holding bfloat16 bits, adapted with its logical dtype."""

    def __init__(self, export):
        self.export = export
        self.__cuda_array_interface__ = export.__cuda_array_interface__


@pytest.fixture(autouse=True)
def _bf16_adapter(monkeypatch):
    original = devicebuf.adapt

    def adapt(obj, name="buffer", *, dtype=None):
        if isinstance(obj, _LogicalBF16):
            dtype = host.BFLOAT16
        return original(obj, name, dtype=dtype)

    monkeypatch.setattr(devicebuf, "adapt", adapt)


def test_out_of_place_and_allocated_results(comm, aware):
    x = _data(comm, "float32", 57)
    want = comm.allreduce(x.copy(), op="sum", algorithm="ring")
    send = CudaArrayExport(x.copy())
    recv = CudaArrayExport(np.zeros_like(x))
    comm.allreduce(send, recv, "sum")
    fresh = comm.allreduce(CudaArrayExport(x.copy()), None, "sum")
    ok = (_bits_equal(to_host(recv), want) and _bits_equal(to_host(fresh), want)
          and _bits_equal(to_host(send), x))
    all_agree(comm, ok, "out of place / allocated result differs, or sendbuf changed")


def test_numba_device_arrays_work_directly(comm, aware):
    x = _data(comm, "float64", 33)
    want = comm.allreduce(x.copy(), op="max", algorithm="ring")
    d = device_array(x)
    out = comm.allreduce(d, d, "max")
    all_agree(comm, out is d and _bits_equal(d.copy_to_host(), want), "numba array result")


def test_nonblocking_device_allreduce(comm, aware):
    x = np.full(40, comm.rank + 1, np.int32)
    buf = CudaArrayExport(x.copy())
    request = comm.iallreduce(buf, buf, "sum")
    result = request.wait()
    total = comm.size * (comm.size + 1) // 2
    got = to_host(buf)
    all_agree(comm, result is buf and (got == total).all(), str(got[:4]))


def test_concurrent_nonblocking_device_collectives(comm, aware):
    """Two requests in flight share the communicator's pools but never their memory."""
    a = CudaArrayExport(np.full(300, comm.rank + 1, np.float32))
    b = CudaArrayExport(np.full(200, 2 * (comm.rank + 1), np.int64))
    first = comm.iallreduce(a, a, "sum")
    second = comm.iallreduce(b, b, "sum")
    while not (first.test() and second.test()):
        pass
    total = comm.size * (comm.size + 1) // 2
    got_a, got_b = to_host(a), to_host(b)
    all_agree(comm, (got_a == total).all() and (got_b == 2 * total).all(), f"{got_a[:3]} {got_b[:3]}")


def test_device_reduce_scatter_allgather_and_broadcast(comm, aware):
    p, r = comm.size, comm.rank
    counts = [3 + 2 * i for i in range(p)]  # uneven
    x = np.arange(sum(counts), dtype=np.float32) * (r + 1)
    block = comm.reduce_scatter(CudaArrayExport(x), None, "sum", counts=counts)
    start = sum(counts[:r])
    want = np.arange(start, start + counts[r], dtype=np.float32) * p * (p + 1) / 2
    ok = np.array_equal(to_host(block), want)

    mine = np.full(counts[r], r, np.int16)
    gathered = comm.allgather(CudaArrayExport(mine), None, counts=counts)
    ok &= np.array_equal(to_host(gathered), np.repeat(np.arange(p, dtype=np.int16), counts))
    learned = comm.allgather(CudaArrayExport(mine))  # counts learned from the ranks
    ok &= np.array_equal(to_host(learned), to_host(gathered))

    root = p - 1
    payload = CudaArrayExport(np.arange(23, dtype=np.float64) * (7 if r == root else 0))
    comm.broadcast(payload, root)
    ok &= np.array_equal(to_host(payload), np.arange(23, dtype=np.float64) * 7)
    all_agree(comm, ok, f"rank {r}")


@pytest.mark.parametrize("how", ["environment", "option"])
def test_staged_wire_stays_off_the_mpi_path_for_device_memory(monkeypatch, how):
    """Not CUDA-aware: MPI must only ever see host (pinned) buffers. The communicator's
    ``cuda_aware`` option wins over the environment."""
    from mpievo.comm import Communicator

    monkeypatch.setenv(cuda_support.ENV_CUDA_AWARE, "0" if how == "environment" else "1")
    cuda_support.cuda_awareness.cache_clear()
    seen = []
    original = device_wire.StagedWire.encode

    def encode(self, region):
        buf = original(self, region)
        seen.append(isinstance(buf, np.ndarray) and not devicebuf.is_device_array(buf))
        return buf

    monkeypatch.setattr(device_wire.StagedWire, "encode", encode)
    comm = Communicator(cuda_aware=None if how == "environment" else False, segment_bytes=48)
    x = CudaArrayExport(np.ones(200, np.float32))
    comm.allreduce(x, x, "sum")
    cuda_support.cuda_awareness.cache_clear()
    all_agree(comm, seen and all(seen) and (to_host(x) == comm.size).all(), f"{len(seen)} sends")
    comm.free()


def test_device_errors_are_raised_on_every_rank(comm, aware):
    bad = CudaArrayExport(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="sendbuf: expected a C-contiguous device array"):
        comm.allreduce(bad, bad, "sum")
    with pytest.raises(ValueError, match="algorithm for device buffers"):
        comm.allreduce(CudaArrayExport(np.zeros(4, np.float32)), None, "sum", algorithm="native")
    with pytest.raises(ValueError, match="floating-point"):
        comm.allreduce(CudaArrayExport(np.zeros(4, np.int32)), None, "mean")
    with pytest.raises(ValueError, match="expected recvbuf with 4 elements"):
        comm.allreduce(CudaArrayExport(np.zeros(4, np.float32)), CudaArrayExport(np.zeros(5, np.float32)))
    comm.barrier()


# ------------------------------------------------------------------ compression
@pytest.mark.parametrize("fmt", wire.WIRE_FORMATS)
@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_compressed_allreduce_is_identical_everywhere_and_within_the_rounding_bound(comm, fmt, op):
    rng = np.random.default_rng(comm.rank)
    x = rng.standard_normal(301).astype(np.float32)
    out = comm.allreduce(x, None, op, compression=fmt)
    wire_dtype = cast_wire.compression_wire(fmt, np.float32).wire_dtype
    everywhere = comm.allgather_object(out.tobytes())
    exact = comm.allreduce(x.astype(np.float64), op=op, algorithm="ring")
    magnitude = comm.allreduce(np.abs(x).astype(np.float64), op="sum", algorithm="ring")
    if op == "mean":
        magnitude /= comm.size
    eps = 2.0 ** -11 if fmt == "fp16" else 2.0 ** -8  # unit roundoff of the wire format
    bound = comm.size * eps * magnitude + 1e-30
    ok = (all(e == everywhere[0] for e in everywhere)
          and np.array_equal(out, out.astype(wire_dtype).astype(np.float32))
          and bool((np.abs(out - exact) <= bound).all()))
    all_agree(comm, ok, f"max error {np.max(np.abs(out - exact))}")


def test_compressed_allreduce_is_exact_on_representable_sums(comm):
    x = np.arange(64, dtype=np.float32) + comm.rank
    want = comm.allreduce(x.copy(), op="sum", algorithm="ring")
    got = x.copy()
    request = comm.iallreduce(got, got, "sum", compression="bf16")
    all_agree(comm, request.wait() is got and np.array_equal(got, want), str(got[:4]))


def test_compression_leaves_other_dtypes_alone_and_refuses_device_buffers(comm):
    x = np.arange(7, dtype=np.float64) / 3 + comm.rank
    plain = comm.allreduce(x, None, "sum", algorithm="ring")
    compressed = comm.allreduce(x, None, "sum", algorithm="ring", compression="fp16")
    all_agree(comm, np.array_equal(compressed, plain), "float64 data changed by compression")
    with pytest.raises(ValueError, match="expected compression=None for device buffers, got 'fp16'"):
        comm.allreduce(CudaArrayExport(np.zeros(3, np.float32)), None, "sum", compression="fp16")
    comm.barrier()


def _dense_sent(n, idx, values):
    dense = np.zeros(n, values.dtype)
    dense[idx] = values
    return dense


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_topk_allreduce_sums_what_every_rank_sent(comm, op):
    n = 97
    rng = np.random.default_rng(7 + comm.rank)
    feedback, mirror = topk.ErrorFeedback(), topk.ErrorFeedback()
    ok = True
    for step in range(3):
        x = rng.standard_normal(n).astype(np.float32)
        idx, values = topk.topk_compress(x, 10, mirror, "w")  # what this rank will send
        sent = comm.allgather_object((idx, values))
        want = np.zeros(n, np.float32)
        for r_idx, r_values in sent:  # rank order, like topk_allreduce
            want += _dense_sent(n, r_idx, r_values)
        if op == "mean":
            host.divide_into(want, comm.size)
        got = topk.topk_allreduce(comm, x, 10, feedback=feedback, key="w", op=op)
        ok &= np.array_equal(got, want) and np.array_equal(feedback.get("w"), mirror.get("w"))
    all_agree(comm, ok, "top-k result or residual differs")


def test_topk_allreduce_with_ratio_and_out(comm):
    x = np.zeros((4, 5), np.float64)
    x[comm.rank % 4, comm.rank % 5] = 1.0 + comm.rank
    out = np.full((4, 5), -1.0)
    got = topk.topk_allreduce(comm, x, ratio=0.05, out=out)  # k = 1 per rank
    want = comm.allreduce(x.copy(), op="sum", algorithm="ring")
    all_agree(comm, got is out and np.array_equal(out, want), str(out))


def test_topk_allreduce_errors(comm):
    with pytest.raises(ValueError, match="same array size on every rank"):
        topk.topk_allreduce(comm, np.ones(10 + comm.rank, np.float32), k=2)
    with pytest.raises(ValueError, match="key naming the buffer"):
        topk.topk_allreduce(comm, np.ones(4), k=1, feedback=topk.ErrorFeedback())
    with pytest.raises(TypeError, match="floating-point"):
        topk.topk_allreduce(comm, np.ones(4, np.int32), k=1)
    comm.barrier()
