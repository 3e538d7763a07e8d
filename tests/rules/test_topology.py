"""Neighbour lists of every topology for 1..5 islands."""

import pytest

from mpievo.rules import topology as tp

RING = {1: [[]], 2: [[1], [0]], 3: [[1], [2], [0]], 4: [[1], [2], [3], [0]],
        5: [[1], [2], [3], [4], [0]]}
BIRING = {1: [[]], 2: [[1], [0]], 3: [[1, 2], [0, 2], [0, 1]], 4: [[1, 3], [0, 2], [1, 3], [0, 2]],
          5: [[1, 4], [0, 2], [1, 3], [2, 4], [0, 3]]}
# 4 islands form a 2 x 2 torus: left/right and up/down neighbours coincide
TORUS = {1: [[]], 2: [[1], [0]], 3: [[1, 2], [0, 2], [0, 1]], 4: [[1, 2], [0, 3], [0, 3], [1, 2]],
         5: BIRING[5]}
FULL = {n: [[j for j in range(n) if j != i] for i in range(n)] for n in range(1, 6)}


@pytest.mark.parametrize("n", range(1, 6))
def test_static_topologies(n):
    assert tp.ring(n) == RING[n]
    assert tp.bidirectional_ring(n) == BIRING[n]
    assert tp.torus(n) == TORUS[n]
    assert tp.fully_connected(n) == FULL[n]
    assert tp.unconnected(n) == [[] for _ in range(n)]


def test_torus_grid_shape():
    assert tp.torus_shape(6) == (2, 3)
    assert tp.torus_shape(9) == (3, 3)
    assert tp.torus_shape(7) == (1, 7)
    # 3 x 3 torus: island 4 (centre) talks to 1, 3, 5, 7
    assert tp.torus(9)[4] == [1, 3, 5, 7]
    assert tp.torus(6, rows=3)[0] == [1, 2, 4]
    with pytest.raises(ValueError, match="rows dividing 6"):
        tp.torus(6, rows=4)


@pytest.mark.parametrize("n", range(1, 6))
@pytest.mark.parametrize("degree", [1, 2, 7])
def test_random_topology_is_keyed_by_seed_and_epoch(n, degree):
    first = tp.random_topology(n, seed=3, epoch=5, degree=degree)
    assert first == tp.random_topology(n, seed=3, epoch=5, degree=degree)
    for i, row in enumerate(first):
        assert i not in row and row == sorted(set(row)) and len(row) == min(degree, n - 1)
        assert all(0 <= j < n for j in row)


def test_random_topology_changes_between_epochs():
    graphs = {str(tp.random_topology(5, 0, epoch)) for epoch in range(20)}
    assert len(graphs) > 5
    assert tp.random_topology(5, 0, 1) != tp.random_topology(5, 1, 1) or \
        tp.random_topology(5, 0, 2) != tp.random_topology(5, 1, 2)


@pytest.mark.parametrize("n", range(1, 6))
def test_user_graph_adjacency_and_edges_agree(n):
    adjacency = [[(i + 2) % n] if n > 2 else [] for i in range(n)]
    edges = [[i, row[0]] for i, row in enumerate(adjacency) if row]
    assert tp.graph(n, adjacency=adjacency) == tp.graph(n, edges=edges) == adjacency


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one of"),
    ({"adjacency": [[1], [0]], "edges": [[0, 1]]}, "exactly one of"),
    ({"adjacency": [[1]]}, "3 entries"),
    ({"edges": [[0, 3]]}, r"island indices in \[0, 3\)"),
    ({"edges": [[1, 1]]}, "no self-loops"),
    ({"edges": [[0, 1, 2]]}, "source, destination"),
])
def test_user_graph_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tp.graph(3, **kwargs)


def test_build_topology():
    ring = tp.build_topology("ring", 4)
    assert ring(0) == ring(7) == RING[4]
    rand = tp.build_topology("random", 5, seed=2, degree=2)
    assert rand(3) == tp.random_topology(5, 2, 3, 2)
    assert tp.build_topology("graph", 3, edges=[[0, 2]])(0) == [[2], [], []]
    with pytest.raises(ValueError, match="among"):
        tp.build_topology("star", 3)
    with pytest.raises(ValueError, match=r"no \['degree'\] options for topology 'ring'"):
        tp.build_topology("ring", 3, degree=2)
