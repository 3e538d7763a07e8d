"""Recipes to mergekit YAML and back: an evolved recipe written as a configuration mergekit
reproduces (:func:`recipe_yaml`, written by :func:`~.hf.save_best` beside
``mpievo_merge.json``), and a mergekit configuration as the start of a search
(:func:`recipe_start`: its values as ``x0`` of a :class:`~.recipes.RecipeProblem`).

A recipe's per-group values become lists of ``{filter, value}``: a layer group's filter
is each of its layers' name prefix (``model.layers.3.``), a tensor outside the layers (or
of a group that splits a layer) is named whole. Recipe methods map to mergekit's:
``linear``, ``task_arithmetic``, ``ties``, ``della``, ``breadcrumbs``, ``slerp`` (the
first source as ``base_model``, at ``t = 0``), ``model_stock`` (mergekit has no ratio
scale: a comment says where a scale is not 1), ``dare`` as ``dare_linear`` with
``rescale: false`` and the weights divided by the density (mpievo's ``1/density``
rescale), ``passthrough`` as one slice per layer (a comment says where a group that
is not a whole layer or the tensors outside the layers chose otherwise). DARE and
DELLA masks are random in both tools: the drawn masks differ.
"""

from __future__ import annotations

import re
import warnings
from typing import Sequence

import numpy as np

from .mergekit_config import MergeConfig, MergeConfigError, lookup
from .recipes import EPSILON_MARGIN, RecipeProblem

#: the file written beside a merged model
YAML_FILE = "mergekit_config.yml"
#: recipe method -> mergekit method
TO_MERGEKIT = {"linear": "linear", "task_arithmetic": "task_arithmetic", "ties": "ties", "dare": "dare_linear",
               "della": "della", "breadcrumbs": "breadcrumbs", "slerp": "slerp", "model_stock": "model_stock",
               "passthrough": "passthrough"}
FROM_MERGEKIT = {v: k for k, v in TO_MERGEKIT.items()}
_PREFIX = re.compile(r"^(.*?\.\d+\.)")


def source_paths(problem: RecipeProblem) -> list[str]:
    """The directories of ``problem``'s source rows (:func:`~.hf.hf_bases` records them),
    else ``source 0``, ``source 1``, ... to be replaced by hand."""
    reference = str(problem.sources.reference)
    if reference.startswith("hf:"):
        paths = reference[3:].split(",")
        if len(paths) == problem.sources.count:
            return paths
    return [f"source {i}" for i in range(problem.sources.count)]


def group_filters(names: Sequence[str], group_of) -> list[list[str]]:
    """Per group, the mergekit filters that select its tensors and no other: a layer's
    name prefix where the group holds the whole layer, else whole tensor names.

    Example:
        >>> group_filters(["m.0.a", "m.0.b", "m.1.a", "head"], [0, 0, 1, 2])
        [['m.0.'], ['m.1.a'], ['head']]
    """
    layers: dict[str, set] = {}
    for name, group in zip(names, group_of):
        match = _PREFIX.match(name)
        if match:
            layers.setdefault(match.group(1), set()).add(int(group))
    filters: list[list[str]] = [[] for _ in range(int(max(group_of)) + 1)]
    for name, group in zip(names, group_of):
        match = _PREFIX.match(name)
        if match and len(layers[match.group(1)]) == 1:
            if match.group(1) not in filters[group]:
                filters[group].append(match.group(1))
        else:
            filters[group].append(name)
    return filters


def _conditions(filters: list[list[str]], values: list[float]) -> list[dict]:
    whole = [(f, v) for fs, v in zip(filters, values) for f in fs]
    whole.sort(key=lambda fv: -len(fv[0]))           # a longer name first: a filter is a substring match
    return [{"filter": f, "value": float(v)} for f, v in whole]


