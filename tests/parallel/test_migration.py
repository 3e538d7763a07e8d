"""Migration between islands: in memory (one rank) and over MPI (several ranks)."""

import numpy as np
import pytest
from mpi4py import MPI

from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.evo import EngineConfig, Island, MigrationPolicy, make_problem
from mpievo.rules.mapping import islands_of_rank
from mpievo.parallel.migrator import IslandShape, Migrator, topology_edges
from mpievo.rules.topology import bidirectional_ring, fully_connected, ring

from mpi_support import all_ranks_agree


def make_islands(indices, n_islands, dim=4, capacity=8, seed=1, dtype="float64"):
    problem = make_problem("sphere", dim)
    config = EngineConfig(capacity=capacity, batch_size=4, dtype=dtype)
    islands = {i: Island(i, problem, config, seed=seed, n_islands=n_islands) for i in indices}
    for island in islands.values():
        island.initialize()
    return islands


def shapes(n, dim=4, capacity=8, dtype="float64"):
    return [IslandShape(dim, np.dtype(dtype), capacity)] * n


def self_comm():
    return SelfComm()   # the engine protocol's one-rank implementation: no MPI


def test_topology_edges_are_sorted():
    assert topology_edges([[2, 1], [], [0]]) == [(0, 1), (0, 2), (2, 0)]


def test_ring_migration_in_memory_moves_the_best():
    islands = make_islands(range(3), 3)
    best_before = {i: isl.best()[0] for i, isl in islands.items()}
    migrator = Migrator(self_comm(), islands, shapes(3), MigrationPolicy(1, "best", "worst", False), seed=1)
    report = migrator.migrate(5, ring(3))
    assert report.edges == 3 and report.sent == 3
    for source in range(3):
        dest = islands[(source + 1) % 3]
        assert any(np.array_equal(g, best_before[source]) for g in dest.archive.genomes)
        assert report.accepted[(source + 1) % 3] == 1


def test_no_edges_or_no_emigrants_is_a_no_op():
    islands = make_islands(range(2), 2)
    before = islands[0].archive.genomes.copy()
    report = Migrator(self_comm(), islands, shapes(2), MigrationPolicy(0), seed=1).migrate(1, ring(2))
    assert report.sent == 0 and np.array_equal(islands[0].archive.genomes, before)
    report = Migrator(self_comm(), islands, shapes(2), MigrationPolicy(2), seed=1).migrate(1, [[], []])
    assert report.edges == 0


def holds(island, genome) -> bool:
    return any(np.array_equal(g, genome) for g in island.archive.genomes)


@pytest.mark.parametrize("unique", [True, False])
def test_elite_unique_migration_never_sends_a_held_genome(unique):
    islands = make_islands(range(2), 2)
    sender, receiver = islands[0], islands[1]
    receiver.immigrate(*sender.emigrants(2, "best"), policy="worst")   # it holds the sender's two best
    next_best = sender.archive.genomes[sender.archive.ranking()[2:4]].copy()
    migrator = Migrator(self_comm(), islands, shapes(2), MigrationPolicy(2, "best", "worst", unique), seed=1)
    report = migrator.migrate(1, [[1], []])
    assert report.sent == 2 and report.accepted[1] == 2
    # elite-unique sends the next best two; without it the two held ones arrive again
    assert all(holds(receiver, g) for g in next_best) == unique


def test_elite_unique_migration_drops_duplicates_from_two_senders():
    # islands 0 and 1 both hold genome X (0's best) and both send it to island 2
    islands = make_islands(range(3), 3)
    x = islands[0].emigrants(1, "best")
    islands[1].immigrate(*x, policy="worst")
    islands[1].archive._fitness[:islands[1].archive.size] += 1e9  # X is 1's best by far
    islands[1].archive._fitness[np.flatnonzero(islands[1].archive.ids == x.ids[0])] = x.fitness[0]
    graph = [[2], [2], []]
    migrator = Migrator(self_comm(), islands, shapes(3), MigrationPolicy(1, "best", "worst", True), seed=1)
    report = migrator.migrate(1, graph)
    assert report.received[2] == 2 and report.accepted[2] == 1
    assert len(np.unique(islands[2].archive.genomes, axis=0)) == islands[2].archive.size


