"""A device island's persistent breeding workspace (mpievo.kernels.cuda.workspace):
allocated once, one upload and one download per generation, the same children.

Under the simulator transfers are synchronous and streams are stand-ins: these tests
count allocations and transfers through wrappers and compare bits; what the
workspace saves in time is measured on a GPU (``mpievo bench gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo import EngineConfig, Island, device_operators, make_problem
from mpievo.evo.streams import stream
from mpievo.kernels import counter_operators
from mpievo.kernels.cuda import counter_operators as cuda_counter_operators
from mpievo.kernels.cuda.workspace import BreedWorkspace

CONFIG = dict(capacity=6, batch_size=4, population=6, stagnation_patience=0)
ALLOCATORS = ("device_array", "to_device", "pinned_array", "device_array_like", "mapped_array")


class _Counter:
    """Counts the calls of numba.cuda's allocators and of device-array transfers."""

    def __init__(self, monkeypatch):
        from numba import cuda

        self.calls = {}
        array_type = type(cuda.device_array(1))
        for name in ALLOCATORS:
            self._wrap(monkeypatch, cuda, name)
        for name in ("copy_to_device", "copy_to_host"):
            self._wrap(monkeypatch, array_type, name)

    def _wrap(self, monkeypatch, owner, name):
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    def allocations(self) -> int:
        return sum(self.calls.get(k, 0) for k in ALLOCATORS)


@pytest.mark.parametrize("problem", ["sphere", "rastrigin"])
def test_breeding_and_evaluation_allocate_nothing_after_the_first_generation(monkeypatch, problem):
    """The GA's default breeding (interpolation crossover fused with the mutation: one
    upload, one download), a built-in problem's evaluation (one download) and the
    archive's row moves."""
    island = Island(0, make_problem(problem, 8), EngineConfig(device="cuda", mutation_rate=0.5, **CONFIG),
                    seed=1)
    island.initialize()
    island.step(1)   # makes the workspace and the evaluation's scratch arrays
    counter = _Counter(monkeypatch)
    for generation in (2, 3):
        counter.calls.clear()
        batch = island.ask(generation)   # the breeding step
        breeding = dict(counter.calls)
        assert counter.allocations() == 0, breeding
        assert breeding.get("copy_to_device") == 1 and breeding.get("copy_to_host") == 1, breeding
        counter.calls.clear()
        fitness = island.evaluate(batch)
        assert counter.allocations() == 0, counter.calls
        assert counter.calls == {"copy_to_host": 1}   # the fitness: one download
        counter.calls.clear()
        island.tell(fitness)                          # the children's rows into the archive
        assert counter.allocations() == 0, counter.calls


def test_scratch_arrays_are_per_name_shape_stream_and_thread():
    import threading

    from numba import cuda

    from mpievo.kernels.cuda.workspace import SCRATCH_ENTRIES, scratch

    a = scratch("test a", (3,), np.float64)
    assert scratch("test a", (3,), np.float64) is a
    other = cuda.stream()
    assert scratch("test a", (4,), np.float64) is not a
    assert scratch("test a", (3,), np.float64, other) is not a
    assert scratch("test b", (3,), np.float64) is not a
    seen = []
    worker = threading.Thread(target=lambda: seen.append(scratch("test a", (3,), np.float64)))
    worker.start()
    worker.join()
    assert seen[0] is not a            # another thread: its own array
    for i in range(SCRATCH_ENTRIES):   # the least recently used goes first
        scratch("test fill", (i + 1,), np.float64)
    assert scratch("test a", (3,), np.float64) is not a


@pytest.mark.parametrize("crossover, bounds", [("blend", "clip"), ("uniform", "resample"),
                                               ("sbx", "reflect")])
def test_the_other_crossovers_and_box_modes_allocate_nothing_either(monkeypatch, crossover, bounds):
    island = Island(0, make_problem("sphere", 8), EngineConfig(device="cuda", crossover=crossover, bounds=bounds,
                                                              mutation_rate=0.5, **CONFIG), seed=2)
    island.initialize()
    island.step(1)
    counter = _Counter(monkeypatch)
    island.ask(2)
    assert counter.allocations() == 0, counter.calls
    # the parent indices, the box's zeroed counter, the mutation's inputs
    assert counter.calls.get("copy_to_device") == 3, counter.calls


def _parents(dim, dtype, seed):
    from numba import cuda

    rng = np.random.default_rng(seed)
    genomes = rng.uniform(-1, 1, (5, dim)).astype(dtype)
    return cuda.to_device(genomes)


