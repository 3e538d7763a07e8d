"""Sources of half-precision models: kept in their dtype, read lazily from (sharded)
safetensors files, bad files and missing shards named, too large a merge refused, and
delta genomes materialised over half bases as the reference formula says."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("torch.nn")
pytest.importorskip("transformers")
import torch  # noqa: E402
from torch_models import gpt2  # noqa: E402

from mpievo.torch import casting, hf  # noqa: E402
from mpievo.torch.flat import FlatParameters  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def half_sources(tmp_path_factory):
    """Two bf16 GPT-2 directories: one file, and sharded (index + 3 shards)."""
    root = tmp_path_factory.mktemp("half")
    single, sharded = root / "single", root / "sharded"
    gpt2(1, dtype=torch.bfloat16).save_pretrained(single)
    gpt2(2, dtype=torch.bfloat16).save_pretrained(sharded, max_shard_size="20KB")
    assert (sharded / hf.INDEX_FILE).is_file() and len(list(sharded.glob("*.safetensors"))) >= 2
    return single, sharded


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_sources_stay_in_their_dtype_and_equal_the_eagerly_loaded_models(half_sources, dtype):
    flat = FlatParameters(gpt2(9, dtype=dtype))
    bases = hf.hf_bases(half_sources, flat)
    assert bases.dtype == flat.numpy_dtype and bases.dtype.itemsize == 2
    assert bases.nbytes == 2 * flat.dim * 2                   # 2 bytes a gene, not float32's 4
    for row, path in zip(bases.array, half_sources):          # lazy, tensor by tensor == the loaded model
        eager = FlatParameters(hf.load_model(path, dtype=dtype)).read()
        assert row.tobytes() == eager.tobytes(), path


def test_a_directory_whose_names_differ_is_loaded_as_a_model(half_sources, tmp_path):
    flat = FlatParameters(gpt2(9, dtype=torch.bfloat16))
    row = np.zeros(flat.dim, BF16)
    renamed = tmp_path / "renamed"
    model = gpt2(1, dtype=torch.bfloat16)
    model.save_pretrained(renamed)
    from safetensors.torch import load_file, save_file

    tensors = load_file(renamed / "model.safetensors")
    save_file({"x." + k: v for k, v in tensors.items()}, renamed / "model.safetensors")
    assert not hf.fill_from_files(renamed, flat, row) and not row.view(np.uint16).any()   # nothing written
    assert hf.fill_from_files(half_sources[0], flat, row) and row.view(np.uint16).any()


def test_a_missing_shard_is_named_from_the_index(half_sources, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(half_sources[1], broken)
    shard = sorted(set(json.loads((broken / hf.INDEX_FILE).read_text())["weight_map"].values()))[1]
    (broken / shard).unlink()
    with pytest.raises(FileNotFoundError, match=rf"expected every shard named in .*{hf.INDEX_FILE}, got "
                                                rf".*{shard} missing"):
        hf.hf_bases([half_sources[0], broken], FlatParameters(gpt2(9, dtype=torch.bfloat16)))


def test_a_truncated_file_is_named_before_anything_loads(half_sources, tmp_path):
    import shutil

    broken = tmp_path / "truncated"
    shutil.copytree(half_sources[0], broken)
    file = broken / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-1000])
    with pytest.raises(ValueError, match=r"expected a readable safetensors file, got .*truncated/model.safetensors"):
        hf.hf_bases([broken], FlatParameters(gpt2(9, dtype=torch.bfloat16)))


def test_a_merge_too_large_is_refused_before_loading_naming_the_sizes(half_sources, monkeypatch):
    flat = FlatParameters(gpt2(9, dtype=torch.bfloat16))
    loaded = []
    monkeypatch.setattr(hf, "fill_from_files", lambda *a: loaded.append(a) or True)
    need = hf.memory_estimate(flat.dim, 2, archive_rows=6, ranks_per_node=2, bases_itemsize=2, gene_itemsize=2,
                              row_itemsize=2, model_buffers=2)
    # sources in bf16; per rank the rows, the row box (2 bf16 bounds, the GA's 2 float32 ones) and the
    # model's two buffers (pipelined evaluation); the best genome once (its row, decoded, copied out)
    assert need == flat.dim * (2 * 2 + 2 * (6 * 2 + 2 * 2 + 2 * 4 + 2 * 2) + 3 * 2)
    with pytest.raises(MemoryError, match=rf"got an estimate of {need / 2**30:.2f} GiB \(2 sources of "
                                          r"27,008 genes in bfloat16, and per rank of 2: 6 archive"):
        hf.hf_bases(half_sources, flat, archive_rows=6, ranks_per_node=2, available=need - 1)
    bases = hf.hf_bases(half_sources, flat, archive_rows=6, ranks_per_node=2, available=need)
    assert not loaded and bases.array is not None and len(loaded) == 2     # loaded on first use only


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)])
@pytest.mark.parametrize("uniform", [True, False])
def test_delta_genomes_over_half_bases_are_the_reference_formula(dtype, uniform):
    from mpievo.evo.genomes import BaseModels, DeltaProblem
    from mpievo.evo.problems import Problem

    rng = np.random.default_rng(3)
    dim = 40_000
    bases = (rng.standard_normal((2, dim)) * 3).astype(dtype)
    lower = np.full(dim, -4.0) if uniform else -4.0 - rng.random(dim)
    inner = Problem(lambda x: x[:, 0].astype(np.float64), dim, lower, -lower, batched=True,
                           bases=BaseModels(bases))
    problem = DeltaProblem(inner, inner.bases, dtype=dtype, budget=1 << 30)
    rows = (rng.standard_normal((3, dim)) * 2).astype(dtype)
    rows[0, :6] = np.array([np.nan, np.inf, -np.inf, -0.0, 1e4, -1e4]).astype(dtype)
    out = np.empty((3, dim), dtype)
    problem.materialize_into(rows, out)
    low, high = problem._box
    expected = np.empty_like(out)         # the formula as numpy computes it (the code before the kernel)
    np.add(bases[0].astype(np.float32), rows, out=expected, casting="unsafe")
    np.clip(expected, low, high, out=expected)
    assert out.tobytes() == expected.tobytes()


def test_the_run_check_counts_the_bases_and_best_genome_once_per_node_and_each_ranks_buffers(tmp_path,
                                                                                            monkeypatch):
    from mpievo.comm.protocol import SelfComm
    from mpievo.config import validate
    from mpievo.parallel import memory

    dim = 200_000
    np.save(tmp_path / "bases.npy", np.zeros((3, dim), np.float32))
    job = validate({"problem": {"name": "sphere", "dim": dim, "bases": str(tmp_path / "bases.npy")},
                    "run": {"islands": 2}, "engine": {"genome": "delta", "capacity": 4, "batch_size": 2}}, 1)
    host, _ = memory.rank_estimate(job, 1)
    # two islands' rows (no draw rows) and row boxes, a block of a generation 0 (4 genomes) to evaluate
    assert host == 2 * 6 * dim * 4 + 2 * 2 * dim * 4 + 4 * dim * 4
    need = host + 3 * dim * 4 + 3 * dim * 4                # and the bases and the best genome, once
    monkeypatch.setattr(memory, "usable_host_bytes", lambda: (need - 1, "a test"))
    refusal = memory.memory_problem(SelfComm(), job)
    assert refusal is not None and f"got an estimate of {need / 2**30:.3g} GiB of host (3 base models of " \
        f"{3 * dim * 4 / 2**30:.3g} GiB and the best genome included)" in refusal, refusal
    monkeypatch.setattr(memory, "usable_host_bytes", lambda: (need, "a test"))
    assert memory.memory_problem(SelfComm(), job) is None


def _special_values():
    """Every bfloat16 and float16 pattern, float32 patterns around every bfloat16 (ties,
    NaN payloads, subnormals, infinities) and float64 values a float32 rounding ties."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    f32 = (high[:, None] | np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)).reshape(-1).view(np.float32)
    with np.errstate(all="ignore"):
        f64 = np.concatenate([f32.astype(np.float64), f32.astype(np.float64) * (1 + 2.0 ** -30)])
    return {np.dtype(np.float32): f32, np.dtype(np.float64): f64, BF16: np.arange(1 << 16, dtype=np.uint16).view(BF16),
            np.dtype(np.float16): np.arange(1 << 16, dtype=np.uint16).view(np.float16)}


