"""mergekit YAML configurations read as mergekit reads them, refused with their line where
mpievo cannot apply them.

:func:`read_config` parses a file (PyYAML, keeping each node's line) into a
:class:`MergeConfig`: ``merge_method``, ``models`` (each a ``model`` and its
``parameters``) or ``slices`` (each ``sources`` of ``model`` + ``layer_range``, a
``base_model``, ``parameters``), ``base_model``, ``dtype``, ``out_dtype``,
``tokenizer_source`` and the merge's ``parameters``. An unknown key, a parameter the
method does not read, a value of the wrong kind or a method mpievo lacks is refused with
the file and line.

A parameter's value is a number (or bool), a gradient (a list of numbers, interpolated
over a slice's layers: layer ``i`` of ``n`` reads ``t = i / (n - 1)``; tensors outside
the layers read ``t = 0``) or a list of ``{filter, value}`` (the first whose ``filter``
is a substring of the tensor's name, or has none, applies). :func:`evaluate_setting` and
:func:`lookup` are mergekit's ``evaluate_setting`` and ``ConfigReader.parameter``: a
model's own ``parameters`` first, then its slice's, then the merge's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

#: mergekit methods mpievo applies -> (the merge's parameters, the per-model parameters)
_GTA_GLOBAL = ("int8_mask", "normalize", "rescale", "lambda")
METHOD_PARAMETERS = {
    "linear": (("normalize",), ("weight",)),
    "slerp": (("t",), ()),
    "model_stock": (("filter_wise",), ()),
    "passthrough": ((), ("scale",)),
    "task_arithmetic": (_GTA_GLOBAL, ("weight", "density")),
    "ties": (_GTA_GLOBAL, ("weight", "density")),
    "dare_ties": (_GTA_GLOBAL, ("weight", "density")),
    "dare_linear": (_GTA_GLOBAL, ("weight", "density")),
    "breadcrumbs": (_GTA_GLOBAL, ("weight", "density", "gamma")),
    "breadcrumbs_ties": (_GTA_GLOBAL, ("weight", "density", "gamma")),
    "della": (_GTA_GLOBAL, ("weight", "density", "epsilon")),
    "della_linear": (_GTA_GLOBAL, ("weight", "density", "epsilon")),
}
#: mergekit methods mpievo does not apply
UNSUPPORTED_METHODS = ("nuslerp", "multislerp", "karcher", "sce", "arcee_fusion", "nearswap", "ram")
#: mergekit keys mpievo does not apply (refused with their line)
UNSUPPORTED_KEYS = {"modules": "per-module merges", "tokenizer": "tokenizer surgery (use tokenizer_source)",
                    "chat_template": "chat templates", "residual_weight": "residual weights"}
DTYPES = ("float16", "bfloat16", "float32", "float64")
_TOP = ("merge_method", "models", "slices", "base_model", "dtype", "out_dtype", "tokenizer_source", "parameters")


class MergeConfigError(ValueError):
    """A mergekit configuration mpievo refuses (the message names the file and line)."""


@dataclass
class Source:
    """A model of ``models`` or a source of a slice (``layer_range`` None: all layers)."""

    model: str
    line: int
    parameters: dict = field(default_factory=dict)
    layer_range: tuple[int, int] | None = None


@dataclass
class Slice:
    """A slice of the output: layers merged from ``sources``."""

    sources: list[Source]
    line: int
    parameters: dict = field(default_factory=dict)
    base_model: str | None = None


@dataclass
class MergeConfig:
    """A parsed mergekit configuration (:func:`read_config`); ``lines`` maps top-level
    keys to their line, ``path`` is the file read.

    Example:
        >>> config = parse_config("merge_method: linear\\nmodels:\\n  - model: a\\n"
        ...                       "    parameters: {weight: 1.0}\\n")
        >>> config.merge_method, config.models[0].model
        ('linear', 'a')
    """

    merge_method: str
    models: list[Source] | None = None
    slices: list[Slice] | None = None
    base_model: str | None = None
    dtype: str | None = None
    out_dtype: str | None = None
    tokenizer_source: str | None = None
    parameters: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)
    path: str = "<string>"
    text: str = ""


def evaluate_setting(tensor_name: str, setting, t: float = 0.0):
    """A parameter's value for ``tensor_name`` at gradient position ``t`` (None: no
    condition applies); mergekit's ``evaluate_setting``.

    Example:
        >>> evaluate_setting("model.layers.3.mlp.up_proj.weight", [0.0, 1.0], t=0.25)
        0.25
        >>> evaluate_setting("x.mlp.w", [{"filter": "self_attn", "value": 1}, {"value": 0.5}])
        0.5
    """
    if isinstance(setting, (bool, int, float, str)):
        return setting
    if all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in setting):
        scaled = t * (len(setting) - 1)
        i0 = int(scaled)
        i1 = min(len(setting) - 1, i0 + 1)
        frac = scaled - i0
        return (1 - frac) * setting[i0] + frac * setting[i1]
    if all(isinstance(e, (bool, int, float, str)) for e in setting):
        return setting[int(t * (len(setting) - 1))]
    for cond in setting:
        filt = cond.get("filter")
        if filt is None or filt == "*" or (tensor_name and filt in tensor_name):
            return evaluate_setting(tensor_name, cond["value"], t)
    return None


def lookup(name: str, tensor_name: str, t: float, *levels: dict | None):
    """The first value of parameter ``name`` among ``levels`` (a model's parameters, its
    slice's, the merge's) that applies to ``tensor_name`` (None: none does).

    Example:
        >>> lookup("weight", "h.0.attn.w", 0.0, {"weight": 0.3}, None, {"weight": 1.0})
        0.3
    """
    for params in levels:
        if params and name in params:
            value = evaluate_setting(tensor_name, params[name], t)
            if value is not None:
                return value
    return None


# --- parsing with lines ----------------------------------------------------------------

def read_config(path: str | os.PathLike) -> MergeConfig:
    """The mergekit configuration in the YAML file ``path`` (checked as the module says).

    Example:
        >>> config = read_config("merge.yml")                  # doctest: +SKIP

    Raises:
        FileNotFoundError: no such file.
        MergeConfigError: malformed YAML, an unknown or unsupported key or method, a
            parameter the method does not read, a value of the wrong kind (file, line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"expected a mergekit YAML file, got {path} (missing)")
    return parse_config(path.read_text(), str(path))