@pytest.mark.parametrize("rate", [0.5, 0.03], ids=["dense", "sparse"])   # DENSE_RATE: 0.05
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_breeding_through_the_workspace_is_bit_identical_to_the_allocating_path(rate, dtype):
    from numba import cuda

    dim, n = 41, 4
    genomes = _parents(dim, dtype, 7)
    lower, upper = (device_operators.place(np.full(dim, v, dtype)) for v in (-1.0, 1.0))
    scale = device_operators.place(np.full(dim, 2.0, dtype))
    children = cuda.device_array((n, dim), dtype)   # the persistent array: bred via its workspace
    mutated = 0
    for generation in range(3):
        runs = []
        for out in (children, None):
            rng = stream(5, 0, generation, "breed")
            idx = rng.integers(0, 5, 2 * n)
            steps = rng.uniform(0.05, 0.2, n)
            got, counts = device_operators.breed(genomes, idx[:n], idx[n:], rng, lower, upper, out,
                                                 rate=rate, steps=steps, scale=scale, bounds="reflect")
            runs.append((got.copy_to_host(), counts.copy()))
        (a, ca), (b, cb) = runs
        assert a.tobytes() == b.tobytes() and np.array_equal(ca, cb)
        mutated += ca.sum()
    assert mutated > 0
    assert device_operators.workspace(children) is device_operators.workspace(children)  # reused


def test_a_workspace_is_one_upload_of_every_input_and_zeroed_counts():
    from numba import cuda

    ws = BreedWorkspace(3, np.float32)
    ws.device["counts"].copy_to_device(np.array([7, 8, 9]))   # last generation's counts
    packed = ws.upload(np.array([0.5, 0.25, 1.0]), np.array([2, 0, 1]), np.array([1, 1, 0]),
                       np.array([0.1, 0.2, 0.3]))
    assert set(packed) == {"steps", "idx_a", "idx_b", "omega", "counts"}
    np.testing.assert_array_equal(packed["idx_a"].copy_to_host(), [2, 0, 1])
    np.testing.assert_array_equal(packed["idx_b"].copy_to_host(), [1, 1, 0])
    np.testing.assert_array_equal(packed["omega"].copy_to_host(), np.float32([0.1, 0.2, 0.3]))
    np.testing.assert_array_equal(packed["steps"].copy_to_host(), np.float32([0.5, 0.25, 1.0]))
    np.testing.assert_array_equal(packed["counts"].copy_to_host(), [0, 0, 0])
    device_steps = cuda.to_device(np.float32([1, 2, 3]))
    assert ws.upload(device_steps)["steps"] is device_steps   # device inputs are used as they are
    out = np.empty(3, np.int64)
    assert ws.read_counts(out) is out and out.tolist() == [0, 0, 0]


def test_bad_workspace_use_is_refused_before_any_work():
    with pytest.raises(ValueError, match="expected a workspace for n >= 1 children, got 0"):
        BreedWorkspace(0, np.float32)
    with pytest.raises(TypeError, match="expected a float32 or float64 genome dtype, got float16"):
        BreedWorkspace(2, np.float16)
    ws = BreedWorkspace(3, np.float32)
    with pytest.raises(ValueError, match=r"expected steps of shape \(3,\), got \(2,\)"):
        ws.upload(np.ones(2))
    from numba import cuda

    x = cuda.device_array((4, 5), np.float32)
    plan = counter_operators.rate_threshold(0.5)
    with pytest.raises(ValueError, match="expected a workspace for 4 children of float32, got one for 3"):
        cuda_counter_operators.vary(x, None, None, None, False, x, np.ones(4, np.float32),
                                    np.ones(5, np.float32), np.zeros(5, np.float32),
                                    np.ones(5, np.float32), "clip", plan, 0.0, True, (1, 2, 3, 4), 0,
                                    workspace=ws)


def test_the_island_stream_follows_numbas_default_stream_setting(monkeypatch):
    from numba import cuda
    from numba.cuda.core import config

    from mpievo.kernels.cuda.workspace import island_stream

    monkeypatch.setattr(config, "CUDA_PER_THREAD_DEFAULT_STREAM", 0, raising=False)
    first, second = island_stream(), island_stream()
    assert first is not second                       # a stream of each island's own
    monkeypatch.setattr(config, "CUDA_PER_THREAD_DEFAULT_STREAM", 1)
    monkeypatch.setattr(cuda, "per_thread_default_stream", lambda: "per-thread default")
    assert island_stream() == "per-thread default"   # ordered with the archive's work
