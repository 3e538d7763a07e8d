"""The built-in benchmark functions (float64 batches, optimum value 0): sphere, ellipsoid,
rastrigin, rosenbrock, ackley, griewank, schwefel (:data:`BUILTIN_PROBLEMS`), and
:class:`ShiftedRotated`, one of them with its optimum moved and its axes rotated.
:func:`mpievo.evo.problems.builtin_problem` makes a :class:`~mpievo.evo.problems.Problem` of one.

Example::

    ShiftedRotated("rastrigin", 3, None, None)(np.zeros((1, 3)))     # array([0.])
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable

import numpy as np

from mpievo.kernels import operators as kernels


def sphere(z: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", z, z)


def ellipsoid(z: np.ndarray) -> np.ndarray:
    dim = z.shape[1]
    weights = 10.0 ** (6.0 * np.arange(dim) / max(dim - 1, 1))
    return (z * z) @ weights


def rastrigin(z: np.ndarray) -> np.ndarray:
    return 10.0 * z.shape[1] + np.sum(z * z - 10.0 * np.cos(2.0 * np.pi * z), axis=1)


def rosenbrock(z: np.ndarray) -> np.ndarray:
    head, tail = z[:, :-1], z[:, 1:]
    return np.sum(100.0 * (tail - head * head) ** 2 + (1.0 - head) ** 2, axis=1)


def ackley(z: np.ndarray) -> np.ndarray:
    mean_sq = np.mean(z * z, axis=1)
    mean_cos = np.mean(np.cos(2.0 * np.pi * z), axis=1)
    return -20.0 * np.exp(-0.2 * np.sqrt(mean_sq)) - np.exp(mean_cos) + 20.0 + np.e


def griewank(z: np.ndarray) -> np.ndarray:
    divisors = np.sqrt(np.arange(1, z.shape[1] + 1))
    return 1.0 + np.sum(z * z, axis=1) / 4000.0 - np.prod(np.cos(z / divisors), axis=1)


SCHWEFEL_OPTIMUM = 420.9687462275036


def schwefel(z: np.ndarray) -> np.ndarray:
    return 418.9828872724338 * z.shape[1] - np.sum(z * np.sin(np.sqrt(np.abs(z))), axis=1)


@dataclass(frozen=True)
class _Benchmark:
    function: Callable[[np.ndarray], np.ndarray]
    optimum: float      # every gene of the unshifted optimum
    lower: float        # default box
    upper: float


#: name -> benchmark (read-only)
BUILTIN_PROBLEMS = MappingProxyType({
    "sphere": _Benchmark(sphere, 0.0, -5.12, 5.12),
    "ellipsoid": _Benchmark(ellipsoid, 0.0, -5.12, 5.12),
    "rastrigin": _Benchmark(rastrigin, 0.0, -5.12, 5.12),
    "rosenbrock": _Benchmark(rosenbrock, 1.0, -5.0, 10.0),
    "ackley": _Benchmark(ackley, 0.0, -32.768, 32.768),
    "griewank": _Benchmark(griewank, 0.0, -600.0, 600.0),
    "schwefel": _Benchmark(schwefel, SCHWEFEL_OPTIMUM, -500.0, 500.0),
})


class ShiftedRotated:
    """``f(R (x - o) + x*)`` for a benchmark ``f`` (either part may be absent).

    Attributes:
        shift: (dim,) optimum location ``o``, or None (optimum at ``x*``).
        rotation: (dim, dim) orthogonal matrix, or None.
    """

    def __init__(self, name: str, dim: int, shift: np.ndarray | None, rotation: np.ndarray | None):
        self.name = name
        self.benchmark = BUILTIN_PROBLEMS[name]
        self.dim = dim
        self.shift = shift
        self.rotation = rotation
        self.__name__ = name

    @property
    def optimum(self) -> np.ndarray:
        """Location of the optimum (value 0, up to rounding for schwefel)."""
        if self.shift is not None:
            return self.shift.copy()
        return np.full(self.dim, self.benchmark.optimum)

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        plain = self.shift is None and self.rotation is None
        if plain and self.name == "sphere" and genomes.dtype in (np.float32, np.float64):
            # The cheap path: no float64 copy of the batch.
            out = np.empty(genomes.shape[0])
            kernels.sum_squares_rows(np.ascontiguousarray(genomes), out)
            return out
        z = genomes.astype(np.float64)
        if not plain:
            z -= self.optimum
            if self.rotation is not None:
                z = z @ self.rotation.T
            z += self.benchmark.optimum
        return self.benchmark.function(z)


def random_rotation(dim: int, rng: np.random.Generator) -> np.ndarray:
    """A random orthogonal matrix (Haar measure: QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))