@pytest.mark.parametrize("replacement", ["worst", "better", "fair"])
@pytest.mark.parametrize("unique", [True, False])
def test_migrator_takes_in_through_island_immigrate(replacement, unique):
    got = make_islands(range(2), 2)
    want = make_islands(range(2), 2)
    Migrator(self_comm(), got, shapes(2), MigrationPolicy(3, "best", replacement, unique), seed=1) \
        .migrate(4, ring(2))
    out = {i: want[i].emigrants(3, "best", exclude=want[1 - i].member_hashes() if unique else None)
           for i in range(2)}
    for i in range(2):
        want[i].immigrate(*out[1 - i], policy=replacement, max_replace=3, unique=unique)
        assert np.array_equal(got[i].archive.genomes, want[i].archive.genomes)
        assert got[i].immigrants_accepted == want[i].immigrants_accepted


def _migrate_everywhere(world, n_islands, destinations, policy, generations=2, **kw):
    """Migrate on ``world`` and in one process; return (distributed, serial) archives of my islands."""
    comm = Communicator(world)
    mine = islands_of_rank(comm.rank, n_islands, comm.size)
    dist = make_islands(mine, n_islands, **kw)
    serial = make_islands(range(n_islands), n_islands, **kw)
    shape = shapes(n_islands, kw.get("dim", 4), kw.get("capacity", 8), kw.get("dtype", "float64"))
    m_dist = Migrator(comm, dist, shape, policy, seed=3)
    m_serial = Migrator(self_comm(), serial, shape, policy, seed=3)
    for g in range(1, generations + 1):
        for island in dist.values():
            island.step(g)
        for island in serial.values():
            island.step(g)
        m_dist.migrate(g, destinations)
        m_serial.migrate(g, destinations)
    return comm, dist, serial


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("topology", [ring, bidirectional_ring, fully_connected])
@pytest.mark.parametrize("policy", [MigrationPolicy(2, "best", "better", True),
                                    MigrationPolicy(3, "random", "worst", False),
                                    MigrationPolicy(2, "random", "fair", True)])
def test_migration_over_mpi_matches_one_process(world, topology, policy):
    n_islands = world.Get_size() + 3   # some ranks host several islands
    comm, dist, serial = _migrate_everywhere(world, n_islands, topology(n_islands), policy, dtype="float32")
    same = all(np.array_equal(dist[i].archive.genomes, serial[i].archive.genomes)
               and np.array_equal(dist[i].archive.ids, serial[i].archive.ids) for i in dist)
    all_ranks_agree(world, same, f"islands {sorted(dist)} differ from the one-process migration")
    all_ranks_agree(world, comm.traffic.get("migration", 0) > 0, f"traffic {comm.traffic}")


@pytest.mark.mpi(min_size=2)
def test_every_rank_sends_large_migrants_at_once(world):
    # 2**20 float32 genes = 4 MiB per genome, 2 per edge: far above any eager limit, so a
    # naive blocking send on every rank at once would deadlock in rendezvous mode
    dim = 1 << 20
    n_islands = world.Get_size()
    policy = MigrationPolicy(2, "best", "worst", False)
    comm, dist, serial = _migrate_everywhere(world, n_islands, bidirectional_ring(n_islands), policy,
                                             generations=1, dim=dim, capacity=3, dtype="float32")
    same = all(np.array_equal(dist[i].archive.genomes, serial[i].archive.genomes) for i in dist)
    all_ranks_agree(world, same, "large migration differs from the one-process result")
    expected = 2 * (2 * dim * 4 + 8 + 32 * 2) if n_islands > 2 else 2 * dim * 4 + 8 + 32 * 2
    all_ranks_agree(world, comm.traffic["migration"] == expected, f"traffic {comm.traffic}, expected {expected}")
