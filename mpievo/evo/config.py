"""Engine settings: :class:`EngineConfig`, validated, with per-island values.

Every setting may be a plain value, a list with one value per island, or (from
Python only) a callable of the island index; :meth:`EngineConfig.resolve` gives the
plain settings of one island. ``from_dict``/``to_dict`` map the settings to and from
a plain dict (e.g. the ``[engine]`` table of a TOML file); unknown keys are refused,
naming them.

Example::

    cfg = EngineConfig.from_dict({"capacity": 32, "omega": [0.2, 0.5, 0.8]})
    island_cfg = cfg.resolve(island_index=1, n_islands=3)   # omega == 0.5
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

from .operators import BOUND_MODES, CROSSOVERS, SELECTIONS
from .algorithms.ga import STEP_ADAPTATIONS
from .params import is_per_island, resolve_param

#: built-in algorithm names (anything else must be "module:Class")
ALGORITHM_NAMES = ("ga", "de", "jde", "cmaes")


def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}"


def _int(minimum: int) -> Callable:
    def check(value, name):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"expected an int for {name!r}, got {_describe(value)}")
        if value < minimum:
            raise ValueError(f"expected {name!r} >= {minimum}, got {value}")
        return int(value)
    return check


def _float(low: float, high: float, *, optional: bool = False, open_low: bool = False) -> Callable:
    def check(value, name):
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            none = " or None" if optional else ""
            raise TypeError(f"expected a number{none} for {name!r}, got {_describe(value)}")
        value = float(value)
        too_low = value <= low if open_low else value < low
        if too_low or value > high:
            bracket = "(" if open_low else "["
            raise ValueError(f"expected {name!r} in {bracket}{low}, {high}], got {value}")
        return value
    return check


def _optional_int(minimum: int) -> Callable:
    inner = _int(minimum)
    return lambda value, name: None if value is None else inner(value, name)


def _choice(options) -> Callable:
    def check(value, name):
        if not isinstance(value, str) or value not in options:
            raise ValueError(f"expected {name!r} among {list(options)}, got {_describe(value)}")
        return value
    return check


def _bool(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool for {name!r}, got {_describe(value)}")
    return value


def _algorithm(value, name):
    if not isinstance(value, str) or not (value in ALGORITHM_NAMES or value.count(":") == 1):
        raise ValueError(f"expected {name!r} among {list(ALGORITHM_NAMES)} or 'module:Class', "
                         f"got {_describe(value)}")
    return value


def _setting(default, check: Callable, doc: str):
    return field(default=default, metadata={"check": check, "doc": doc})


@dataclass(frozen=True)
class EngineConfig:
    """Settings of one island's engine (defaults tuned for cheap problems).

    Each field may also be a list (one value per island) or a callable of the island
    index; see :meth:`resolve`. Field documentation: :meth:`describe`.
    """

    algorithm: Any = _setting("ga", _algorithm, "island algorithm: ga, de (jde), cmaes or 'module:Class'")
    capacity: Any = _setting(64, _int(2), "archive capacity (members kept per island)")
    batch_size: Any = _setting(128, _int(1), "GA children per generation")
    dtype: Any = _setting("float32", _choice(("float32", "float64")), "genome dtype")
    unique: Any = _setting(False, _bool, "refuse genomes the archive already holds")
    selection: Any = _setting("tournament", _choice(SELECTIONS), "GA parent selection")
    tournament_size: Any = _setting(2, _int(1), "members per tournament")
    rank_pressure: Any = _setting(1.5, _float(1.0, 2.0), "linear ranking pressure in [1, 2]")
    crossover: Any = _setting("interpolate", _choice(CROSSOVERS), "GA crossover")
    omega: Any = _setting(None, _float(0.0, 1.0, optional=True),
                          "interpolation weight omega*a + (1-omega)*b; None: U(0,1) per child")
    swap_prob: Any = _setting(0.5, _float(0.0, 1.0), "uniform crossover: probability of a gene from b")
    blend_alpha: Any = _setting(0.5, _float(0.0, 10.0), "BLX-alpha widening")
    sbx_eta: Any = _setting(15.0, _float(0.0, 1e6), "SBX distribution index")
    mutation_rate: Any = _setting(None, _float(0.0, 1.0, optional=True),
                                  "per-gene mutation probability; None: min(1, 10/dim)")
    mutation_sigma: Any = _setting(0.1, _float(0.0, 1.0, open_low=True),
                                   "initial mutation step, relative to the box width")
    step_adaptation: Any = _setting("success", _choice(STEP_ADAPTATIONS),
                                    "GA step-size control: success rule or self-adaptation")
    sigma_tau: Any = _setting(None, _float(0.0, 10.0, optional=True),
                              "self-adaptation learning rate; None: 1/sqrt(2 * mutated genes)")
    population: Any = _setting(None, _optional_int(2),
                               "members in use at the start (the archive's limit; capped at capacity); "
                               "None: capacity. GA restarts multiply it by restart_growth, up to capacity")
    stagnation_patience: Any = _setting(200, _int(0),
                                        "GA: generations in which neither the best nor the median of the "
                                        "breeding members improves by stagnation_tol before a restart; "
                                        "0: never restart")
    stagnation_tol: Any = _setting(1e-4, _float(0.0, 1.0),
                                   "GA: relative improvement (of the best or the median) that counts as progress")
    restart_elite: Any = _setting(1, _int(1),
                                  "GA: best members kept on a restart (they stay out of breeding)")
    restart_growth: Any = _setting(2.0, _float(1.0, 1e3),
                                   "GA: population factor per restart (IPOP-like; 1: same size)")
    restart_margin: Any = _setting(1e-3, _float(0.0, 1.0),
                                   "GA: after a restart, members from elsewhere breed only when better "
                                   "than the best at the restart by this relative margin")
    bounds: Any = _setting("clip", _choice(BOUND_MODES), "box handling: clip, reflect or resample")
    de_population: Any = _setting(32, _int(4), "differential evolution population")
    de_tau_f: Any = _setting(0.1, _float(0.0, 1.0), "jDE: probability of renewing F")
    de_tau_cr: Any = _setting(0.1, _float(0.0, 1.0), "jDE: probability of renewing CR")
    cma_popsize: Any = _setting(None, _optional_int(2), "CMA-ES population; None: 4 + 3 ln(dim)")
    cma_sigma0: Any = _setting(0.3, _float(0.0, 1.0, open_low=True),
                               "CMA-ES initial step, relative to the box width")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            check = f.metadata["check"]
            if isinstance(value, (list, tuple)):
                if not value:
                    raise ValueError(f"expected a non-empty list for {f.name!r}, got []")
                object.__setattr__(self, f.name, [check(v, f"{f.name}[{i}]") for i, v in enumerate(value)])
            elif not callable(value):
                object.__setattr__(self, f.name, check(value, f.name))

    @classmethod
    def describe(cls) -> dict[str, str]:
        """Setting name -> one-line documentation."""
        return {f.name: f.metadata["doc"] for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, data: dict | None) -> "EngineConfig":
        """Settings from a dict; missing keys take their defaults.

        Raises:
            ValueError: unknown keys (named), or a bad value.
            TypeError: a value of the wrong type, or ``data`` not a dict.
        """
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise TypeError(f"expected a dict of engine settings, got {_describe(data)}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown engine setting(s) {', '.join(map(repr, unknown))}; "
                             f"expected some of: {', '.join(sorted(known))}")
        return cls(**data)

    def to_dict(self) -> dict:
        """All settings as a dict (lists copied; callables kept as they are)."""
        return {f.name: (list(v) if isinstance(v, list) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    def is_heterogeneous(self) -> bool:
        """True when some setting varies by island."""
        return any(is_per_island(getattr(self, f.name)) for f in dataclasses.fields(self))

    def resolve(self, island_index: int, n_islands: int) -> "EngineConfig":
        """The plain settings of island ``island_index`` out of ``n_islands``.

        Raises:
            ValueError: a list of the wrong length, or a callable returning a bad value.
        """
        values = {}
        for f in dataclasses.fields(self):
            value = resolve_param(getattr(self, f.name), island_index, n_islands, f.name)
            values[f.name] = f.metadata["check"](value, f.name)
        return EngineConfig(**values)
