"""A mergekit configuration applied to Hugging Face directories (``mpievo merge``).

:func:`plan_merge` checks everything before a tensor is read: every model a local
directory of one architecture, slices within their models' layers and of equal lengths,
a base where the method needs one, every required parameter set for every tensor, a
tokenizer source that exists and fits the vocabulary. :func:`apply_config` then merges
tensor by tensor (read from the sources' safetensors, cast to ``dtype``, merged in
float32 with :mod:`.merge_methods` / :mod:`.merge`, cast to ``out_dtype`` or ``dtype``)
and writes a directory ``from_pretrained`` loads: ``model.safetensors``, the base's
``config.json`` (its layer count and dtype updated), the tokenizer files and the base's
generation config, and the configuration as ``mergekit_config.yml``.

Output tensors follow mergekit's plan: the tensors before the first layer from the
first slice's sources, the layers slice by slice (a slice of ``n`` layers reads the
gradient position ``t = i / (n - 1)``), the tensors after the layers from the last
slice's sources; outside the layers ``t = 0``. Random masks (DARE, DELLA) are keyed by
``(seed, tensor)`` as in :mod:`.merge`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from .merge import slerp_tensor
from .merge_methods import GTA, gta_tensor, model_stock_tensor, work_dtype
from .mergekit_config import METHOD_PARAMETERS, MergeConfig, MergeConfigError, Slice, Source, lookup

#: files copied from the tokenizer source (tokenizer) and the base (the rest), when present
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer.model",
                   "added_tokens.json", "merges.txt", "vocab.json", "chat_template.jinja", "chat_template.json")
BASE_FILES = ("generation_config.json",)
DEFAULTS = {"normalize": None, "int8_mask": False, "rescale": None, "lambda": 1.0, "filter_wise": False,
            "density": 1.0, "gamma": 0.01, "epsilon": 0.15, "scale": None}
_LAYER = re.compile(r"^(.*?\.)(\d+)(\..*)$")
_NEEDS_BASE = ("slerp", "model_stock", *GTA)


@dataclass
class Task:
    """One output tensor: ``name`` merged from ``inputs`` (``(model, tensor name)``), the
    base's index among them (or None), per-source and merge parameters."""

    name: str
    inputs: list[tuple[str, str]]
    base: int | None
    per_source: list[dict]
    settings: dict


@dataclass
class Plan:
    """What :func:`apply_config` will do: the tasks in output order, the output layer
    count, the model whose config the output takes and the tokenizer's source."""

    config: MergeConfig
    tasks: list[Task]
    layers: int
    base: str
    tokenizer: str
    models: "_Models"


def _layer_count(config: dict) -> int:
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        if isinstance(config.get(key), int):
            return config[key]
    raise MergeConfigError(f"expected a layer count (num_hidden_layers) in config.json, got keys {sorted(config)}")


class _Models:
    """The models a configuration names: config.json, tensor headers, reads."""

    def __init__(self, config: MergeConfig):
        self.config, self.info, self.files = config, {}, {}

    def check(self, model: str, line: int | None) -> dict:
        if model in self.info:
            return self.info[model]
        where = f"{self.config.path}:{line}" if line else self.config.path
        path = Path(model)
        if not (path / "config.json").is_file():
            raise MergeConfigError(f"{where}: expected a local model directory with config.json, got {model!r} "
                                   "(missing; mpievo merge downloads nothing)")
        data = json.loads((path / "config.json").read_text())
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise MergeConfigError(f"{where}: expected *.safetensors in {model!r}, got none")
        from safetensors import safe_open

        headers = {}
        for file in files:
            with safe_open(str(file), "pt") as handle:
                for name in handle.keys():
                    headers[name] = (tuple(handle.get_slice(name).get_shape()), file)
        arch = ",".join(data.get("architectures") or [data.get("model_type", "unknown")])
        self.info[model] = {"config": data, "arch": arch, "layers": _layer_count(data), "headers": headers}
        return self.info[model]

    def read(self, model: str, name: str, dtype: torch.dtype | None) -> torch.Tensor:
        from safetensors import safe_open

        file = self.info[model]["headers"][name][1]
        with safe_open(str(file), "pt") as handle:
            tensor = handle.get_tensor(name)
        return tensor if dtype is None else tensor.to(dtype)