@pytest.mark.parametrize("target", [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16],
                         ids=lambda d: d.name)
def test_sources_are_cast_into_their_rows_as_astype_casts_them_bit_for_bit(target):
    for values in _special_values().values():
        with np.errstate(all="ignore"):
            want = values.astype(target)
        got = np.empty(values.shape, target)
        with np.errstate(all="ignore"):     # overflows to inf, NaN: as astype
            casting.cast_into(values, got)
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[target.itemsize]
        assert np.array_equal(got.view(bits), want.view(bits)), (values.dtype, target)


def test_a_tensor_is_read_at_its_offset_through_the_cast_buffer(tmp_path, monkeypatch):
    values = _special_values()[np.dtype(np.float32)]
    path = tmp_path / "data"
    path.write_bytes(b"header" + values.tobytes())
    monkeypatch.setattr(casting, "_CAST_CHUNK", 4096 + 4)             # chunks that do not divide the tensor
    out = np.empty(values.size, BF16)
    with open(path, "rb", buffering=0) as handle:
        casting.read_cast(handle, 6, values.dtype, out, path)
        with pytest.raises(ValueError, match="expected 8 more bytes in .*data, got 0"):
            casting.read_cast(handle, path.stat().st_size, values.dtype, out[:2], path)
    with np.errstate(all="ignore"):
        assert np.array_equal(out.view(np.uint16), values.astype(BF16).view(np.uint16))