def parse_config(text: str, where: str = "<string>") -> MergeConfig:
    """:func:`read_config` of YAML ``text`` (``where`` names it in errors).

    Example:
        >>> parse_config("merge_method: slerp\\nmodels: [{model: a}, {model: b}]\\n"
        ...              "base_model: a\\nparameters: {t: 0.5}\\n").parameters
        {'t': 0.5}
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise MergeConfigError(f"{where}{line}: expected valid YAML, got {error}") from None
    reader = _Reader(where)
    top = reader.mapping(root, "the configuration", _TOP)
    if "merge_method" not in top:
        raise MergeConfigError(f"{where}: expected a merge_method, got none")
    method = reader.string(top["merge_method"], "merge_method")
    if method not in METHOD_PARAMETERS:
        known = ", ".join(METHOD_PARAMETERS)
        what = "a mergekit method mpievo does not apply" if method in UNSUPPORTED_METHODS else "unknown"
        raise MergeConfigError(f"{reader.at(top['merge_method'])}: expected merge_method among {known}, "
                               f"got {method!r} ({what})")
    reader.method = method
    config = MergeConfig(merge_method=method, path=where, text=text,
                         lines={k: v.start_mark.line + 1 for k, v in top.items()})
    for key in ("base_model", "tokenizer_source"):
        if key in top:
            setattr(config, key, reader.string(top[key], key))
    if config.tokenizer_source == "union":
        raise MergeConfigError(f"{reader.at(top['tokenizer_source'])}: expected tokenizer_source 'base' or a "
                               "model directory, got 'union' (mpievo does not build a union tokenizer)")
    for key in ("dtype", "out_dtype"):
        if key in top:
            value = reader.string(top[key], key)
            if value not in DTYPES:
                raise MergeConfigError(f"{reader.at(top[key])}: expected {key} among {DTYPES}, got {value!r}")
            setattr(config, key, value)
    if "parameters" in top:
        config.parameters = reader.parameters(top["parameters"], "the merge", model_level=False)
    if ("models" in top) == ("slices" in top):
        raise MergeConfigError(f"{where}: expected exactly one of 'models' and 'slices', got "
                               f"{'both' if 'models' in top else 'neither'}")
    if "models" in top:
        config.models = [reader.source(node, with_range=False) for node in reader.sequence(top["models"], "models")]
    else:
        config.slices = [reader.slice(node) for node in reader.sequence(top["slices"], "slices")]
    return config


class _Reader:
    def __init__(self, where: str):
        self.where, self.method = where, None

    def at(self, node) -> str:
        return f"{self.where}:{node.start_mark.line + 1}"

    def value(self, node):
        import yaml

        return yaml.SafeLoader("").construct_object(node, deep=True)

    def mapping(self, node, what: str, allowed) -> dict:
        import yaml

        if not isinstance(node, yaml.MappingNode):
            raise MergeConfigError(f"{self.at(node)}: expected a mapping for {what}, got {self._kind(node)}")
        out = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in UNSUPPORTED_KEYS:
                raise MergeConfigError(f"{self.at(key_node)}: expected a key mpievo applies in {what}, got "
                                       f"{key!r} ({UNSUPPORTED_KEYS[key]} are not supported)")
            if key not in allowed:
                raise MergeConfigError(f"{self.at(key_node)}: expected a key among {', '.join(allowed)} in {what}, "
                                       f"got unknown key {key!r}")
            if key in out:
                raise MergeConfigError(f"{self.at(key_node)}: expected each key once in {what}, got {key!r} twice")
            out[key] = value_node
        return out

    def sequence(self, node, what: str) -> list:
        import yaml

        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise MergeConfigError(f"{self.at(node)}: expected a non-empty list for {what}, got {self._kind(node)}")
        return node.value

    def string(self, node, what: str) -> str:
        value = self.value(node)
        if not isinstance(value, str) or not value:
            raise MergeConfigError(f"{self.at(node)}: expected a name or path for {what}, got {value!r}")
        return value

    @staticmethod
    def _kind(node) -> str:
        return {"MappingNode": "a mapping", "SequenceNode": "a list"}.get(type(node).__name__,
                                                                        f"{node.value!r}" if node.value else "nothing")

    def source(self, node, *, with_range: bool) -> Source:
        keys = ("model", "parameters", "layer_range") if with_range else ("model", "parameters")
        what = "a slice source" if with_range else "a model of 'models'"
        entry = self.mapping(node, what, keys)
        if "model" not in entry:
            raise MergeConfigError(f"{self.at(node)}: expected a 'model' in {what}, got none")
        source = Source(self.string(entry["model"], "model"), node.start_mark.line + 1)
        if "parameters" in entry:
            source.parameters = self.parameters(entry["parameters"], f"model {source.model!r}", model_level=True)
        if with_range:
            if "layer_range" not in entry:
                raise MergeConfigError(f"{self.at(node)}: expected a 'layer_range' in {what}, got none")
            value = self.value(entry["layer_range"])
            if (not isinstance(value, list) or len(value) != 2 or not all(type(v) is int for v in value)
                    or not 0 <= value[0] < value[1]):
                raise MergeConfigError(f"{self.at(entry['layer_range'])}: expected layer_range [start, stop] with "
                                       f"0 <= start < stop, got {value!r}")
            source.layer_range = (value[0], value[1])
        return source

    def slice(self, node) -> Slice:
        entry = self.mapping(node, "a slice", ("sources", "parameters", "base_model"))
        if "sources" not in entry:
            raise MergeConfigError(f"{self.at(node)}: expected 'sources' in a slice, got none")
        out = Slice([self.source(s, with_range=True) for s in self.sequence(entry["sources"], "sources")],
                    node.start_mark.line + 1)
        if "parameters" in entry:
            out.parameters = self.parameters(entry["parameters"], "a slice", model_level=False)
        if "base_model" in entry:
            out.base_model = self.string(entry["base_model"], "base_model")
        return out

    def parameters(self, node, what: str, *, model_level: bool) -> dict:
        merge_level, per_model = METHOD_PARAMETERS[self.method]
        allowed = per_model if model_level else merge_level + per_model
        import yaml

        if not isinstance(node, yaml.MappingNode):
            raise MergeConfigError(f"{self.at(node)}: expected a mapping of parameters for {what}, "
                                   f"got {self._kind(node)}")
        out = {}
        for key_node, value_node in node.value:
            name = key_node.value
            if name not in allowed:
                hint = (" (a parameter of the whole merge, not of one model)" if name in merge_level
                        else f" ({self.method} reads {', '.join(merge_level + per_model) or 'none'})")
                raise MergeConfigError(f"{self.at(key_node)}: expected a parameter {self.method} reads for {what}, "
                                       f"got {name!r}{hint}")
            out[name] = self.setting(value_node, name)
        return out

    def setting(self, node, name: str):
        import yaml

        if isinstance(node, yaml.ScalarNode):
            value = self.value(node)
            if not isinstance(value, (bool, int, float)):
                raise MergeConfigError(f"{self.at(node)}: expected a number or bool for {name!r}, got {value!r}")
            return value
        if isinstance(node, yaml.SequenceNode) and node.value:
            if all(isinstance(e, yaml.ScalarNode) for e in node.value):
                values = [self.setting(e, name) for e in node.value]
                if any(isinstance(v, bool) for v in values) and not all(isinstance(v, bool) for v in values):
                    raise MergeConfigError(f"{self.at(node)}: expected a gradient of numbers for {name!r}, "
                                           f"got {values!r}")
                return values
            conditions = []
            for element in node.value:
                entry = self.mapping(element, f"a condition of {name!r}", ("filter", "value"))
                if "value" not in entry:
                    raise MergeConfigError(f"{self.at(element)}: expected a 'value' in a condition of {name!r}, "
                                           "got none")
                condition = {"value": self.setting(entry["value"], name)}
                if isinstance(condition["value"], list) and isinstance(condition["value"][0], dict):
                    raise MergeConfigError(f"{self.at(entry['value'])}: expected a number or gradient as the value "
                                           f"of a condition of {name!r}, got a list of conditions")
                if "filter" in entry:
                    condition["filter"] = self.string(entry["filter"], "filter")
                conditions.append(condition)
            return conditions
        raise MergeConfigError(f"{self.at(node)}: expected a number, a gradient (a list of numbers) or a list of "
                               f"{{filter, value}} for {name!r}, got {self._kind(node)}")
