"""The one schema mechanism of mpievo's settings: keys, checks, tables, one error dialect.

A table of settings is a frozen dataclass deriving from :class:`Settings` whose
fields are declared with :func:`setting` (default, :class:`Check`, one-line doc).
Constructing it checks every field and raises one :class:`ConfigError` listing every
problem as ``"table.key: expected X, got Y"``; :meth:`Settings.from_dict` also names
unknown keys. The job config (:mod:`mpievo.config`) and the engine settings
(:class:`mpievo.evo.engine_config.EngineConfig`) are such tables.

Standard library only: importing it loads neither numpy nor MPI.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping


class ConfigError(ValueError):
    """Invalid settings; ``problems`` lists every problem found (one line each)."""

    def __init__(self, problems: list[str], source: str = "config"):
        self.problems = list(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid {source} ({len(self.problems)} problem"
                         f"{'s' if len(self.problems) != 1 else ''}):\n{lines}")


class Invalid(ValueError):
    """One value failed its check; ``at`` extends the key's path (e.g. ``"[2]"``)."""

    def __init__(self, message: str, at: str = ""):
        super().__init__(message)
        self.at = at


def shown(value) -> str:
    """A value as error messages show it: ``str 'x'``, ``list [1]`` (type first)."""
    return f"{type(value).__name__} {value!r}"


class Check:
    """A value check: ``check(value)`` returns the (converted) value or raises
    :class:`Invalid` ("expected X, got Y").

    Args:
        expected: what passes ("an int >= 2"), or a function giving it (for choices
            among registries that are imported only when first needed).
        accept: ``value -> converted value``; raises :class:`Invalid`.
    """

    def __init__(self, expected: str | Callable[[], str], accept: Callable[[Any], Any]):
        self._expected = expected
        self._accept = accept

    @property
    def expected(self) -> str:
        return self._expected() if callable(self._expected) else self._expected

    def __call__(self, value):
        return self._accept(value)

    def reject(self, value, *, typed: bool = True):
        """Raise the standard message; ``typed=False`` shows the value without its type."""
        raise Invalid(f"expected {self.expected}, got {shown(value) if typed else repr(value)}")


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(minimum: int, maximum: int | None = None) -> Check:
    """An int in [minimum, maximum]."""
    upper = "" if maximum is None else f" and <= {maximum}"

    def accept(value):
        if not _is_int(value):
            check.reject(value)
        if value < minimum or (maximum is not None and value > maximum):
            check.reject(value, typed=False)
        return int(value)

    check = Check(f"an int >= {minimum}{upper}", accept)
    return check


def number(low: float, high: float, *, open_low: bool = False) -> Check:
    """A number in [low, high] (or (low, high]), as a float."""

    def accept(value):
        if not _is_number(value):
            check.reject(value)
        value = float(value)
        if (value <= low if open_low else value < low) or not value <= high:
            check.reject(value, typed=False)
        return value

    check = Check(f"a number in {'(' if open_low else '['}{low}, {high}]", accept)
    return check


def _accept_bool(value):
    if not isinstance(value, bool):
        boolean.reject(value)
    return value


boolean = Check("true or false", _accept_bool)


def _accept_text(value):
    if not isinstance(value, str) or not value:
        text.reject(value)
    return value


text = Check("a non-empty string", _accept_text)


def choice(options: Iterable[str] | Callable[[], Iterable[str]], *, extra: str = "",
           also: Callable[[str], bool] | None = None) -> Check:
    """One of ``options`` (or a function returning them: a registry loaded when first
    needed); ``also``/``extra`` admit and describe other strings (e.g. "module:Class")."""

    def names() -> list[str]:
        return list(options() if callable(options) else options)

    def accept(value):
        if not isinstance(value, str) or not (value in names() or (also is not None and also(value))):
            check.reject(value)
        return value

    check = Check(lambda: f"one of {names()}{extra}", accept)
    return check


def list_of(inner: Check) -> Check:
    """A non-empty list or tuple whose every item ``inner`` accepts, as a tuple."""

    def accept(value):
        if not isinstance(value, (list, tuple)) or not value:
            check.reject(value)
        items = []
        for k, item in enumerate(value):
            try:
                items.append(inner(item))
            except Invalid as err:
                raise Invalid(str(err), f"[{k}]{err.at}") from None
        return tuple(items)

    check = Check(lambda: f"a non-empty list, each {inner.expected}", accept)
    return check


