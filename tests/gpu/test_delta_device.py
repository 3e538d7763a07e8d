"""Delta genomes on device islands: rows on the GPU, genomes materialised there.

Runs under the simulator (CI) and on a real GPU. Sizes are tiny for the simulator.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_support import elementwise_fitness

from mpievo.evo import EngineConfig, Island, Problem, make_problem
from mpievo.evo import device
from mpievo.evo import operators as host_ops
from mpievo.evo.genomes import BaseModels, encoding_of
from mpievo.kernels.cuda import delta as cuda_delta
from mpievo.kernels.cuda.reduce import simulator_enabled

CONFIG = dict(capacity=6, batch_size=5, population=6, stagnation_patience=0, genome="delta")
DIM = 9


def _island(problem, *, where="cuda", index=0, seed=3, **settings):
    return Island(index, problem, EngineConfig(device=where, **{**CONFIG, **settings}), seed=seed)


def _base(dtype=np.float64, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.8, 0.8, (2, DIM)).astype(dtype)


def _problem(where="cuda", base=None, **kw):
    # a box of one value per gene: the clip reads whole bounds
    lower, upper = np.linspace(-1.0, -0.5, DIM), np.linspace(0.5, 1.0, DIM)
    return Problem(elementwise_fitness, DIM, lower, upper, device=where == "cuda",
                   bases=_base() if base is None else base, **kw)


def _run(island, generations) -> tuple:
    island.run(generations)
    return (device.to_host(island.archive.genomes), island.archive.fitness.copy(), island.archive.ids.copy())


def _same_run(a, b) -> None:
    (g_a, f_a, i_a), (g_b, f_b, i_b) = a, b
    assert np.array_equal(i_a, i_b)
    assert g_a.tobytes() == g_b.tobytes() and f_a.tobytes() == f_b.tobytes()


def _nan_with_payload(dtype):
    bits = {4: np.uint32(0x7FC01234), 8: np.uint64(0x7FF8000012340000)}[np.dtype(dtype).itemsize]
    return np.array(bits).view(dtype)[()]


@pytest.mark.parametrize("base_dtype", [np.float64, np.float32])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_device_materialises_the_hosts_bits(base_dtype, dtype):
    # a NaN with a payload of its own too: a GPU float32 add gives its canonical NaN,
    # the host's add the NaN operand's bits (bases are finite: the box is checked)
    problem = encoding_of(_island(_problem(base=_base(base_dtype)), dtype=dtype).problem)
    rows = np.random.default_rng(1).uniform(-2.5, 2.5, (7, DIM)).astype(dtype)
    rows[0, :3] = [np.nan, np.inf, -np.inf]
    rows[1, 5] = _nan_with_payload(dtype)
    expected = np.empty((7, DIM), dtype)
    problem.materialize_into(rows, expected)
    base, lower, upper, _ = problem._device_arrays()
    out = device.to_device(np.zeros((7, DIM), dtype))
    cuda_delta.materialize(base, device.to_device(rows), lower, upper, out)
    assert device.to_host(out).tobytes() == expected.tobytes()
    assert np.isnan(expected[0, 0]) and expected[0, 1] == upper.copy_to_host()[1]


def test_a_uniform_box_goes_to_the_device_as_one_value_per_bound():
    island = _island(Problem(elementwise_fitness, DIM, -1.0, 1.0, device=True, bases=_base()))
    island.run(2)
    _, lower, upper, _ = encoding_of(island.problem)._device_arrays()
    assert lower.shape == upper.shape == (1,)
    genome, value = island.best()
    row = island.archive.row(island.archive.best_index())
    assert np.array_equal(genome, np.clip(_base()[0] + row, -1.0, 1.0).astype(np.float32))
    assert value == pytest.approx(float(elementwise_fitness(genome[None])[0]))


def test_delta_over_a_zero_base_is_the_dense_device_run_bit_for_bit():
    # 1-row evaluation blocks against the dense island's whole batches: at 7 genes a row's
    # sum is one reduction block whatever the batch, so the fitness bits agree on a GPU too
    runs = []
    for genome in ("dense", "delta"):
        problem = make_problem("rastrigin", 7, shift=True)
        problem.bases = BaseModels(np.zeros((1, 7), np.float32))
        island = _island(problem, genome=genome, materialize_budget=2 * 7 * 4)   # 1-row blocks
        assert island.on_device and island.archive.on_device
        runs.append(_run(island, 5))
    _same_run(*runs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_delta_device_island_is_the_delta_host_island_bit_for_bit(monkeypatch, dtype):
    # the counter-based regime (forced here at a tiny dim) shares every draw and all
    # arithmetic of breeding between host and device; the fitness has no reduction
    monkeypatch.setattr(host_ops, "COUNTER_DIM", 1)
    runs = []
    for where in ("cuda", "cpu"):
        island = _island(_problem(where), where=where, dtype=dtype, mutation_rate=0.4)
        assert island.on_device is (where == "cuda")
        runs.append(_run(island, 5) + island.best())
    _same_run(runs[0][:3], runs[1][:3])
    (genome_dev, value_dev), (genome_host, value_host) = runs[0][3:], runs[1][3:]
    assert genome_dev.tobytes() == genome_host.tobytes() and value_dev == value_host


def _through_a_file(state: dict, path) -> dict:
    """``state`` written to an HDF5 checkpoint file and read back."""
    from mpievo.io.files import read_checkpoint_file, write_checkpoint_file

    write_checkpoint_file(path, checkpoint="c", sequence=1, generation=2, rank=0, nranks=1,
                          islands={0: state}, run_state=None, config_text="", config_format="toml")
    return read_checkpoint_file(path).islands[0]


def test_a_device_checkpoint_resumes_on_the_host_and_back(monkeypatch, tmp_path):
    monkeypatch.setattr(host_ops, "COUNTER_DIM", 1)
    reference = _run(_island(_problem("cpu"), where="cpu"), 5)
    for saved_on, resumed_on in (("cuda", "cpu"), ("cpu", "cuda")):
        saved = _island(_problem(saved_on), where=saved_on)
        saved.run(2)
        state = saved.state_dict()
        assert isinstance(state["archive"]["genomes"], np.ndarray)       # rows on the host in the file
        assert state["genome"]["encoding"] == "delta" and "bases_checksum" in state["genome"]
        state = _through_a_file(state, tmp_path / f"{saved_on}.h5")
        resumed = _island(_problem(resumed_on), where=resumed_on)
        resumed.load_state_dict(state)
        assert resumed.archive.on_device is (resumed_on == "cuda")
        _same_run(_run(resumed, 3), reference)


def test_the_base_goes_to_the_device_once_per_process(monkeypatch):
    from mpievo.kernels.cuda import rows as cuda_rows

    uploads = []
    upload = cuda_rows.from_host
    monkeypatch.setattr(cuda_rows, "from_host", lambda src, *a, **k: uploads.append(src.shape) or upload(src, *a, **k))
    problem = _problem()
    islands = [_island(problem, index=i) for i in range(2)]
    for island in islands:
        island.run(3)
    assert uploads.count((problem.dim,)) == 1       # the base row, not every base
    placed = [encoding_of(island.problem)._device_arrays()[0] for island in islands]
    assert placed[0] is placed[1] is problem.bases.on_device(row=0)
    assert np.array_equal(placed[0].copy_to_host(), problem.bases.array[0])


def test_delta_device_rows_migrate_as_device_rows():
    gpu, cpu = _island(_problem(), index=0), _island(_problem("cpu"), where="cpu", index=1)
    for island in (gpu, cpu):
        island.run(2)
    to_cpu = gpu.emigrants(2, "best")
    assert device.is_device_array(to_cpu.genomes)
    cpu.immigrate(*to_cpu, policy="worst")
    assert set(to_cpu.ids) <= set(cpu.archive.ids)
    to_gpu = cpu.emigrants(2, "best")
    gpu.immigrate(*to_gpu, policy="worst")
    held = {tuple(row) for row in device.to_host(gpu.archive.genomes)}
    assert all(tuple(row) in held for row in to_gpu.genomes)


def test_device_settings_with_delta_are_checked_and_auto_picks_as_for_dense():
    with pytest.raises(ValueError, match="engine.device: expected 'cpu' or 'auto' with engine.genome = "
                                         "'delta' for a problem that evaluates on the host.*got 'cuda'"):
        _island(_problem("cpu"))
    with pytest.raises(ValueError, match="engine.algorithm among"):
        _island(_problem(), algorithm="de")
    # auto: the device for a device problem on a real GPU, exactly as for dense genomes
    for genome in ("dense", "delta"):
        assert _island(_problem(), where="auto", genome=genome).on_device is (not simulator_enabled())
        assert not _island(_problem("cpu"), where="auto", genome=genome).on_device
        assert not _island(_problem(), where="auto", genome=genome, algorithm="cmaes").on_device
    assert not _island(_problem(), where="cpu").on_device


def test_bases_on_device_by_row_share_one_copy(monkeypatch):
    from mpievo.kernels.cuda import rows as cuda_rows

    bases = BaseModels(np.arange(12, dtype=np.float32).reshape(3, 4))
    uploads = []
    upload = cuda_rows.from_host
    monkeypatch.setattr(cuda_rows, "from_host", lambda src, *a, **k: uploads.append(src.shape) or upload(src, *a, **k))
    row = bases.on_device(row=1)
    assert bases.on_device(row=1) is row and uploads == [(4,)]
    assert np.array_equal(row.copy_to_host(), bases.array[1])
    whole = bases.on_device()
    assert bases.on_device() is whole and uploads == [(4,), (3, 4)]
    # once every base is there, a row is a view of it: no second copy of any base
    assert np.array_equal(bases.on_device(row=2).copy_to_host(), bases.array[2]) and len(uploads) == 2
    with pytest.raises(IndexError, match="expected a base row in 0..2, got 3"):
        BaseModels(np.zeros((3, 4), np.float32)).on_device(row=3)
