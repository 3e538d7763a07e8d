"""Migration topologies: who sends emigrants to whom.

A topology is a plain function returning, for every island, the sorted list of
islands it sends emigrants to (never itself). All functions are pure: the random
topology is keyed by (seed, epoch), so every rank draws the same graph and a re-run
with the same seed migrates along the same edges (pygmo's random topology is not
seeded, so its runs cannot be reproduced).

:func:`build_topology` turns a name and options (as in the TOML ``[migration]``
table) into ``destinations(epoch) -> list[list[int]]`` for a fixed island count.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from ..evo.streams import stream

Neighbours = list[list[int]]

def _check_count(n_islands: int) -> int:
    if isinstance(n_islands, bool) or not isinstance(n_islands, int) or n_islands < 1:
        raise ValueError(f"expected n_islands to be an int >= 1, got {n_islands!r}")
    return n_islands


def _tidy(n_islands: int, targets: Sequence[set[int]]) -> Neighbours:
    return [sorted(t - {i}) for i, t in enumerate(targets)]


def unconnected(n_islands: int) -> Neighbours:
    """No migration at all (independent islands).

    Example:
        >>> unconnected(3)
        [[], [], []]
    """
    return [[] for _ in range(_check_count(n_islands))]


def ring(n_islands: int) -> Neighbours:
    """Island i sends to i+1 (mod N).

    Example:
        >>> ring(4)
        [[1], [2], [3], [0]]
    """
    n = _check_count(n_islands)
    return _tidy(n, [{(i + 1) % n} for i in range(n)])


def bidirectional_ring(n_islands: int) -> Neighbours:
    """Island i sends to i-1 and i+1 (mod N).

    Example:
        >>> bidirectional_ring(4)
        [[1, 3], [0, 2], [1, 3], [0, 2]]
    """
    n = _check_count(n_islands)
    return _tidy(n, [{(i - 1) % n, (i + 1) % n} for i in range(n)])


def torus_shape(n_islands: int, rows: int | None = None) -> tuple[int, int]:
    """(rows, cols) of the torus grid: the most square factorisation unless ``rows`` is given.

    Raises:
        ValueError: ``rows`` does not divide ``n_islands``.

    Example:
        >>> torus_shape(6), torus_shape(6, rows=3)
        ((2, 3), (3, 2))
    """
    n = _check_count(n_islands)
    if rows is None:
        rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1 or n % rows:
        raise ValueError(f"expected torus rows dividing {n} islands, got {rows!r}")
    return rows, n // rows


def torus(n_islands: int, rows: int | None = None) -> Neighbours:
    """2-D grid with wrap-around; island ``r*cols + c`` sends to its four grid neighbours.

    With a prime island count the grid is 1 x N, i.e. a bidirectional ring.

    Example:
        >>> torus(4)
        [[1, 2], [0, 3], [0, 3], [1, 2]]
    """
    rows, cols = torus_shape(n_islands, rows)
    targets = []
    for i in range(n_islands):
        r, c = divmod(i, cols)
        targets.append({((r - 1) % rows) * cols + c, ((r + 1) % rows) * cols + c,
                        r * cols + (c - 1) % cols, r * cols + (c + 1) % cols})
    return _tidy(n_islands, targets)


def fully_connected(n_islands: int) -> Neighbours:
    """Every island sends to every other island.

    Example:
        >>> fully_connected(3)
        [[1, 2], [0, 2], [0, 1]]
    """
    n = _check_count(n_islands)
    return _tidy(n, [set(range(n)) for _ in range(n)])


def random_topology(n_islands: int, seed: int, epoch: int, degree: int = 1) -> Neighbours:
    """Each island sends to ``degree`` distinct other islands drawn anew every epoch.

    Args:
        n_islands: number of islands.
        seed: the run's seed.
        epoch: the generation of the migration (a new graph each time).
        degree: destinations per island (capped at N-1).

    Returns:
        Neighbour lists, a pure function of (n_islands, seed, epoch, degree).

    Example:
        >>> random_topology(4, seed=0, epoch=1)
        [[3], [0], [1], [0]]
    """
    n = _check_count(n_islands)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
        raise ValueError(f"expected degree to be an int >= 1, got {degree!r}")
    rng = stream(seed, 0, epoch, "topology")
    take = min(degree, n - 1)
    out = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        out.append(sorted(int(j) for j in rng.choice(others, size=take, replace=False)) if take else [])
    return out


def graph(n_islands: int, adjacency: Sequence[Sequence[int]] | None = None,
          edges: Sequence[Sequence[int]] | None = None) -> Neighbours:
    """A user graph, given as an adjacency list or as (source, destination) edges.

    Raises:
        ValueError: neither or both given, wrong length, an island out of range,
            a self-loop, or a malformed edge.

    Example:
        >>> graph(3, adjacency=[[1, 2], [2], []])
        [[1, 2], [2], []]
        >>> graph(3, edges=[(0, 1), (1, 2)])
        [[1], [2], []]
    """
    n = _check_count(n_islands)
    if (adjacency is None) == (edges is None):
        raise ValueError("expected exactly one of 'adjacency' or 'edges' for a graph topology, "
                         f"got {'both' if adjacency is not None else 'neither'}")
    if adjacency is not None:
        if len(adjacency) != n:
            raise ValueError(f"expected an adjacency list with {n} entries (one per island), "
                             f"got {len(adjacency)}")
        pairs = [(i, j) for i, row in enumerate(adjacency) for j in _as_list(row, f"adjacency[{i}]")]
    else:
        pairs = []
        for k, edge in enumerate(edges):
            edge = _as_list(edge, f"edges[{k}]")
            if len(edge) != 2:
                raise ValueError(f"expected edges[{k}] = [source, destination], got {edge!r}")
            pairs.append((edge[0], edge[1]))
    targets: list[set[int]] = [set() for _ in range(n)]
    for src, dst in pairs:
        for island in (src, dst):
            if isinstance(island, bool) or not isinstance(island, int) or not 0 <= island < n:
                raise ValueError(f"expected island indices in [0, {n}) in the graph, got {island!r}")
        if src == dst:
            raise ValueError(f"expected no self-loops in the graph, got {src} -> {dst}")
        targets[src].add(dst)
    return [sorted(t) for t in targets]


def _as_list(value, name: str) -> list:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"expected a list for {name}, got {value!r}")
    return list(value)


#: name -> (neighbour function, the options it takes): the one list of topologies
#: (``random`` is redrawn per epoch from the run's seed)
TOPOLOGIES: dict[str, tuple[Callable[..., Neighbours], tuple[str, ...]]] = {
    "ring": (ring, ()),
    "bidirectional_ring": (bidirectional_ring, ()),
    "torus": (torus, ("rows",)),
    "fully_connected": (fully_connected, ()),
    "random": (random_topology, ("degree",)),
    "graph": (graph, ("adjacency", "edges")),
    "unconnected": (unconnected, ()),
}


def build_topology(name: str, n_islands: int, *, seed: int = 0, degree: int = 1,
                   rows: int | None = None, adjacency=None, edges=None) -> Callable[[int], Neighbours]:
    """``destinations(epoch)`` for a named topology (see :data:`TOPOLOGIES`).

    Static topologies are computed (and validated) once; ``random`` draws a new graph
    per epoch. Options that do not apply to ``name`` are rejected.

    Raises:
        ValueError: unknown name, bad or inapplicable options.

    Example:
        >>> destinations = build_topology("ring", 4)
        >>> destinations(0)
        [[1], [2], [3], [0]]
    """
    if name not in TOPOLOGIES:
        raise ValueError(f"expected a topology among {list(TOPOLOGIES)}, got {name!r}")
    function, takes = TOPOLOGIES[name]
    given = {key: value for key, value in (("degree", None if degree == 1 else degree), ("rows", rows),
                                           ("adjacency", adjacency), ("edges", edges)) if value is not None}
    extra = sorted(set(given) - set(takes))
    if extra:
        raise ValueError(f"expected no {extra} options for topology {name!r}, got them")
    if name == "random":
        random_topology(n_islands, seed, 0, degree)  # validate now, not at the first migration
        return lambda epoch: random_topology(n_islands, seed, epoch, degree)
    static = function(n_islands, **given)
    return lambda epoch: [list(row) for row in static]
