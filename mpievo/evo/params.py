"""Per-island hyper-parameters: a value, a list indexed by island, or a function of it.

Heterogeneous islands give each island its own setting, e.g. ``omega=[0.2, 0.5, 0.8]``
for three islands, or ``omega=lambda i: 0.3 + 0.1 * i`` for any number of islands.
"""

from __future__ import annotations

from typing import Any


def is_per_island(value: Any) -> bool:
    """True when ``value`` varies by island (a list/tuple or a callable)."""
    return isinstance(value, (list, tuple)) or callable(value)


def resolve_param(value: Any, island_index: int, n_islands: int, name: str = "parameter") -> Any:
    """The value of a hyper-parameter on island ``island_index``.

    Args:
        value: a plain value (the same on every island), a list/tuple with one entry
            per island, or a callable ``f(island_index) -> value``.
        island_index: 0 <= island_index < n_islands.
        n_islands: number of islands in the run.
        name: the setting's name, for error messages.

    Returns:
        The resolved value (a callable is called once; its result is returned as is).

    Raises:
        ValueError: a list whose length is not ``n_islands``, or a bad index.
    """
    if not isinstance(n_islands, int) or isinstance(n_islands, bool) or n_islands < 1:
        raise ValueError(f"expected n_islands >= 1, got {n_islands!r}")
    if not isinstance(island_index, int) or not 0 <= island_index < n_islands:
        raise ValueError(f"expected island_index in [0, {n_islands}), got {island_index!r}")
    if isinstance(value, (list, tuple)):
        if len(value) != n_islands:
            raise ValueError(
                f"expected a list of {n_islands} values (one per island) for {name!r}, "
                f"got {len(value)}: {list(value)!r}")
        return value[island_index]
    if callable(value):
        return value(island_index)
    return value