def recipe_yaml(problem: RecipeProblem, genome, paths: Sequence[str] | None = None, score=None) -> str:
    """The mergekit YAML of ``genome``'s recipe over ``problem``'s sources (``paths``:
    their directories, default :func:`source_paths`).

    Example:
        >>> print(recipe_yaml(problem, result.x))               # doctest: +SKIP
    """
    import yaml

    recipe = problem.space.decode(problem.full_genome(genome))
    paths = list(paths) if paths is not None else source_paths(problem)
    method = recipe["method"]
    filters = group_filters(problem.flat.names, problem.group_of)
    groups = list(recipe["groups"].values())
    merged = [paths[r] for r in problem.merged_rows]
    notes = [f"written by mpievo from a {method} recipe" + ("" if score is None else f" (score {score})")]
    out: dict = {"merge_method": TO_MERGEKIT[method]}
    if method == "passthrough":
        out["slices"], more = _passthrough_slices(problem, groups, merged)
        notes += more
    elif method == "slerp":
        out["models"] = [{"model": m} for m in merged]
        out["base_model"] = merged[0]
        out["parameters"] = {"t": _conditions(filters, [g["t"] for g in groups])}
    else:
        models = []
        for i, model in enumerate(merged):
            params = {}
            if method != "model_stock":
                density = [g.get("density", 1.0) for g in groups]
                weights = [g["weights"][i] / (density[k] if method == "dare" else 1.0) for k, g in enumerate(groups)]
                params["weight"] = _conditions(filters, weights)
                for key in ("density", "epsilon", "gamma"):
                    if key in groups[0]:
                        params[key] = _conditions(filters, [g[key] for g in groups])
            models.append({"model": model, "parameters": params} if params else {"model": model})
        out["models"] = models
        if problem.base_row is not None:
            out["base_model"] = paths[problem.base_row]
        parameters = {}
        if "lambda" in recipe:
            parameters["lambda"] = float(recipe["lambda"])
        if method == "dare":
            parameters["rescale"] = False
        if parameters:
            out["parameters"] = parameters
        scales = [g["scale"] for g in groups if method == "model_stock"]
        if any(abs(s - 1) > 1e-12 for s in scales):
            notes.append(f"model stock ratio scales {', '.join(f'{s:.4g}' for s in scales)} per group: mergekit's "
                         "model_stock has none, so it reproduces this merge only where they are 1")
    out["dtype"] = str(problem.flat.flat.dtype).replace("torch.", "")
    head = "".join(f"# {line}\n" for line in notes)
    return head + yaml.safe_dump(out, sort_keys=False, default_flow_style=None)


def _passthrough_slices(problem: RecipeProblem, groups: list[dict], merged: list[str]):
    per_layer: dict[int, set] = {}
    outside = set()
    for name, group in zip(problem.flat.names, problem.group_of):
        match = re.search(r"\.(\d+)\.", name)
        chosen = groups[int(group)]["source"]
        (per_layer.setdefault(int(match.group(1)), set()) if match else outside).add(chosen)
    notes = []
    slices = []
    for layer in sorted(per_layer):
        chosen = sorted(per_layer[layer])
        if len(chosen) > 1:
            notes.append(f"layer {layer} takes tensors of sources {chosen}: mergekit's passthrough takes a whole "
                         f"layer, here from source {chosen[0]}")
        slices.append({"sources": [{"model": merged[chosen[0]], "layer_range": [layer, layer + 1]}]})
    ends = {min(per_layer[min(per_layer)]), min(per_layer[max(per_layer)])}
    if not outside <= ends:
        notes.append(f"the tensors outside the layers take source {sorted(outside)}: mergekit takes them from "
                     "the first and last slices' sources")
    return slices, notes


