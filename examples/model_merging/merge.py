"""The two model-merging problems, as mpievo Problems named from the TOML jobs.

* ``merge:whole_weights`` -- the genome is every parameter of one merged model.
  The islands start from the parents (plus a little noise), and the GA's
  interpolation crossover ``omega*a + (1-omega)*b`` with a small mutation breeds
  merges of merges. Its base models are the shared pre-trained base, then the
  parents (:meth:`WholeWeights.load_bases`), so the job's ``engine.genome`` may be
  ``dense`` (rows are the weights), ``delta`` (rows are differences from the base)
  or ``seeded`` (rows are recipes over base and parents; islands then start from
  those four models).
* ``merge:recipe`` -- the genome holds one merge weight in [0, 1] per parent and per
  parameter tensor (each layer's weights and biases), normalised over the parents:
  a layer-wise parameter-space merge recipe (as in Sakana AI's evolutionary model
  merging), evolved by CMA-ES. Its islands start from the plain average.

Both maximise the held-out score on the fitness split: accuracy, less
``CE_WEIGHT`` times the cross-entropy, which ranks merges of equal accuracy by
their confidence (accuracy alone moves in steps of one digit). The test split is
never seen by the evolution; ``report.py`` shows it. Scores run on a GPU through
CuPy when CuPy is installed and finds one, else with numpy.

Both Problems come from a :class:`~models.Zoo` (the parents); for other parents,
e.g. ``WholeWeights(Zoo(ZooSpec(hidden=(16,)))).problem()``.
"""

from __future__ import annotations

import numpy as np

from models import Zoo, scores
from mpievo.evo import Problem
from mpievo.evo.genomes import BaseModels

#: weight of the cross-entropy in the score (a tie-break between equal accuracies)
CE_WEIGHT = 0.01
#: box of every weight of a whole-weight genome (the parents' weights lie well inside)
WEIGHT_BOX = 4.0


def array_module():
    """cupy when it is installed and sees a GPU, else numpy."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # no cupy, or a cupy without a usable driver
        pass
    return np


class Merger:
    """What both problems share: the parents, and scores of merged models on a split.

    Subclasses define ``name``, ``dim``, ``lower``, ``upper``, :meth:`merged` (genomes
    -> (n, P) model parameters) and :meth:`initial` (the islands' starting genomes).
    """

    def __init__(self, zoo: Zoo):
        self.zoo = zoo
        self._xp = None
        self._fitness = None

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        """Score (to maximise) of each genome on the fitness split."""
        if self._xp is None:
            self._xp = array_module()
            self._fitness = self.zoo.splits.fitness.to(self._xp)
        thetas = self._xp.asarray(self.merged(genomes))
        accuracy, cross_entropy = scores(self.zoo.arch, thetas, self._fitness)
        return _to_numpy(accuracy - CE_WEIGHT * cross_entropy)

    def problem(self, **extra) -> Problem:
        return Problem(self, self.dim, self.lower, self.upper, maximize=True, name=self.name,
                       initial=self.initial, **extra)


class WholeWeights(Merger):
    """Genome = the merged model's parameters; starts at the parents plus ``noise``
    (standard deviation), the first ``k`` rows at the parents exactly."""

    name = "model merging: whole weights"

    def __init__(self, zoo: Zoo, noise: float = 0.01):
        super().__init__(zoo)
        self.noise = noise
        self.dim = zoo.arch.n_params
        self.lower, self.upper = -WEIGHT_BOX, WEIGHT_BOX

    def merged(self, genomes: np.ndarray) -> np.ndarray:
        return genomes

    def problem(self) -> Problem:
        """The Problem, with base models for delta/seeded genomes; they load lazily (a
        dense job never trains or reads them through the bases)."""
        count = 1 + len(self.zoo.spec.parts)
        bases = BaseModels(self.load_bases, shape=(count, self.dim), dtype=np.float32,
                           reference="model merging zoo: base, then parents")
        return super().problem(bases=bases)

    def load_bases(self, out: np.ndarray) -> None:
        """Fill ``out`` with the shared base (row 0: what deltas are taken from), then
        the parents."""
        out[...] = self.zoo.models

    def initial(self, rng: np.random.Generator, n: int) -> np.ndarray:
        parents = self.zoo.parents
        genomes = parents[np.arange(n) % len(parents)] + self.noise * rng.standard_normal((n, self.dim))
        genomes[:len(parents)] = parents[:n]
        return genomes


class Recipe(Merger):
    """Genome = (parents, tensors) merge weights in [0, 1], row-major; tensor ``t`` of the
    merge is ``sum_k w[k, t] theta_k[t] / sum_k w[k, t]`` (all zero: the plain average)."""

    name = "model merging: layer-wise recipe"

    def __init__(self, zoo: Zoo):
        super().__init__(zoo)
        self.tensors = len(zoo.arch.slices)
        self.dim = len(zoo.spec.parts) * self.tensors
        self.lower, self.upper = 0.0, 1.0

    def weights(self, genomes: np.ndarray) -> np.ndarray:
        """(n, parents, tensors) normalised merge weights."""
        w = np.asarray(genomes, np.float64).reshape(len(genomes), -1, self.tensors)
        total = w.sum(axis=1, keepdims=True)
        return np.where(total > 0, w / np.where(total > 0, total, 1.0), 1.0 / w.shape[1])

    def merged(self, genomes: np.ndarray) -> np.ndarray:
        w, parents = self.weights(genomes), self.zoo.parents.astype(np.float64)
        return np.concatenate([w[:, :, t] @ parents[:, part] for t, part in enumerate(self.zoo.arch.slices)],
                              axis=1).astype(np.float32)

    def initial(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The plain average (row 0) and random recipes."""
        genomes = rng.uniform(0.0, 1.0, (n, self.dim))
        genomes[0] = 0.5
        return genomes


def _to_numpy(values) -> np.ndarray:
    return values.get() if hasattr(values, "get") else np.asarray(values)


#: the jobs' problems (whole_weights.toml, recipe.toml); the parents train on first use
zoo = Zoo()
whole_weights = WholeWeights(zoo).problem()
recipe = Recipe(zoo).problem()
