"""Per-island hyper-parameters: a value, a list indexed by island, a function of it,
or (in a config) an expression string of ``i``.

Heterogeneous islands give each island its own setting, e.g. ``omega=[0.2, 0.5, 0.8]``
for three islands, ``omega=lambda i: 0.3 + 0.1 * i`` or ``omega="0.3 + 0.1*i"`` for
any number of islands.
"""

from __future__ import annotations

from typing import Any

from ..schema import Check, Invalid
from .expressions import IslandExpression, is_island_expression


def is_per_island(value: Any) -> bool:
    """True when ``value`` varies by island (a list/tuple or a callable)."""
    return isinstance(value, (list, tuple)) or callable(value)


class PerIsland(Check):
    """The check of a setting that may vary by island: what ``item`` (the plain check,
    kept as ``.item``) accepts, a non-empty list of such values, a callable of the
    island index (its results are checked when resolved), or an expression of ``i``."""

    def __init__(self, item: Check):
        super().__init__(lambda: item.expected, self._accept)
        self.item = item

    def _accept(self, value):
        if is_island_expression(value):
            return IslandExpression(value)
        if callable(value):
            return value
        if not isinstance(value, (list, tuple)):
            return self.item(value)
        if not value:
            raise Invalid("expected a non-empty list (one value per island), got []")
        checked = []
        for k, entry in enumerate(value):
            try:
                checked.append(self.item(entry))
            except Invalid as err:
                raise Invalid(str(err), f"[{k}]{err.at}") from None
        return checked


def check_island_index(island_index: int, n_islands: int) -> None:
    """Raise ValueError unless 0 <= island_index < n_islands (ints, n_islands >= 1)."""
    if not isinstance(n_islands, int) or isinstance(n_islands, bool) or n_islands < 1:
        raise ValueError(f"expected n_islands >= 1, got {n_islands!r}")
    if not isinstance(island_index, int) or isinstance(island_index, bool) or not 0 <= island_index < n_islands:
        raise ValueError(f"expected island_index in [0, {n_islands}), got {island_index!r}")


def resolve_param(value: Any, island_index: int, n_islands: int, name: str = "parameter") -> Any:
    """The value of a hyper-parameter on island ``island_index``.

    Args:
        value: a plain value (the same on every island), a list/tuple with one entry
            per island, or a callable ``f(island_index) -> value``.
        island_index: 0 <= island_index < n_islands.
        n_islands: number of islands in the run.
        name: the setting's path, for error messages.

    Returns:
        The resolved value (a callable is called once; its result is returned as is).

    Raises:
        ValueError: a list whose length is not ``n_islands``, or a bad index.

    Example::

        resolve_param([0.3, 0.5], 1, 2)                 # 0.5: island 1's entry
        resolve_param(lambda i: 0.1 * i, 3, 4)          # 0.3 (up to rounding)
    """
    check_island_index(island_index, n_islands)
    if isinstance(value, (list, tuple)):
        if len(value) != n_islands:
            raise ValueError(f"{name}: expected a list of {n_islands} values (one per island), "
                             f"got {len(value)}: {list(value)!r}")
        return value[island_index]
    if callable(value):
        return value(island_index)
    return value
