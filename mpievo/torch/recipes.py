"""Merge recipes as genomes: :class:`RecipeSpace` (what the genes mean) and
:class:`RecipeProblem` (the fitness of a recipe: the merged model's score).

A recipe genome is a small float64 vector in a box, so CMA-ES, SHADE and GA islands all
search it. Its genes, per layer group ``g`` (consecutive transformer blocks, see
:func:`layer_groups`; everything outside the blocks is the group ``"other"``):

* ``linear``: a weight in [0, 1] per source;
* ``task_arithmetic``: a weight in [0, 1] per source, and one ``lambda`` in [0, 2];
* ``ties``, ``dare``: a weight per source and a ``density`` in [0.05, 1] per group, and
  one ``lambda`` in [0, 2] (DARE's drop masks keyed by the problem's ``seed``);
* ``slerp`` (two sources): ``t`` in [0, 1] per group;
* ``della``: as ``ties``, and an ``epsilon`` per group in [0, 1]: the fraction of the
  largest epsilon its density allows (``min(density, 1 - density)``; decoded as the
  epsilon itself);
* ``breadcrumbs``: as ``ties``, and a ``gamma`` per group in [0, 0.2];
* ``model_stock``: a ``scale`` of model stock's ratio per group in [0, 2] (1: mergekit's);
* ``passthrough``: a ``source`` per group in [0, sources): its floor is the source
  whose tensors the group takes.

A fixed ``lam`` drops the ``lambda`` gene (e.g. ``lam=1``: task arithmetic
``base + sum_i w_gi tau_i`` with one coefficient per group and source). Other groups than
blocks of layers: ``group_by(name) -> label``. Generation 0 is uniform in the box, or with
``start="average"`` (for CMA-ES, which starts at the best of it) the average recipe
(:meth:`RecipeSpace.average_genome`) then uniform recipes.

The fitness materialises the merged model into the model's flat buffer (on its device)
from the sources, which are resident there once per process, and runs ``evaluate``.
Methods with a base (task arithmetic, TIES, DARE) take task vectors from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..evo.genomes import BaseModels
from ..evo.problems import Problem
from .flat import as_flat
from .merge import BASED, METHODS, as_tensor, dare_generator, merge_part
from .problem import model_bases, score_each

#: boxes of the method parameters
WEIGHT_BOX, DENSITY_BOX, LAMBDA_BOX, T_BOX = (0.0, 1.0), (0.05, 1.0), (0.0, 2.0), (0.0, 1.0)
EPSILON_BOX, GAMMA_BOX, SCALE_BOX = (0.0, 1.0), (0.0, 0.2), (0.0, 2.0)
#: methods with a weight per source and a density per group
SPARSE = ("ties", "dare", "della", "breadcrumbs")
#: the largest DELLA epsilon is this fraction of min(density, 1 - density)
EPSILON_MARGIN = 0.999
#: generation 0 of a RecipeProblem
STARTS = ("uniform", "average")
_LAYER = re.compile(r"(?:^|\.)(\d+)\.")


def layer_groups(names: Sequence[str], layers_per_group: int = 1,
                 group_by: Callable[[str], str] | None = None) -> tuple[list[str], np.ndarray]:
    """Group names and, per tensor of ``names``, its group: the first ``.N.`` in a name
    is its layer (``transformer.h.3.attn...``, ``model.layers.3...``), ``layers_per_group``
    consecutive layers make a group; tensors of no layer form ``"other"``. With
    ``group_by``, a tensor's group is ``group_by(name)`` (groups in order of first use).

    Example::

        layer_groups(["h.0.w", "h.1.w", "h.2.w", "ln_f.w"], layers_per_group=2)
        # (['layers 0-1', 'layers 2-3', 'other'], array([0, 0, 1, 2]))
    """
    if group_by is not None:
        return _groups_by(names, group_by)
    if layers_per_group < 1:
        raise ValueError(f"expected layers_per_group >= 1, got {layers_per_group}")
    keys = []
    for name in names:
        match = _LAYER.search(name)
        keys.append(None if match is None else int(match.group(1)) // layers_per_group)
    blocks = sorted({k for k in keys if k is not None})
    labels = [f"layer {b}" if layers_per_group == 1
              else f"layers {b * layers_per_group}-{(b + 1) * layers_per_group - 1}" for b in blocks]
    index = {b: i for i, b in enumerate(blocks)}
    if any(k is None for k in keys):
        labels.append("other")
    group_of = np.array([len(blocks) if k is None else index[k] for k in keys], np.int64)
    return labels, group_of


def _groups_by(names: Sequence[str], group_by: Callable[[str], str]) -> tuple[list[str], np.ndarray]:
    labels = [group_by(name) for name in names]
    for name, label in zip(names, labels):
        if not isinstance(label, str) or not label:
            raise ValueError(f"expected group_by({name!r}) to give a group name (a non-empty str), got {label!r}")
    groups = list(dict.fromkeys(labels))
    return groups, np.array([groups.index(label) for label in labels], np.int64)


_SINGLE_GENE = {"slerp": ("t", T_BOX), "model_stock": ("scale", SCALE_BOX), "passthrough": ("source", None)}


@dataclass
class RecipeSpace:
    """The genes of a ``method`` recipe over ``sources`` models and ``groups`` (with
    ``lam`` given, no ``lambda`` gene: the based methods use ``lam``).

    Attributes:
        names: one label per gene (``"layer 3/weight 1"``, ``"layers 0-1/density"``, ``"lambda"``).
        lower, upper: the box, float64.

    Example::

        space = RecipeSpace("ties", groups=["0", "1", "other"], sources=2)
        space.dim, space.names[:3]              # per group: 2 weights and a density; one lambda
        space.decode(space.average_genome())    # {'method': 'ties', 'groups': {'0': {'weights': [0.5, 0.5], ...
    """

    method: str
    groups: list[str]
    sources: int
    lam: float | None = None
    names: list[str] = field(init=False)
    lower: np.ndarray = field(init=False)
    upper: np.ndarray = field(init=False)

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"expected a merge method among {METHODS}, got {self.method!r}")
        if self.method == "slerp" and self.sources != 2:
            raise ValueError(f"expected 2 source models for 'slerp', got {self.sources}")
        if self.sources < 1:
            raise ValueError(f"expected at least one source model to merge, got {self.sources}")
        genes = []
        for group in self.groups:
            if self.method in _SINGLE_GENE:
                name, box = _SINGLE_GENE[self.method]
                genes.append((f"{group}/{name}", box if name != "source" else (0.0, float(self.sources))))
                continue
            genes += [(f"{group}/weight {i}", WEIGHT_BOX) for i in range(self.sources)]
            if self.method in SPARSE:
                genes.append((f"{group}/density", DENSITY_BOX))
            if self.method == "della":
                genes.append((f"{group}/epsilon", EPSILON_BOX))
            if self.method == "breadcrumbs":
                genes.append((f"{group}/gamma", GAMMA_BOX))
        if self.method in BASED and self.method != "model_stock" and self.lam is None:
            genes.append(("lambda", LAMBDA_BOX))
        self.names = [name for name, _ in genes]
        self.lower = np.array([box[0] for _, box in genes])
        self.upper = np.array([box[1] for _, box in genes])

    @property
    def dim(self) -> int:
        return len(self.names)

    def decode(self, genome) -> dict:
        """The recipe of ``genome`` as plain values: ``{"method", "lambda", "groups":
        {group: {"weights": [...], "density": d, "t": t}}}`` (what applies)."""
        genome = np.asarray(genome, np.float64).reshape(-1)
        if genome.shape != (self.dim,):
            raise ValueError(f"expected a recipe of {self.dim} genes for {self.method!r}, got shape {genome.shape}")
        values = dict(zip(self.names, genome.tolist()))
        groups = {}
        for group in self.groups:
            entry = {}
            if self.method in _SINGLE_GENE:
                name = _SINGLE_GENE[self.method][0]
                entry[name] = values[f"{group}/{name}"]
                if name == "source":
                    entry[name] = min(int(entry[name]), self.sources - 1)
            else:
                entry["weights"] = [values[f"{group}/weight {i}"] for i in range(self.sources)]
            if self.method in SPARSE:
                entry["density"] = values[f"{group}/density"]
            if self.method == "della":
                d = entry["density"]
                entry["epsilon"] = values[f"{group}/epsilon"] * EPSILON_MARGIN * min(d, 1 - d)
            if self.method == "breadcrumbs":
                entry["gamma"] = values[f"{group}/gamma"]
            groups[group] = entry
        recipe = {"method": self.method, "groups": groups}
        if self.method in BASED and self.method != "model_stock":
            recipe["lambda"] = values["lambda"] if self.lam is None else float(self.lam)
        return recipe

    def average_genome(self) -> np.ndarray:
        """The average recipe: every weight ``1/sources``, density 1, ``lambda`` 1, ``t``
        0.5 (for ``linear`` and ``task_arithmetic``: the plain average of the sources)."""
        start = {"weight": 1.0 / self.sources, "density": 1.0, "lambda": 1.0, "t": 0.5, "epsilon": 0.5,
                 "gamma": 0.0, "scale": 1.0, "source": 0.0}
        return np.array([start[name.rsplit("/", 1)[-1].split(" ")[0]] for name in self.names])


class RecipeProblem(Problem):
    """The score of the model a recipe merges (module docstring).

    Args:
        model: the model merged into (its flat buffer is overwritten per evaluation), or
            its :class:`~.flat.FlatParameters`.
        evaluate: ``evaluate(model) -> float``, called under ``torch.no_grad()``.
        sources: the models to merge: in-memory modules of ``model``'s architecture, or
            :class:`BaseModels` in ``model``'s flat layout (e.g. :func:`mpievo.torch.hf.hf_bases`).
        method: one of :data:`~.merge.METHODS`.
        base: the base model of task vectors (``task_arithmetic``, ``ties``, ``dare``): a
            module (prepended to the sources' bases), or the row of ``sources`` that is
            the base (the other rows are merged).
        layers_per_group: consecutive layers sharing one set of genes.
        group_by: ``group_by(tensor name) -> group name``, instead of ``layers_per_group``.
        lam: a fixed ``lambda`` of the based methods (no gene); None: a gene in [0, 2].
        start: generation 0: ``"uniform"`` in the box, or ``"average"``: the average
            recipe (:meth:`RecipeSpace.average_genome`) first, then uniform.
        seed: DARE's drop-mask key.
        x0: a whole recipe (``space.dim`` genes, e.g. a mergekit YAML's values,
            :func:`~.mergekit_export.recipe_start`): generation 0's first genome, and the
            value of the genes not searched.
        search: the genes searched (their kinds ``"weight"``, ``"density"``, ``"lambda"``,
            ``"t"``, ... or whole gene names); the others stay at ``x0`` (or the average
            recipe). None: every gene.
        maximize, include_frozen, name: as for :class:`~.problem.ModelProblem`.

    Attributes:
        space: the :class:`RecipeSpace` of the whole recipe (``space.decode(full_genome(x))``).
        searched: the indices of the searched genes in the whole recipe.
        flat: the model's :class:`~.flat.FlatParameters`.

    Example::

        flat = FlatParameters(model)
        sources = hf_bases(["experts/base", "experts/a", "experts/b"], flat)
        problem = RecipeProblem(flat, accuracy, sources, base=0, method="ties", layers_per_group=2)
        result = mpievo.minimize(problem, budget=300, islands=2, algorithm="cmaes")
        problem.space.decode(result.x)          # the recipe, by layer group
    """

    def __init__(self, model: torch.nn.Module, evaluate: Callable[[torch.nn.Module], float], sources, *,
                 method: str, base=None, layers_per_group: int = 1, group_by: Callable[[str], str] | None = None,
                 lam: float | None = None, start: str = "uniform", seed: int = 0, maximize: bool = True,
                 include_frozen: bool = False, name: str | None = None, x0=None, search=None):
        if not callable(evaluate):
            raise TypeError(f"expected a callable evaluate(model) -> float, got {type(evaluate).__name__}")
        if start not in STARTS:
            raise ValueError(f"expected start among {STARTS}, got {start!r}")
        self.flat = as_flat(model, include_frozen)
        model = self.flat.model
        self.model, self.score, self.seed = model, evaluate, int(seed)
        if isinstance(base, torch.nn.Module):
            if isinstance(sources, BaseModels):
                raise TypeError("expected base as a row of the BaseModels sources (an int), got a module")
            sources, base = [base, *sources], 0
        if not isinstance(sources, BaseModels):
            sources = model_bases(sources, self.flat)
        if sources.dim != self.flat.dim:
            raise ValueError(f"expected sources of {self.flat.dim} genes for {type(model).__name__}, "
                             f"got {sources.dim} ({sources.reference})")
        if method in BASED and base is None:
            raise ValueError(f"expected a base model for {method!r} (a module or a row of the sources), got none")
        if base is not None and int(base) not in range(sources.count):
            raise ValueError(f"expected base as a row in 0..{sources.count - 1} of the sources, got {base}")
        self.base_row = None if base is None else int(base)
        self.merged_rows = [r for r in range(sources.count) if r != self.base_row]
        groups, self.group_of = layer_groups(self.flat.names, layers_per_group, group_by)
        self.space = RecipeSpace(method, groups, len(self.merged_rows), lam)
        self.sources = sources
        self._resident = (None, None)
        self.row_dtype = np.dtype(np.float64)      # islands keep recipes in float64, whatever engine.dtype
        self.x0 = None if x0 is None else self._checked_x0(x0)
        self.searched = self._searched(search)
        first = self.x0 if self.x0 is not None else self.space.average_genome() if start == "average" else None
        self._first = None if first is None else first[self.searched]
        super().__init__(self._evaluate_batch, len(self.searched), self.space.lower[self.searched],
                         self.space.upper[self.searched], maximize=maximize, name=name or f"{method} recipe",
                         batched=True, bases=sources, initial=None if first is None else self._known_first)

    def _checked_x0(self, x0) -> np.ndarray:
        x0 = np.asarray(x0, np.float64).reshape(-1)
        if x0.shape != (self.space.dim,) or not np.all(np.isfinite(x0)):
            raise ValueError(f"expected x0 of {self.space.dim} finite genes ({self.space.method} recipe), "
                             f"got shape {x0.shape}")
        outside = np.flatnonzero((x0 < self.space.lower) | (x0 > self.space.upper))
        if outside.size:
            i = outside[0]
            raise ValueError(f"expected x0 within the recipe's box, got {self.space.names[i]} = {x0[i]} outside "
                             f"[{self.space.lower[i]}, {self.space.upper[i]}]")
        return x0

    def _searched(self, search) -> np.ndarray:
        if search is None:
            return np.arange(self.space.dim)
        search = [search] if isinstance(search, str) else list(search)
        if not search:
            raise ValueError("expected at least one gene kind or name to search, got none")
        kinds = [name.rsplit("/", 1)[-1].split(" ")[0] for name in self.space.names]
        for entry in search:
            if entry not in kinds and entry not in self.space.names:
                raise ValueError(f"expected genes to search among kinds {sorted(set(kinds))} or gene names, "
                                 f"got {entry!r}")
        chosen = [i for i, (name, kind) in enumerate(zip(self.space.names, kinds)) if name in search or kind in search]
        return np.array(chosen, np.int64)

    def full_genome(self, genome) -> np.ndarray:
        """The whole recipe of a searched ``genome``: its genes where searched, ``x0``'s
        (or the average recipe's) elsewhere."""
        genome = np.asarray(genome, np.float64).reshape(-1)
        if len(self.searched) == self.space.dim:
            return genome
        if genome.shape != (len(self.searched),):
            raise ValueError(f"expected a recipe of {len(self.searched)} searched genes, got shape {genome.shape}")
        full = (self.x0 if self.x0 is not None else self.space.average_genome()).copy()
        full[self.searched] = genome
        return full

    def _known_first(self, rng: np.random.Generator, n: int) -> np.ndarray:
        lower, upper = self.space.lower[self.searched], self.space.upper[self.searched]
        genomes = rng.uniform(lower, upper, (n, len(self.searched)))
        genomes[0] = self._first
        return genomes

    def _source_tensor(self) -> torch.Tensor:
        """The sources on the model's device: a view of the (node-shared) host bases on the
        CPU, one copy per process on a GPU; renewed when other bases were attached."""
        array = self.sources.array
        held, tensor = self._resident
        if held is not array:
            tensor = as_tensor(array, self.flat.device)
            self._resident = (array, tensor)
        return tensor

    def materialize(self, genome) -> dict:
        """Write the model ``genome``'s recipe merges into the model; returns the recipe."""
        recipe = self.space.decode(self.full_genome(genome))
        sources = self._source_tensor()
        base = None if self.base_row is None else sources[self.base_row]
        groups = list(recipe["groups"].values())
        lam = recipe.get("lambda", 1.0)
        with torch.no_grad():
            for index, (start, stop) in enumerate(zip(self.flat.offsets[:-1], self.flat.offsets[1:])):
                part = slice(int(start), int(stop))
                group = groups[self.group_of[index]]
                self.flat.flat[part] = merge_part(
                    self.space.method, sources[:, part][self.merged_rows], None if base is None else base[part],
                    group.get("weights"), lam=lam, density=group.get("density", 1.0), t=group.get("t", 0.5),
                    generator=dare_generator(self.seed, index, self.flat.device),
                    epsilon=group.get("epsilon", 0.0), gamma=group.get("gamma", 0.0),
                    scale=group.get("scale", 1.0), source=group.get("source", 0))
        return recipe

    def _evaluate_batch(self, genomes: np.ndarray) -> np.ndarray:
        return score_each(self.model, self.score, genomes, self.materialize)