def _normalized_slices(config: MergeConfig, models: _Models) -> list[Slice]:
    if config.slices is not None:
        return config.slices
    sources = [Source(s.model, s.line, s.parameters, (0, models.check(s.model, s.line)["layers"]))
               for s in config.models]
    if (config.base_model and config.merge_method in _NEEDS_BASE
            and config.base_model not in [s.model for s in sources]):
        line = config.lines.get("base_model")
        sources.append(Source(config.base_model, line, {}, (0, models.check(config.base_model, line)["layers"])))
    return [Slice(sources, config.lines.get("models", 0))]


def plan_merge(config: MergeConfig) -> Plan:
    """Everything :func:`apply_config` will do, checked before a tensor is read.

    Example:
        >>> plan = plan_merge(read_config("merge.yml"))         # doctest: +SKIP
        >>> len(plan.tasks), plan.layers                        # doctest: +SKIP

    Raises:
        MergeConfigError: a missing model, models of different architectures, a slice
            beyond its model's layers or of unequal lengths, a missing base or required
            parameter, a tokenizer source that is missing or of another vocabulary size.
    """
    models = _Models(config)
    method = config.merge_method
    slices = _normalized_slices(config, models)
    first = None
    for piece in slices:
        for source in piece.sources:
            info = models.check(source.model, source.line)
            first = first or (source.model, info["arch"])
            if info["arch"] != first[1]:
                raise MergeConfigError(f"{config.path}:{source.line}: expected every model of architecture {first[1]} "
                                       f"(as {first[0]!r}) for {method}, got {info['arch']} in {source.model!r}")
            start, stop = source.layer_range
            if stop > info["layers"]:
                raise MergeConfigError(f"{config.path}:{source.line}: expected layer_range within the "
                                       f"{info['layers']} layers of {source.model!r}, got [{start}, {stop}]")
        lengths = {s.layer_range[1] - s.layer_range[0] for s in piece.sources}
        if len(lengths) != 1:
            raise MergeConfigError(f"{config.path}:{piece.line}: expected the sources of a slice to have as many "
                                   f"layers each, got {sorted(lengths)}")
    reference = slices[0].sources[0].model
    names = list(models.info[reference]["headers"])
    layered = [(m.group(1), int(m.group(2)), m.group(3)) for m in map(_LAYER.match, names) if m]
    layer_names = sorted({(prefix, suffix) for prefix, _, suffix in layered})
    outside = [n for n in names if not _LAYER.match(n)]
    pre, post = _split_outside(outside, models.info[reference]["config"])
    tasks = [_task(config, slices[0], name, [name] * len(slices[0].sources), 0.0) for name in pre]
    index = 0
    for piece in slices:
        count = piece.sources[0].layer_range[1] - piece.sources[0].layer_range[0]
        for offset in range(count):
            t = offset / (count - 1) if count > 1 else 1.0
            for prefix, suffix in layer_names:
                inputs = [f"{prefix}{s.layer_range[0] + offset}{suffix}" for s in piece.sources]
                tasks.append(_task(config, piece, f"{prefix}{index}{suffix}", inputs, t))
            index += 1
    tasks += [_task(config, slices[-1], name, [name] * len(slices[-1].sources), 0.0) for name in post]
    for task in tasks:
        _check_task(config, models, task)
    base = config.base_model or reference
    models.check(base, config.lines.get("base_model"))
    tokenizer = _tokenizer_source(config, models, base)
    return Plan(config, tasks, index, base, tokenizer, models)


def _split_outside(names: list[str], config: dict) -> tuple[list[str], list[str]]:
    """Tensors outside the layers, split into those before the layers (embeddings) and
    after them, by the model's own state dict built on the meta device (by name where
    transformers cannot build it)."""
    import transformers

    try:
        arch = (config.get("architectures") or [""])[0]
        cls = getattr(transformers, arch, None)
        build = cls._from_config if cls is not None else transformers.AutoModelForCausalLM.from_config
        with torch.device("meta"):
            module = build(transformers.AutoConfig.for_model(**config))
        order = list(module.state_dict())
    except Exception:                                      # an architecture transformers cannot build
        order = []
    first_layer = next((i for i, n in enumerate(order) if _LAYER.match(n)), len(order))
    position = {n: i for i, n in enumerate(order)}

    def before(name: str) -> bool:
        if name in position:
            return position[name] < first_layer
        return any(part in name for part in ("embed", "wte", "wpe"))

    pre = [n for n in names if before(n)]
    return pre, [n for n in names if not before(n)]


