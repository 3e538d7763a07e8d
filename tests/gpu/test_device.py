"""Device-array detection and adaptation, CUDA-awareness, and the device wires (one rank)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_support import CudaArrayExport, DLPackExport, device_array, to_host

from mpievo.comm.device import support as cuda_support, buffers as devicebuf
from mpievo.comm.wire import device as device_wire
from mpievo.comm import staging
from mpievo.kernels import host
from mpievo.kernels.cuda.reduce import simulator_enabled


# ------------------------------------------------------------------ detection
def test_detection_of_device_arrays():
    from numba import cuda

    host_array = np.zeros(4, np.float32)
    assert devicebuf.is_device_array(CudaArrayExport(host_array))
    assert devicebuf.is_device_array(CudaArrayExport(host_array, version=2))
    assert devicebuf.is_device_array(cuda.to_device(host_array))
    assert devicebuf.is_device_array(DLPackExport(host_array, device_type=2))
    assert devicebuf.is_device_array(DLPackExport(host_array, device_type=13))
    assert not devicebuf.is_device_array(DLPackExport(host_array, device_type=3))  # pinned host
    assert not devicebuf.is_device_array(DLPackExport(host_array, device_type=1))
    assert not devicebuf.is_device_array(host_array)
    assert not devicebuf.is_device_array([1, 2, 3])


def test_adapted_view_shares_memory_without_copy():
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    export = CudaArrayExport(want.copy())
    view = devicebuf.as_device_array(export)
    assert tuple(view.shape) == (3, 4)
    assert devicebuf.device_address(view) == export.ptr
    view[1, 2] = want[1, 2] = -5.0  # written through the view, seen in the exporter's memory
    np.testing.assert_array_equal(to_host(export), want)


def test_cai_version_2_and_readonly_data():
    backing = np.arange(5, dtype=np.int16)
    backing.flags.writeable = False
    info = devicebuf.parse_cuda_array_interface(CudaArrayExport(backing, version=2).__cuda_array_interface__)
    assert info.readonly and info.stream is None and info.dtype == np.int16 and info.shape == (5,)


def test_non_contiguous_device_arrays_get_a_clear_error():
    backing = np.zeros((4, 6), np.float32)
    with pytest.raises(ValueError, match=r"expected a C-contiguous device array, got strides \(24, 8\)"):
        devicebuf.as_device_array(CudaArrayExport(backing[:, ::2]))
    with pytest.raises(ValueError, match="C-contiguous"):
        devicebuf.as_device_array(CudaArrayExport(np.zeros((3, 2), np.float64).T))
    with pytest.raises(ValueError, match="sendbuf: expected a C-contiguous"):
        devicebuf.adapt(CudaArrayExport(backing[:, ::2]), "sendbuf")


def test_explicit_contiguous_strides_and_unit_dimensions_are_accepted():
    backing = np.zeros((1, 5), np.float32)
    view = devicebuf.as_device_array(CudaArrayExport(backing, strides=(999, 4)))
    assert tuple(view.shape) == (1, 5)
    devicebuf.check_c_contiguous((0, 3), (4, 99), 4)  # empty: nothing to lay out


@pytest.mark.parametrize("cai, error, match", [
    ({"version": 1, "shape": (1,), "typestr": "<f4", "data": (0, False)}, ValueError, "version"),
    ({"version": 3, "shape": (1,), "typestr": "<f4"}, ValueError, "expected keys"),
    ({"version": 3, "shape": (1,), "typestr": "<f4", "data": (8, False), "mask": object()},
     ValueError, "no mask"),
    ({"version": 3, "shape": (1,), "typestr": "<f4", "data": (8, False), "stream": 0},
     ValueError, "other than 0"),
    ({"version": 3, "shape": (1,), "typestr": "<f4", "data": (8, False), "stream": "x"},
     TypeError, "integer stream"),
    ([1, 2], TypeError, "dict"),
])
def test_invalid_cuda_array_interfaces(cai, error, match):
    with pytest.raises(error, match=match):
        devicebuf.parse_cuda_array_interface(cai)


def test_not_a_device_array():
    with pytest.raises(TypeError, match="expected a device array"):
        devicebuf.as_device_array(object())


@pytest.mark.parametrize("stream, expected", [(None, None), (1, 1), (2, 2), (0x5EED, 0x5EED)])
def test_the_producer_stream_is_synchronised_before_use(monkeypatch, stream, expected):
    calls = []
    monkeypatch.setattr(devicebuf, "synchronize_stream", calls.append)
    devicebuf.as_device_array(CudaArrayExport(np.zeros(3, np.float32), stream=stream))
    assert calls == [expected]
    calls.clear()
    devicebuf.as_device_array(CudaArrayExport(np.zeros(3, np.float32), stream=stream), sync=False)
    assert calls == []


LATE_FILL = r"""
extern "C" __global__ void late_fill(float* x, int n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 7.0f;
}
"""


def test_a_producers_stream_is_waited_for_on_a_gpu():
    """CuPy names its current stream in CAI v3; a kernel still running there must have
    finished before the adapted buffer is read on another stream."""
    if simulator_enabled():
        pytest.skip("the simulator runs every copy and kernel synchronously: nothing to wait for")
    cupy = pytest.importorskip("cupy", reason="a real producer stream comes from CuPy")
    late_fill = cupy.RawKernel(LATE_FILL, "late_fill")
    with cupy.cuda.Stream(non_blocking=True) as stream:
        x = cupy.zeros(256, cupy.float32)
        stream.synchronize()
        late_fill((1,), (256,), (x, cupy.int32(256), cupy.int64(200_000_000)))  # ~0.1 s of spinning
        assert x.__cuda_array_interface__["stream"] == stream.ptr
        buf = devicebuf.adapt(x)
    np.testing.assert_array_equal(buf.flat.copy_to_host(), np.full(256, 7, np.float32))


def test_numba_arrays_synchronise_their_own_stream(monkeypatch):
    from numba import cuda

    calls = []
    monkeypatch.setattr(devicebuf, "synchronize_stream", calls.append)
    arr = cuda.to_device(np.zeros(3))
    assert devicebuf.as_device_array(arr) is arr
    stream = cuda.stream()
    devicebuf.as_device_array(arr.bind(stream))
    assert calls == [None, stream]


def test_dlpack_producer_is_viewed_and_asked_for_the_legacy_stream(monkeypatch):
    calls = []
    monkeypatch.setattr(devicebuf, "synchronize_stream", calls.append)
    fake = DLPackExport(np.arange(6, dtype=np.float64))
    view = devicebuf.as_device_array(fake)
    assert devicebuf.device_address(view) == fake.ptr
    np.testing.assert_array_equal(view.copy_to_host(), np.arange(6, dtype=np.float64))
    assert fake.streams == [devicebuf.LEGACY_DEFAULT_STREAM] and calls == [devicebuf.LEGACY_DEFAULT_STREAM]


def test_dlpack_bfloat16_keeps_its_logical_dtype(monkeypatch):
    """numpy cannot export bfloat16 through DLPack: stand in for cuda.core's view of a
    bfloat16 tensor (as torch would export one)."""
    backing = np.array([1.5, -2.0, 3.25], host.BFLOAT16)
    source = CudaArrayExport(backing.view(np.uint16))  # the tensor's memory

    class BFloat16View:
        ptr, shape, strides, dtype, readonly = source.ptr, (3,), None, backing.dtype, False

        @classmethod
        def from_dlpack(cls, obj, stream_ptr=None):
            return cls()

    monkeypatch.setattr(devicebuf, "_strided_memory_view", lambda: BFloat16View)
    buf = devicebuf.adapt(DLPackExport(np.zeros(3, np.uint16)))
    assert buf.dtype == host.BFLOAT16 and buf.flat.dtype == np.uint16
    np.testing.assert_array_equal(buf.flat.copy_to_host(), backing.view(np.uint16))


def test_dlpack_non_contiguous_is_refused():
    with pytest.raises(ValueError, match="expected a C-contiguous device array, got strides"):
        devicebuf.as_device_array(DLPackExport(np.zeros((3, 4))[:, ::2]))


def test_adapt_flattens_and_checks_the_dtype():
    buf = devicebuf.adapt(CudaArrayExport(np.zeros((2, 3), np.int32)), "sendbuf")
    assert buf.size == 6 and buf.dtype == np.int32 and len(buf.flat.shape) == 1
    with pytest.raises(TypeError, match="sendbuf with a dtype among"):
        devicebuf.adapt(CudaArrayExport(np.zeros(2, np.complex64)), "sendbuf")


# ------------------------------------------------------------- CUDA-awareness
@pytest.fixture
def fresh_awareness(monkeypatch):
    monkeypatch.delenv(cuda_support.ENV_CUDA_AWARE, raising=False)
    cuda_support.cuda_awareness.cache_clear()
    yield monkeypatch
    cuda_support.cuda_awareness.cache_clear()


def test_the_pypi_mpi_is_not_cuda_aware_and_says_where_it_looked(fresh_awareness):
    value, where = cuda_support.query_mpix_cuda_support()
    assert value == 0 and where  # the Open MPI / MPICH wheels export the query and answer 0
    awareness = cuda_support.cuda_awareness()
    assert awareness == (False, "MPIX_Query_cuda_support", f"MPIX_Query_cuda_support() = 0 in {where}")
    assert cuda_support.cuda_aware() is False


@pytest.mark.parametrize("value, aware", [("1", True), ("0", False), (" true ", True), ("off", False)])
def test_environment_overrides_the_query(fresh_awareness, value, aware):
    fresh_awareness.setenv(cuda_support.ENV_CUDA_AWARE, value)
    assert cuda_support.cuda_awareness() == (aware, "environment", f"{cuda_support.ENV_CUDA_AWARE}={value}")


def test_bad_environment_value(fresh_awareness):
    fresh_awareness.setenv(cuda_support.ENV_CUDA_AWARE, "maybe")
    with pytest.raises(ValueError, match="expected MPIEVO_CUDA_AWARE to be 0 or 1, got 'maybe'"):
        cuda_support.cuda_awareness()


def test_awareness_is_cached(fresh_awareness):
    calls = []
    fresh_awareness.setattr(cuda_support, "query_mpix_cuda_support", lambda: calls.append(1) or (1, "lib"))
    assert cuda_support.cuda_aware() and cuda_support.cuda_aware()
    assert calls == [1]


def test_missing_query_means_not_aware(fresh_awareness):
    fresh_awareness.setattr(cuda_support, "query_mpix_cuda_support", lambda: (None, "not found"))
    awareness = cuda_support.cuda_awareness()
    assert not awareness.aware and awareness.source == "default" and "MPIEVO_CUDA_AWARE=1" in awareness.detail


def test_make_wire_follows_awareness():
    res = staging.DeviceResources()
    assert isinstance(device_wire.make_wire(np.float32, res, aware=True), device_wire.DeviceWire)
    assert isinstance(device_wire.make_wire(np.float32, res, aware=False), device_wire.StagedWire)


# ------------------------------------------------------------------- wires
def test_staged_wire_sends_host_copies_and_reduces_on_thedevice_array():
    res = staging.DeviceResources()
    wire = device_wire.StagedWire(np.float32, res)
    region = device_array(np.arange(4, dtype=np.float32))
    sent = wire.encode(region)
    assert isinstance(sent, np.ndarray) and not devicebuf.is_device_array(sent)
    np.testing.assert_array_equal(sent, [0, 1, 2, 3])
    recv = wire.scratch(4)
    assert isinstance(recv, np.ndarray)
    recv[:] = [10, 20, 30, 40]  # what MPI would write
    dst = device_array(np.ones(4, np.float32))
    wire.reduce(dst, recv, "sum", left=region)
    np.testing.assert_array_equal(dst.copy_to_host(), [10, 21, 32, 43])
    wire.release(sent)
    wire.finish()
    assert res.pinned.free_slots == res.pinned.allocated == 2


def test_staged_wire_reuses_slots_after_release():
    res = staging.DeviceResources()
    wire = device_wire.StagedWire(np.float64, res)
    region = device_array(np.zeros(8))
    for _ in range(5):
        wire.release(wire.encode(region))
    assert res.pinned.allocated == 1


def test_staged_wire_forwards_a_stored_segment_from_its_pinned_slot():
    res = staging.DeviceResources()
    wire = device_wire.StagedWire(np.int32, res)
    dst = device_array(np.zeros(6, np.int32))
    incoming = wire.recv_into(dst[2:5])
    incoming[:] = [7, 8, 9]
    wire.store(dst[2:5], incoming)
    np.testing.assert_array_equal(dst.copy_to_host(), [0, 0, 7, 8, 9, 0])
    other = wire.encode(dst[0:3])  # another region: copied from the device
    assert other is not incoming and wire.device_to_host_copies == 1
    np.testing.assert_array_equal(other, [0, 0, 7])
    assert wire.encode(dst[2:5]) is incoming  # the stored one: no device-to-host copy
    assert wire.forwarded == 1 and wire.device_to_host_copies == 1
    wire.release(incoming)
    wire.release(other)
    wire.finish()


def test_staged_wire_does_not_forward_a_segment_changed_since_it_was_stored():
    res = staging.DeviceResources()
    wire = device_wire.StagedWire(np.float32, res)
    dst = device_array(np.zeros(3, np.float32))
    buf = wire.recv_into(dst)
    buf[:] = 1
    wire.store(dst, buf)
    wire.divide(dst, 2)  # the device copy changed: the pinned slot is stale
    sent = wire.encode(dst)
    np.testing.assert_array_equal(sent, [0.5, 0.5, 0.5])
    assert wire.forwarded == 0
    wire.finish()


def test_staged_wire_waits_for_the_copy_out_of_a_slot_before_reusing_it():
    events = []

    class RecordingResources(staging.DeviceResources):
        def record(self):
            event = super().record()
            waited = []
            event.synchronize = lambda: waited.append(True)
            events.append(waited)
            return event

    res = RecordingResources()
    wire = device_wire.StagedWire(np.float32, res)
    dst = device_array(np.zeros(4, np.float32))
    buf = wire.scratch(4)
    buf[:] = 1
    wire.reduce(dst, buf, "sum")
    assert events == [[]]  # recorded, not yet waited for
    wire.scratch(4)  # the same slot again: must wait for the host-to-device copy
    assert events == [[True]]
    wire.finish()


def test_staged_wire_rejects_foreign_buffers():
    wire = device_wire.StagedWire(np.float32, staging.DeviceResources())
    with pytest.raises(ValueError, match="handed out by this wire"):
        wire.release(np.zeros(3, np.float32))


def test_device_wire_keeps_data_on_the_device_and_alternates_scratch():
    res = staging.DeviceResources()
    wire = device_wire.DeviceWire(np.float32, res)
    region = device_array(np.arange(3, dtype=np.float32))
    assert wire.encode(region) is region
    first, second = wire.scratch(3), wire.scratch(3)
    assert devicebuf.is_device_array(first) and devicebuf.device_address(first) != devicebuf.device_address(second)
    first[:] = np.array([1, 1, 1], np.float32)
    wire.reduce(region, first, "max", left=region)
    third = wire.scratch(3)  # the first slot again, after its kernel
    assert devicebuf.device_address(third) == devicebuf.device_address(first)
    np.testing.assert_array_equal(region.copy_to_host(), [1, 1, 2])
    assert wire.recv_into(region) is region
    wire.divide(region, 2)
    wire.finish()
    np.testing.assert_array_equal(region.copy_to_host(), [0.5, 0.5, 1])


def test_concurrent_wires_never_share_scratch_memory():
    res = staging.DeviceResources()
    first, second = device_wire.DeviceWire(np.float32, res), device_wire.DeviceWire(np.float32, res)
    mine = {devicebuf.device_address(first.scratch(8)) for _ in range(2)}
    theirs = {devicebuf.device_address(second.scratch(8)) for _ in range(2)}
    assert len(mine) == len(theirs) == 2 and not mine & theirs
    staged = device_wire.StagedWire(np.float32, res)
    buf = staged.scratch(8)
    buf[:] = 1
    staged.reduce(device_array(np.zeros(8, np.float32)), buf, "sum")
    assert devicebuf.device_address(staged.staged_slot.raw) not in mine | theirs
    for wire in (first, second, staged):
        wire.finish()
    assert res.device.free_slots == res.device.allocated == 5


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_bfloat16_reduction_through_both_wires():
    bf16 = host.BFLOAT16
    a = np.array([1.5, -2.0, np.nan, 3.0], bf16)
    b = np.array([0.25, 4.0, 1.0, np.nan], bf16)
    want = np.maximum(a, b)
    for wire_type in (device_wire.DeviceWire, device_wire.StagedWire):
        wire = wire_type(bf16, staging.DeviceResources())
        dst = device_array(a.view(np.uint16))
        buf = wire.scratch(4)
        buf[:] = b.view(np.uint16)
        wire.reduce(dst, buf, "max")
        wire.finish()
        got = dst.copy_to_host().view(bf16)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
