"""The run config as stored in checkpoints, and the resume check against the current one."""

from __future__ import annotations

import hashlib
import json
import math
import sys
from typing import Any, Iterable, Mapping

from .errors import ConfigMismatchError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

CONFIG_FORMATS = ("toml", "json")
_MISSING = object()


def config_text_and_format(config: str | Mapping[str, Any], config_format: str | None) -> tuple[str, str]:
    """Normalise what a caller passes as the run's config to (text, format).

    Args:
        config: the config file's text, or the config as a dict (stored as sorted JSON).
        config_format: "toml" or "json" for text; must be None or "json" for a dict.

    Raises:
        ValueError: an unknown format, or a dict with format "toml".
        TypeError: a dict that JSON cannot represent.

    Example::

        config_text_and_format({"run": {"seed": 1}}, None)     # (the dict as JSON text, 'json')
    """
    if isinstance(config, Mapping):
        if config_format not in (None, "json"):
            raise ValueError(f"expected config_format None or 'json' for a dict config, got {config_format!r}")
        try:
            return json.dumps(config, sort_keys=True, indent=1), "json"
        except TypeError as err:
            raise TypeError(f"expected a JSON-serialisable config dict, got {err}") from None
    if not isinstance(config, str):
        raise TypeError(f"expected the config as str text or a dict, got {type(config).__name__}")
    fmt = config_format or "toml"
    if fmt not in CONFIG_FORMATS:
        raise ValueError(f"expected config_format in {CONFIG_FORMATS}, got {config_format!r}")
    return config, fmt


def config_hash(text: str) -> str:
    """SHA-256 hex digest of the config text (as UTF-8), recorded in every checkpoint file.

    Example::

        config_hash(Path("job.toml").read_text())   # a sha256 hex digest of the text
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_config(text: str, config_format: str) -> dict:
    """Parse stored config text.

    Raises:
        ValueError: text that does not parse as ``config_format``, or an unknown format.

    Example::

        parse_config("seed = 1", "toml")     # {'seed': 1}
    """
    if config_format == "toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"expected valid TOML config text, got an error: {err}") from None
    if config_format == "json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"expected valid JSON config text, got an error: {err}") from None
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object as config, got {type(value).__name__}")
        return value
    raise ValueError(f"expected config_format in {CONFIG_FORMATS}, got {config_format!r}")


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any],
                       allow: Iterable[str] = frozenset()) -> list[str]:
    """Dotted paths where ``current`` differs from ``saved``, except those ``allow`` covers.

    A key present on one side only counts as a difference. An allowed path covers
    itself and everything below it ("run" allows "run.generations").

    Returns:
        the differing, not allowed paths, sorted.

    Example::

        config_differences({"run": {"seed": 1, "budget": 10}}, {"run": {"seed": 2, "budget": 20}},
                           allow={"run.budget"})      # ['run.seed']
    """
    allowed = tuple(allow)
    return [path for path in _differing_paths(saved, current, "")
            if not any(path == a or path.startswith(a + ".") for a in allowed)]


def check_config_compatible(saved: Mapping[str, Any], current: Mapping[str, Any],
                            allow: Iterable[str] = frozenset()) -> None:
    """Refuse to resume when the config changed in keys not in ``allow``.

    Raises:
        ConfigMismatchError: naming each differing key with its saved and current value.

    Example::

        check_config_compatible(saved, current, allow={"run.budget", "run.generations"})
    """
    keys = config_differences(saved, current, allow)
    if keys:
        details = "; ".join(
            f"{k}: saved {_show(_lookup(saved, k))}, current {_show(_lookup(current, k))}" for k in keys)
        raise ConfigMismatchError(
            f"refusing to resume: the config differs from the checkpoint's in {len(keys)} key(s): "
            f"{details}. Resume with the saved config, or allow these keys to change "
            f"({', '.join(keys)}).", keys)


def _differing_paths(saved: Any, current: Any, prefix: str) -> list[str]:
    if isinstance(saved, Mapping) and isinstance(current, Mapping):
        out = []
        for key in sorted(set(saved) | set(current), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            out.extend(_differing_paths(saved.get(key, _MISSING), current.get(key, _MISSING), path))
        return out
    return [] if _same(saved, current) else [prefix]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) != isinstance(b, bool):  # True == 1 in Python, not in a config
        return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):  # tables inside arrays
        return not _differing_paths(a, b, "item")
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return False
    return a is b if a is _MISSING or b is _MISSING else a == b


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _show(value: Any) -> str:
    return "<absent>" if value is _MISSING else repr(value)
