"""FlatParameters: a model's genes in one flat buffer, round trips bit for bit, without copies."""

from __future__ import annotations

import ctypes
import tracemalloc

import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import Small, gpt2, logits, tokens  # noqa: E402

from mpievo.comm.device import buffers as devicebuf  # noqa: E402
from mpievo.torch import CudaView, FlatParameters  # noqa: E402


def test_gpt2_round_trips_bit_for_bit_with_tied_weights_stored_once():
    model, ids = gpt2(), tokens()
    before = logits(model, ids)
    flat = FlatParameters(model)
    assert torch.equal(logits(model, ids), before)            # re-pointing kept every value
    assert flat.aliases == {"transformer.wte.weight": ["lm_head.weight"]}
    assert model.lm_head.weight is model.transformer.wte.weight
    assert flat.dim == sum(p.numel() for p in model.parameters())  # parameters() lists a tie once
    genome = flat.read()
    flat.genome()[:] = 0                                      # the genome is the weights: no copy
    assert float(model.lm_head.weight.detach().abs().max()) == 0.0
    flat.write(genome)
    assert torch.equal(logits(model, ids), before)
    other = gpt2(seed=5)
    other_flat = FlatParameters(other)
    assert not torch.equal(logits(other, ids), before)
    other_flat.write(genome)                                  # the genome carries the whole model
    assert torch.equal(logits(other, ids), before)
    np.testing.assert_array_equal(other_flat.read(), genome)
    assert flat.segment("lm_head.weight") == flat.segment("transformer.wte.weight")


def test_frozen_parameters_are_excluded_by_default_and_included_on_request():
    model = Small(freeze_first=True)
    flat = FlatParameters(model)
    assert flat.names == ["norm.weight", "norm.bias", "second.weight", "second.bias"]
    frozen = model.first.weight.data_ptr()
    assert not flat.flat.data_ptr() <= frozen < flat.flat.data_ptr() + flat.nbytes
    everything = FlatParameters(Small(freeze_first=True), include_frozen=True)
    assert everything.names[:2] == ["first.weight", "first.bias"] and everything.dim == flat.dim + 30


def test_buffers_are_not_genes_and_stay_the_models():
    model = Small()
    model.train()
    model(torch.randn(16, 4))                                 # moves the running statistics
    mean = model.norm.running_mean.clone()
    flat = FlatParameters(model)
    assert "norm.running_mean" not in flat.names and flat.dim == 4 * 6 + 6 + 6 + 6 + 6 * 2 + 2
    flat.write(np.zeros(flat.dim, np.float32))
    assert torch.equal(model.norm.running_mean, mean)


def test_bfloat16_genome_is_a_zero_copy_ml_dtypes_view_and_round_trips():
    import ml_dtypes

    model, ids = gpt2(dtype=torch.bfloat16), tokens()
    before = logits(model, ids)
    flat = FlatParameters(model)
    genome = flat.genome()
    assert genome.dtype == np.dtype(ml_dtypes.bfloat16)
    bits = flat.read().view(np.uint16).copy()
    np.testing.assert_array_equal(bits, flat.flat.view(torch.int16).numpy().view(np.uint16))
    genome[:] = 1
    assert float(model.transformer.h[0].attn.c_attn.weight.detach()[0, 0]) == 1.0
    flat.write(bits.view(ml_dtypes.bfloat16))
    assert torch.equal(logits(model, ids), before)


def test_writing_a_child_allocates_nothing_genome_sized():
    flat = FlatParameters(gpt2())
    child = np.random.default_rng(0).standard_normal(flat.dim).astype(np.float32)
    pointer = flat.flat.data_ptr()
    tracemalloc.start()
    flat.write(child)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < flat.nbytes // 8, peak
    assert flat.flat.data_ptr() == pointer
    np.testing.assert_array_equal(flat.genome(), child)
    with pytest.raises(ValueError, match=r"expected a genome of 27008 genes .* got shape \(5,\)"):
        flat.write(np.zeros(5, np.float32))


def test_mixed_dtypes_and_empty_modules_are_refused():
    model = Small()
    model.second.to(torch.float64)
    with pytest.raises(TypeError, match="expected every gene of one dtype"):
        FlatParameters(model)
    with pytest.raises(ValueError, match="expected a module with at least one trainable parameter"):
        FlatParameters(torch.nn.ReLU())
    with pytest.raises(TypeError, match="expected a torch.nn.Module, got ndarray"):
        FlatParameters(np.zeros(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_device_view_exports_the_buffer_itself(dtype):
    """The CUDA path's export (CudaView) over a CPU buffer, read as the engine's device
    code reads it (mpievo.comm.device.buffers): same address, shape, dtype; writes land in the model."""
    model = Small().to(dtype)
    flat = FlatParameters(model)
    info = devicebuf.parse_cuda_array_interface(CudaView(flat.flat).__cuda_array_interface__)
    assert info.ptr == flat.flat.data_ptr() and info.shape == (flat.dim,)
    assert info.dtype == (np.uint16 if dtype == torch.bfloat16 else np.float32)
    raw = (ctypes.c_uint8 * flat.nbytes).from_address(info.ptr)
    np.frombuffer(raw, info.dtype)[0] = np.ones(1, np.float32).astype(flat.numpy_dtype).view(info.dtype)[0]
    assert float(model.first.weight.detach().view(-1)[0]) == 1.0
