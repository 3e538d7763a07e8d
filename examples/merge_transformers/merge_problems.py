"""The merge problems, as mpievo Problems named from ``merge.toml`` (``merge:recipe``,
``merge:whole_weights``) or passed to ``mpievo.minimize``.

* :class:`Recipe` -- the genome is one weight in [0, 1] per layer group and per expert
  (groups: the embeddings, each block's attention half and MLP half, the final norm);
  the merge is ``base + sum_k w[g, k] * tau_k[g]`` (task arithmetic with a coefficient per
  group and expert). Islands start from the plain average (all ``1/k``) and random recipes.
* :class:`WholeWeights` -- the genome is every parameter of the merged model; the
  islands start from the experts and the average, and breed ``omega*a + (1-omega)*b``
  with a small mutation. Its base models are the base then the experts, so
  ``engine.genome = "delta"`` holds the base once per node and migrates differences.

Both maximise :func:`scoring.fitness` on the validation split (the mean over tasks of
exact-match accuracy); reports use the test split. Each process loads the base and the
experts once (first evaluation) and writes each genome into one resident model in
place. Torch runs one thread per process: the ranks share the cores.

The size comes from ``$MERGE_TRANSFORMERS_SIZE`` (``full``, the default, or ``small``)
and the cache folder from ``$MERGE_TRANSFORMERS_CACHE``; build the models first
(``python examples/merge_transformers/build.py``) so that ranks do not all train them.
"""

from __future__ import annotations

import os
import re

import numpy as np
import torch

from zoo import SPECS, Zoo, new_model
from mpievo.evo import Problem
from mpievo.evo.genomes import BaseModels
from scoring import fitness
from weights import assign, average, flatten, tensor_slices

#: box of every weight of a whole-weight genome (the models' weights lie well inside)
WEIGHT_BOX = 8.0


def layer_groups(model) -> list[str]:
    """The group of each parameter tensor, in flat order: ``embed``, ``h<i>.attn``
    (``ln_1`` and attention), ``h<i>.mlp`` (``ln_2`` and MLP), ``final``."""
    groups = []
    for name, _ in tensor_slices(model):
        block = re.match(r"transformer\.h\.(\d+)\.(\w+)", name)
        if block:
            groups.append(f"h{block[1]}.{'attn' if block[2] in ('ln_1', 'attn') else 'mlp'}")
        else:
            groups.append("final" if ".ln_f." in name else "embed")
    return groups


class Merger:
    """What both problems share: the zoo, one resident model per process, the fitness."""

    def __init__(self, zoo: Zoo):
        self.zoo = zoo
        self.template = new_model(zoo.spec)      # architecture only: no training at import
        self.dim_params = sum(p.numel() for p in self.template.parameters())
        self._model = None

    def load(self) -> None:
        """The base and the experts as flat vectors, and the model the genomes go into."""
        if self._model is None:
            torch.set_num_threads(1)
            self._model = self.zoo.load("base")
            self.base = flatten(self._model)
            self.experts = np.stack([flatten(self.zoo.load(name)) for name in self.zoo.expert_names])

    def weights_of(self, genome: np.ndarray) -> np.ndarray:
        """The (P,) merged model of one genome."""
        raise NotImplementedError

    def model_of(self, genome: np.ndarray):
        """The resident model holding the merge of ``genome`` (overwritten by the next call)."""
        self.load()
        assign(self._model, self.weights_of(np.asarray(genome)))
        return self._model

    def __call__(self, genomes: np.ndarray) -> np.ndarray:
        self.load()
        return np.array([fitness(self.model_of(g), self.zoo.splits) for g in genomes])

    def problem(self, **extra) -> Problem:
        return Problem(self, self.dim, self.lower, self.upper, maximize=True, name=self.name,
                       initial=self.initial, **extra)


class Recipe(Merger):
    """Genome = (groups, experts) weights in [0, 1], row-major."""

    name = "transformer merge: layer-wise task arithmetic"

    def __init__(self, zoo: Zoo):
        super().__init__(zoo)
        groups = layer_groups(self.template)
        self.groups = list(dict.fromkeys(groups))
        self.slices = [(self.groups.index(g), part) for g, (_, part) in zip(groups, tensor_slices(self.template))]
        self.experts_count = len(zoo.expert_names)
        self.dim = len(self.groups) * self.experts_count
        self.lower, self.upper = 0.0, 1.0

    def weights_of(self, genome: np.ndarray) -> np.ndarray:
        self.load()       # a master_worker master breeds only: it loads on the first report
        w = genome.reshape(len(self.groups), self.experts_count).astype(np.float32)
        taus = self.experts - self.base
        merged = self.base.copy()
        for group, part in self.slices:
            merged[part] += w[group] @ taus[:, part]
        return merged

    def initial(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """The plain average (row 0) and random recipes."""
        genomes = rng.uniform(0.0, 1.0, (n, self.dim))
        genomes[0] = 1.0 / self.experts_count
        return genomes


class WholeWeights(Merger):
    """Genome = the merged model's parameters; starts at the experts (exactly, then
    plus ``noise``) and the plain average."""

    name = "transformer merge: whole weights"

    def __init__(self, zoo: Zoo, noise: float = 0.002):
        super().__init__(zoo)
        self.noise = noise
        self.dim = self.dim_params
        self.lower, self.upper = -WEIGHT_BOX, WEIGHT_BOX

    def weights_of(self, genome: np.ndarray) -> np.ndarray:
        return genome

    def problem(self) -> Problem:
        """The Problem, with base models (the base, then the experts) for delta genomes."""
        bases = BaseModels(self.load_bases, shape=(1 + len(self.zoo.expert_names), self.dim), dtype=np.float32,
                           reference=f"transformer merge zoo {self.zoo.folder}: base, then experts")
        return super().problem(bases=bases)

    def load_bases(self, out: np.ndarray) -> None:
        self.load()
        out[0], out[1:] = self.base, self.experts

    def initial(self, rng: np.random.Generator, n: int) -> np.ndarray:
        self.load()
        starts = np.vstack([self.experts, average(self.experts)[None]])
        genomes = starts[np.arange(n) % len(starts)] + self.noise * rng.standard_normal((n, self.dim))
        genomes[:len(starts)] = starts[:n]
        return genomes


def default_zoo() -> Zoo:
    size = os.environ.get("MERGE_TRANSFORMERS_SIZE", "full")
    if size not in SPECS:
        raise ValueError(f"expected MERGE_TRANSFORMERS_SIZE in {sorted(SPECS)}, got {size!r}")
    return Zoo(SPECS[size])


#: the jobs' problems (merge.toml, whole_weights.toml)
zoo = default_zoo()
recipe = Recipe(zoo).problem()
whole_weights = WholeWeights(zoo).problem()
