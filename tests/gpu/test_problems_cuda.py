"""The built-in problems on the device (mpievo.kernels.cuda.problems) against the host."""

from __future__ import annotations

import numpy as np
import pytest

from mpievo.evo.builtin_functions import BUILTIN_PROBLEMS, ShiftedRotated, random_rotation
from mpievo.kernels.cuda import problems as cuda_problems
from mpievo.kernels import operators as host_ops

pytestmark = pytest.mark.filterwarnings("ignore::numba.core.errors.NumbaWarning")

DIM = 13
ROTATED = (3, 6)  # rows, dim: a rotation costs dim^2 per row, slow in the simulator


def _device(host):
    from numba import cuda

    return cuda.to_device(np.ascontiguousarray(host))


def _case(name, variant, rng):
    bench = BUILTIN_PROBLEMS[name]
    n, dim = ROTATED if "rotate" in variant else (4, DIM)
    genomes = rng.uniform(bench.lower, bench.upper, (n, dim))
    shift = rng.uniform(0.8 * bench.lower, 0.8 * bench.upper, dim) if "shift" in variant else None
    rotation = random_rotation(dim, rng) if "rotate" in variant else None
    return genomes, shift, rotation


def test_device_problems_are_the_builtins():
    assert set(cuda_problems.DEVICE_PROBLEMS) == set(BUILTIN_PROBLEMS)


@pytest.mark.parametrize("variant", ["plain", "shift", "rotate", "shift+rotate"])
@pytest.mark.parametrize("name", sorted(BUILTIN_PROBLEMS))
def test_problems_match_host_in_float64(name, variant, rng):
    genomes, shift, rotation = _case(name, variant, rng)
    host = ShiftedRotated(name, genomes.shape[1], shift, rotation)
    want = host(genomes)
    got = cuda_problems.evaluate(name, _device(genomes), shift=shift, rotation=rotation,
                                 optimum=BUILTIN_PROBLEMS[name].optimum)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["rastrigin", "griewank", "rosenbrock"])
def test_float32_genomes_are_evaluated_in_float64(name, rng):
    genomes, shift, rotation = _case(name, "shift+rotate", rng)
    genomes = genomes.astype(np.float32)
    want = ShiftedRotated(name, genomes.shape[1], shift, rotation)(genomes)
    got = cuda_problems.evaluate(name, _device(genomes), shift=_device(shift),
                                 rotation=_device(rotation), optimum=BUILTIN_PROBLEMS[name].optimum)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_plain_float32_sphere_matches_host_kernel_and_is_deterministic(rng):
    genomes = rng.uniform(-5, 5, (5, 203)).astype(np.float32)
    want = np.empty(5)
    host_ops.sum_squares_rows(genomes, want)
    d = _device(genomes)
    out = np.empty(5)
    got = cuda_problems.evaluate("sphere", d, out=out)
    assert got is out
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(cuda_problems.evaluate("sphere", d), got)


def test_at_the_optimum_the_value_is_zero(rng):
    bench, dim = BUILTIN_PROBLEMS["rosenbrock"], ROTATED[1]
    shift = rng.uniform(bench.lower, bench.upper, dim)
    got = cuda_problems.evaluate("rosenbrock", _device(np.stack([shift, shift + 1])),
                                 shift=shift, rotation=random_rotation(dim, rng), optimum=1.0)
    assert got[0] == pytest.approx(0.0, abs=1e-18) and got[1] > 1.0


def test_evaluate_refuses_bad_arguments():
    d = _device(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"expected a device problem among \('sphere'.*got 'levy'"):
        cuda_problems.evaluate("levy", d)
    with pytest.raises(TypeError, match="expected genomes to be a numba device array"):
        cuda_problems.evaluate("sphere", np.zeros((3, 4)))
    with pytest.raises(TypeError, match="a 2-D float32 or float64 array, got int64"):
        cuda_problems.evaluate("sphere", _device(np.zeros((3, 4), np.int64)))
    with pytest.raises(ValueError, match=r"expected shift of shape \(4,\) and dtype float64, "
                                         r"got \(3,\)"):
        cuda_problems.evaluate("sphere", d, shift=np.zeros(3))
    with pytest.raises(ValueError, match=r"expected rotation of shape \(4, 4\) and dtype "
                                         r"float64, got \(4, 4\) float32"):
        cuda_problems.evaluate("sphere", d, rotation=_device(np.eye(4, dtype=np.float32)))
    with pytest.raises(ValueError, match=r"expected out: a float64 numpy array of shape \(3,\), "
                                         r"got ndarray of shape \(3,\) and dtype float32"):
        cuda_problems.evaluate("sphere", d, out=np.zeros(3, np.float32))
    assert cuda_problems.evaluate("ackley", _device(np.zeros((0, 4)))).shape == (0,)