def empty_or_list_of(inner: Check) -> Check:
    """A list or tuple (empty allowed) whose every item ``inner`` accepts, as a tuple."""
    nonempty = list_of(inner)
    return Check(lambda: f"a list, each {inner.expected}", lambda v: () if v in ((), []) else nonempty(v))


def optional(inner: Check) -> Check:
    """None (absent) or what ``inner`` accepts."""
    return Check(lambda: f"{inner.expected} or none", lambda v: None if v is None else inner(v))


def _accept_bounds(value):
    if value is None:
        return None
    if isinstance(value, list):
        for k, item in enumerate(value):
            if not _is_number(item):
                raise Invalid(f"expected a number, got {shown(item)}", f"[{k}]")
        return [float(v) for v in value]
    if not _is_number(value):
        bounds.reject(value)
    return float(value)


bounds = Check("a number or a list of numbers", _accept_bounds)


def _accept_index_lists(value):
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        index_lists.reject(value)
    for r, row in enumerate(value):
        for c, item in enumerate(row):
            if not _is_int(item):
                raise Invalid(f"expected an island index, got {shown(item)}", f"[{r}][{c}]")
    return [list(row) for row in value]


index_lists = Check("a list of lists of island indices", _accept_index_lists)


@dataclass(frozen=True)
class Key:
    """One setting: its default, its check and a one-line meaning."""

    default: Any
    check: Check
    doc: str


def setting(default, check: Check, doc: str):
    """A dataclass field of a :class:`Settings` table."""
    return dataclasses.field(default=default, metadata={"key": Key(default, check, doc)})


def check_value(key: Key, value, path: str, problems: list[str]):
    """``key.check(value)``; a failure is added to ``problems`` (and None returned)."""
    try:
        return key.check(value)
    except ConfigError as err:       # a nested table reports its own paths
        problems.extend(err.problems)
    except ValueError as err:
        problems.append(f"{path}{getattr(err, 'at', '')}: {err}")
    return None


def unknown_keys(data: Mapping, known: Iterable[str], path: str) -> list[str]:
    """One problem per key of ``data`` outside ``known``."""
    expected, prefix = sorted(known), f"{path}." if path else ""
    return [f"{prefix}{name}: expected a key among {expected}, got an unknown key"
            for name in sorted(set(data) - set(expected), key=str)]


@dataclass(frozen=True)
class Settings:
    """Base of a frozen table of settings (fields declared with :func:`setting`).

    Subclasses set ``TABLE`` (the path of the table in a config, e.g. ``"engine"``)
    and may override :meth:`_check_together` for rules that span keys.
    """

    TABLE: ClassVar[str] = ""

    def __post_init__(self):
        problems: list[str] = []
        for name, key in self.keys().items():
            value = check_value(key, getattr(self, name), f"{self.TABLE}.{name}", problems)
            object.__setattr__(self, name, value)
        if not problems:
            self._check_together(problems)
        if problems:
            raise ConfigError(problems, f"[{self.TABLE}] settings")

    def _check_together(self, problems: list[str]) -> None:
        """Add problems of rules that involve several keys (values already checked)."""

    @classmethod
    def keys(cls) -> dict[str, Key]:
        """Setting name -> :class:`Key`, in declaration order."""
        return {f.name: f.metadata["key"] for f in dataclasses.fields(cls)}

    @classmethod
    def describe(cls) -> dict[str, str]:
        """Setting name -> one-line documentation."""
        return {name: key.doc for name, key in cls.keys().items()}

    @classmethod
    def from_dict(cls, data: Mapping | None):
        """The settings of a dict (e.g. a TOML table); missing keys take their defaults.

        Raises:
            ConfigError: every unknown key and bad value.
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ConfigError([f"{cls.TABLE}: expected a table, got {shown(data)}"], f"[{cls.TABLE}] settings")
        keys = cls.keys()
        problems = unknown_keys(data, keys, cls.TABLE)
        try:
            made = cls(**{name: data[name] for name in keys if name in data})
        except ConfigError as err:
            problems += err.problems
        if problems:
            raise ConfigError(problems, f"[{cls.TABLE}] settings")
        return made

    def to_dict(self) -> dict:
        """Every setting (nested tables as dicts, lists copied)."""
        return {name: (value.to_dict() if isinstance(value, Settings) else copy.copy(value))
                for name in self.keys() for value in [getattr(self, name)]}


def table(cls: type[Settings]) -> Check:
    """A nested table of settings: a dict (or an instance) -> an instance of ``cls``."""
    return Check(f"a table [{cls.TABLE}]", lambda v: v if isinstance(v, cls) else cls.from_dict(v))