def recipe_start(config: MergeConfig, problem: RecipeProblem) -> np.ndarray:
    """The whole recipe (``problem.space.dim`` genes) that ``config`` sets, to pass as
    ``RecipeProblem(..., x0=...)``: per group, its parameters read at the group's first
    tensor (with its gradient position); ``config``'s models in order are the problem's
    merged rows, its ``base_model`` the base row. Values outside the genes' box are
    clipped, with a warning.

    Example:
        >>> x0 = recipe_start(read_config("ties.yml"), problem)          # doctest: +SKIP
        >>> problem = RecipeProblem(model, score, bases, method="ties", base=0, x0=x0,
        ...                         search=["weight"])                     # doctest: +SKIP

    Raises:
        MergeConfigError: a method of another recipe, slices, other model counts, or a
            flag the recipe cannot follow (``normalize``, ``rescale`` other than its own).
    """
    space = problem.space
    method = FROM_MERGEKIT.get(config.merge_method)
    if method != space.method:
        raise MergeConfigError(f"{config.path}: expected merge_method {TO_MERGEKIT[space.method]} for a "
                               f"{space.method} recipe, got {config.merge_method}")
    if config.models is None:
        raise MergeConfigError(f"{config.path}: expected 'models' to start a recipe from, got slices")
    models = [m for m in config.models if m.model != config.base_model or method in ("slerp", "linear")]
    if method == "slerp":
        models.sort(key=lambda m: m.model != config.base_model)
    if len(models) != len(problem.merged_rows):
        raise MergeConfigError(f"{config.path}: expected {len(problem.merged_rows)} models besides the base "
                               f"(the problem's sources), got {len(models)}")
    defaults = {"linear": ("normalize", True), "dare": ("rescale", False), "ties": ("normalize", True)}
    for key in ("normalize", "rescale"):
        value = config.parameters.get(key)
        if value is not None and defaults.get(method) != (key, value):
            raise MergeConfigError(f"{config.path}: expected no {key!r} for a {method} recipe (it has its own), "
                                   f"got {key}: {value}")
    layers = sorted({int(m.group(1)) for m in map(re.compile(r"\.(\d+)\.").search, problem.flat.names) if m})
    values = {}
    for index, group in enumerate(space.groups):
        tensor = problem.flat.names[int(np.flatnonzero(problem.group_of == index)[0])]
        match = re.search(r"\.(\d+)\.", tensor)
        t = 0.0 if match is None else (layers.index(int(match.group(1))) / (len(layers) - 1) if len(layers) > 1
                                       else 1.0)
        density = None
        for i, model in enumerate(models):
            def get(name, default):
                value = lookup(name, tensor, t, model.parameters, None, config.parameters)
                return default if value is None else float(value)

            values[f"{group}/weight {i}"] = get("weight", 1.0)
            density = get("density", 1.0)
        values[f"{group}/density"] = density
        if method == "della":
            eps = lookup("epsilon", tensor, t, models[-1].parameters, None, config.parameters)
            d = density if density < 1 else 0.5
            values[f"{group}/epsilon"] = (0.15 if eps is None else float(eps)) / (EPSILON_MARGIN * min(d, 1 - d))
        values[f"{group}/gamma"] = float(lookup("gamma", tensor, t, models[-1].parameters, None,
                                                config.parameters) or 0.01)
        values[f"{group}/t"] = float(lookup("t", tensor, t, config.parameters) or 0.5)
        values[f"{group}/scale"] = 1.0
        values[f"{group}/source"] = 0.0
    values["lambda"] = float(lookup("lambda", "", 0.0, config.parameters) or 1.0)
    x0 = np.array([values[name] for name in space.names])
    clipped = np.clip(x0, space.lower, space.upper)
    changed = np.flatnonzero(clipped != x0)
    if changed.size:
        warnings.warn(f"mergekit values outside the recipe's box clipped: "
                      f"{', '.join(f'{space.names[i]} {x0[i]:.4g}' for i in changed[:5])}", stacklevel=2)
    return clipped


def write_recipe_yaml(problem: RecipeProblem, genome, directory, score=None):
    """Write :func:`recipe_yaml` as ``directory/mergekit_config.yml``; returns its path.

    Example:
        >>> write_recipe_yaml(problem, result.x, "merged")      # doctest: +SKIP
    """
    from pathlib import Path

    path = Path(directory) / YAML_FILE
    path.write_text(recipe_yaml(problem, genome, score=None if score is None else float(score)))
    return path