def _task(config: MergeConfig, piece: Slice, name: str, inputs: list[str], t: float) -> Task:
    method = config.merge_method
    base_model = piece.base_model or config.base_model
    models = [s.model for s in piece.sources]
    base = models.index(base_model) if base_model in models and method in _NEEDS_BASE else None
    merge_level, per_model = METHOD_PARAMETERS[method]
    settings = {p: lookup(p, name, t, piece.parameters, config.parameters) for p in merge_level}
    per_source = []
    for source, tensor in zip(piece.sources, inputs):
        per_source.append({p: lookup(p, tensor, t, source.parameters, piece.parameters, config.parameters)
                           for p in per_model})
    return Task(name, list(zip(models, inputs)), base, per_source, settings)


def _check_task(config: MergeConfig, models: _Models, task: Task) -> None:
    method, where = config.merge_method, config.path
    for model, tensor in task.inputs:
        headers = models.info[model]["headers"]
        if tensor not in headers:
            raise MergeConfigError(f"{where}: expected tensor {tensor!r} in {model!r}, got none")
    shapes = {models.info[m]["headers"][n][0] for m, n in task.inputs}
    if len(shapes) != 1:
        raise MergeConfigError(f"{where}: expected one shape for {task.name!r} across the models, got {sorted(shapes)}")
    if method in _NEEDS_BASE and task.base is None:
        raise MergeConfigError(f"{where}: expected a base_model among the sources for {method}, got "
                               f"{config.base_model!r}")
    others = [i for i in range(len(task.inputs)) if i != task.base]
    if method == "slerp" and len(task.inputs) != 2:
        raise MergeConfigError(f"{where}: expected 2 models for slerp, got {len(task.inputs)}")
    if method == "model_stock" and len(others) < 2:
        raise MergeConfigError(f"{where}: expected at least 2 models besides the base for model_stock, "
                               f"got {len(others)}")
    if method == "passthrough" and len(task.inputs) != 1:
        raise MergeConfigError(f"{where}: expected one source per slice for passthrough, got {len(task.inputs)}")
    if method == "slerp" and task.settings["t"] is None:
        raise MergeConfigError(f"{where}: expected parameter 't' for tensor {task.name!r}, got none")
    if method in GTA or method == "linear":
        for i in (others if method in GTA else range(len(task.inputs))):
            if task.per_source[i]["weight"] is None:
                raise MergeConfigError(f"{where}: expected parameter 'weight' of model {task.inputs[i][0]!r} for "
                                       f"tensor {task.inputs[i][1]!r}, got none")


def _tokenizer_source(config: MergeConfig, models: _Models, base: str) -> str:
    source = config.tokenizer_source
    if source is None or source == "base":
        return base
    where = f"{config.path}:{config.lines.get('tokenizer_source')}"
    path = Path(source)
    if not path.is_dir():
        raise MergeConfigError(f"{where}: expected tokenizer_source 'base' or a model directory, got {source!r} "
                               "(missing)")
    if (path / "config.json").is_file():
        theirs = json.loads((path / "config.json").read_text()).get("vocab_size")
        ours = models.info[base]["config"].get("vocab_size")
        if theirs is not None and ours is not None and theirs != ours:
            raise MergeConfigError(f"{where}: expected a tokenizer_source of the merged model's vocabulary "
                                   f"({ours} tokens), got {theirs} in {source!r} (mpievo does not rebuild embeddings)")
    return source


def _merge(method: str, task: Task, stack: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    s, per = task.settings, task.per_source
    if method == "passthrough":
        scale = per[0]["scale"]
        return stack[0] if scale is None else stack[0].to(work_dtype(stack)) * scale
    if method == "linear":
        x = stack.to(work_dtype(stack))
        w = torch.tensor([p["weight"] for p in per], dtype=x.dtype).reshape((-1,) + (1,) * (x.dim() - 1))
        merged = (w * x).sum(0)
        return merged / w.sum(0) if s["normalize"] in (None, True) else merged
    base = stack[task.base]
    others = [i for i in range(len(per)) if i != task.base]
    if method == "slerp":
        return slerp_tensor(float(s["t"]), base, stack[others[0]])
    if method == "model_stock":
        return model_stock_tensor(stack[others], base, filter_wise=bool(s["filter_wise"]))
    sparsifier, consensus, normalize, rescale = GTA[method]
    value = {k: [DEFAULTS[k] if per[i].get(k) is None else per[i][k] for i in others]
             for k in ("weight", "density", "gamma", "epsilon")}
    return gta_tensor(stack[others], base, value["weight"], sparsifier=sparsifier, consensus=consensus,
                      normalize=normalize if s["normalize"] is None else bool(s["normalize"]),
                      rescale=rescale if s["rescale"] is None else bool(s["rescale"]),
                      lam=float(s["lambda"] if s["lambda"] is not None else 1.0),
                      density=value["density"], gamma=value["gamma"], epsilon=value["epsilon"],
                      generator=generator)


def apply_config(config: MergeConfig, out: str | os.PathLike, *, seed: int = 0) -> Path:
    """Merge as ``config`` says into the Hugging Face directory ``out`` (module docstring).

    Example:
        >>> apply_config(read_config("merge.yml"), "merged")    # doctest: +SKIP

    Raises:
        as :func:`plan_merge`, before any tensor is read.
    """
    from safetensors.torch import save_file

    from .merge import dare_generator

    plan = plan_merge(config)
    out = Path(out)
    for model in plan.models.info:
        if out.resolve() == Path(model).resolve():
            raise MergeConfigError(f"{config.path}: expected an output directory other than the sources, "
                                   f"got {model!r}")
    dtype = getattr(torch, config.dtype) if config.dtype else None
    out_dtype = getattr(torch, config.out_dtype or config.dtype) if (config.out_dtype or config.dtype) else None
    tensors = {}
    for index, task in enumerate(plan.tasks):
        stack = torch.stack([plan.models.read(m, n, dtype) for m, n in task.inputs])
        merged = _merge(config.merge_method, task, stack, dare_generator(seed, index, "cpu"))
        tensors[task.name] = merged.to(out_dtype or stack.dtype).contiguous()
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.safetensors"):
        stale.unlink()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_config(plan, out, config.out_dtype or config.dtype)
    copy_side_files(out, plan.tokenizer, plan.base)
    (out / "mergekit_config.yml").write_text(config.text)
    return out


def copy_side_files(out: str | os.PathLike, tokenizer: str | os.PathLike, base: str | os.PathLike) -> list[str]:
    """Copy the tokenizer files (:data:`TOKENIZER_FILES`) of directory ``tokenizer`` and
    the other files of directory ``base`` (:data:`BASE_FILES`: the generation config)
    that exist into ``out``; returns the names copied.

    Example::

        copy_side_files("merged", tokenizer="models/base", base="models/base")   # ['tokenizer.json', ...]
    """
    out, copied = Path(out), []
    for folder, names in ((Path(tokenizer), TOKENIZER_FILES), (Path(base), BASE_FILES)):
        for name in names:
            if (folder / name).is_file():
                shutil.copy(folder / name, out / name)
                copied.append(name)
    return copied


def _write_config(plan: Plan, out: Path, dtype: str | None) -> None:
    data = dict(plan.models.info[plan.base]["config"])
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        if isinstance(data.get(key), int):
            data[key] = plan.layers
            break
    if isinstance(data.get("layer_types"), list) and len(data["layer_types"]) != plan.layers:
        data["layer_types"] = (data["layer_types"] * plan.layers)[:plan.layers]
    if dtype:
        data["torch_dtype"] = dtype
        if "dtype" in data:
            data["dtype"] = dtype
    (out / "config.json").write_text(json.dumps(data, indent=2) + "\n")
