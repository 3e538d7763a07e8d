"""Synchronous migration between islands spread over ranks.

At a migration (a generation boundary, the same on every rank) every island first
chooses its emigrants for each destination, then every island takes in what it
received, in ascending source order. Choosing before receiving makes the result
independent of which islands share a rank, and the fixed order makes it
independent of message timing: the same seed gives the same run on any number of
ranks.

Transfers: between one pair of ranks, the records of all migrants travel in one
buffer and each edge's genomes as one more message, straight from the emigrants'
genome array into the array the receiving island takes in (:mod:`.packing` layout,
ascending (source, destination) edge order), through ``Communicator.exchange``, which
posts every send and receive before waiting, so ranks that all send large messages
at once cannot deadlock, and moves messages of any size. A migrating genome thus
exists at most three times: in the sender's archive, as an emigrant, and as it
arrives. Islands on the same rank hand their migrants over in memory.

Which members leave and how arrivals enter is the engine's business
(:mod:`mpievo.evo.migration_policy`, through ``Island.emigrants`` / ``Island.immigrate``);
this module only decides who talks to whom and moves the bytes.

Elite-unique migration (``unique=True``) never sends a genome the receiver already
holds: first every receiver sends the 64-bit hashes of its members' genomes
(``Island.member_hashes``) to its senders (8 bytes per member, one small message
per rank pair), and a sender then picks its emigrants among the members whose hash
the receiver does not hold. Equal genomes have equal hashes, so no held genome is
sent; a hash collision can only hold back a genome that was not held, which is
harmless. Two senders may still send the receiver the same genome in one round
(e.g. a migrant both received earlier): the receiver's immigration drops such
duplicates, and members it already holds, before its replacement policy runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..comm.protocol import EngineComm
from ..evo.island import Island
from ..evo.migration_policy import MigrationPolicy, Migrants
from ..evo.streams import stream
from ..rules.mapping import rank_of_island
from .packing import EdgeLayout, HashLayout, concat_migrants, migrant_count


@dataclass(frozen=True)
class IslandShape:
    """What every rank knows about every island's archive (from the config alone)."""

    dim: int
    dtype: np.dtype
    capacity: int
    n_obj: int = 1          # objectives per member (several: Pareto islands)


@dataclass
class MigrationReport:
    """What one migration did on this rank."""

    generation: int
    edges: int = 0                       # edges in the whole topology
    sent: int = 0                        # migrants sent by this rank's islands
    accepted: dict[int, int] = field(default_factory=dict)   # local island -> immigrants taken in
    received: dict[int, int] = field(default_factory=dict)   # local island -> migrants that arrived
    seconds: float = 0.0


def topology_edges(destinations: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """All (source, destination) edges, ascending."""
    return sorted((s, d) for s, row in enumerate(destinations) for d in row)


class Migrator:
    """Runs migrations for the islands of this rank.

    Args:
        comm: the :class:`~mpievo.comm.protocol.EngineComm` (``exchange`` and ``purpose`` are used).
        islands: this rank's islands, index -> Island.
        shapes: the archive shape of every island of the run (index order).
        policy: the :class:`MigrationPolicy`.
        seed: the run's seed (random emigrant choice draws from
            ``stream(seed, source, generation, "emigrate")``).
    """

    def __init__(self, comm: EngineComm, islands: Mapping[int, Island], shapes: Sequence[IslandShape],
                 policy: MigrationPolicy, seed: int):
        self.comm = comm
        self.islands = dict(islands)
        self.shapes = list(shapes)
        self.policy = policy
        self.seed = int(seed)
        self.n_islands = len(self.shapes)
        self._rank_of = [rank_of_island(i, self.n_islands, comm.size) for i in range(self.n_islands)]
        self._layouts = [EdgeLayout(policy.emigrants, s.dim, s.dtype, s.n_obj) for s in self.shapes]
        self._hash_layouts = [HashLayout(s.capacity) for s in self.shapes]

    def migrate(self, generation: int, destinations: Sequence[Sequence[int]],
                emigrants: int | None = None) -> MigrationReport:
        """One migration along ``destinations`` (collective: every rank calls it together).

        Args:
            emigrants: migrants per edge this time, at most the policy's (an adaptive
                count; the messages keep the policy's layout); None: the policy's.

        Returns:
            This rank's :class:`MigrationReport`.
        """
        count = self.policy.emigrants if emigrants is None else emigrants
        valid = not isinstance(count, bool) and isinstance(count, (int, np.integer))
        if not (valid and 0 <= count <= self.policy.emigrants):
            raise ValueError(f"expected emigrants in [0, {self.policy.emigrants}], got {emigrants!r}")
        start = time.perf_counter()
        edges = topology_edges(destinations)
        report = MigrationReport(generation, edges=len(edges))
        if not edges or count == 0:
            report.seconds = time.perf_counter() - start
            return report
        with self.comm.purpose("migration"):
            exclude = self._exchange_hashes(edges) if self.policy.unique else {}
            outgoing = self._choose(generation, destinations, exclude, int(count))
            report.sent = sum(migrant_count(m) for m in outgoing.values())
            arrived = self._exchange_migrants(edges, outgoing)
        self._take_in(edges, arrived, report, int(count))
        report.seconds = time.perf_counter() - start
        return report

    # ------------------------------------------------------------------ steps
    def _local(self, island: int) -> bool:
        return island in self.islands

    def _exchange_hashes(self, edges) -> dict[tuple[int, int], np.ndarray]:
        """Every sender learns the genome hashes its receivers hold."""
        held = {d: self.islands[d].member_hashes() for d in {d for _, d in edges if self._local(d)}}
        exclude = {(s, d): held[d] for s, d in edges if self._local(s) and self._local(d)}
        # messages: receiver d -> sender s, i.e. "reversed" edges
        sends = self._pack_per_peer([(d, s) for s, d in edges if self._local(d) and not self._local(s)],
                                    lambda d, s: self._hash_layouts[d], lambda d, s, block:
                                    self._hash_layouts[d].pack(block, held[d]))
        remote = [(d, s) for s, d in edges if self._local(s) and not self._local(d)]
        recvs = self._receive_buffers(remote, lambda d, s: self._hash_layouts[d])
        self._exchange(sends, recvs)
        for (d, s), block in self._blocks(remote, recvs, lambda d, s: self._hash_layouts[d]):
            exclude[(s, d)] = self._hash_layouts[d].unpack(block)
        return exclude

    def _choose(self, generation: int, destinations, exclude, count: int) -> dict[tuple[int, int], Migrants]:
        """``count`` emigrants of every local island for each of its destinations (before any arrival)."""
        outgoing = {}
        for s in sorted(self.islands):
            rng = stream(self.seed, s, generation, "emigrate")
            for d in sorted(destinations[s]):
                outgoing[(s, d)] = self.islands[s].emigrants(count, self.policy.selection,
                                                             rng, exclude=exclude.get((s, d)))
        return outgoing

    def _exchange_migrants(self, edges, outgoing) -> dict[tuple[int, int], Migrants]:
        """Records per rank pair in one buffer, then every edge's genomes on their own."""
        arrived = {(s, d): m for (s, d), m in outgoing.items() if self._local(d)}
        remote_out = sorted((s, d) for s, d in edges if self._local(s) and not self._local(d))
        genomes_out = {}

        def pack(s, d, block):
            genomes_out[(s, d)] = self._layouts[s].pack(block, outgoing[(s, d)])

        sends = self._pack_per_peer(remote_out, lambda s, d: self._layouts[s], pack)
        sends += [(self._peer(pair), genomes_out[pair]) for pair in remote_out]
        remote_in = sorted((s, d) for s, d in edges if self._local(d) and not self._local(s))
        recvs = self._receive_buffers(remote_in, lambda s, d: self._layouts[s])
        genomes_in = {pair: self._layouts[pair[0]].empty_genomes(getattr(self.islands[pair[1]], "on_device", False))
                      for pair in remote_in}
        self._exchange(sends, recvs + [(self._peer(pair[::-1]), genomes_in[pair]) for pair in remote_in])
        for (s, d), block in self._blocks(remote_in, recvs, lambda s, d: self._layouts[s]):
            arrived[(s, d)] = self._layouts[s].unpack(block, genomes_in[(s, d)])
        return arrived

    def _take_in(self, edges, arrived, report: MigrationReport, count: int) -> None:
        policy = self.policy
        for d in sorted(self.islands):
            shape = self.shapes[d]
            batch = concat_migrants([arrived[(s, d)] for s, dd in edges if dd == d], shape.dim, shape.dtype,
                                    shape.n_obj)
            report.received[d] = migrant_count(batch)
            report.accepted[d] = self.islands[d].immigrate(
                *batch, policy=policy.replacement, max_replace=count, unique=policy.unique)

    # ---------------------------------------------------------- message plumbing
    # Pairs are (sending island, receiving island) of one message block: (source,
    # destination) for migrants, (destination, source) for hashes. Both sides order
    # the blocks of a message by pair, so the receiver can cut the buffer apart.
    def _peer(self, pair) -> int:
        """The rank of the second island of ``pair``."""
        return self._rank_of[pair[1]]

    def _pack_per_peer(self, pairs, layout_of, pack):
        """One uint8 buffer per receiving rank with the blocks of ``pairs``, in order."""
        by_peer: dict[int, list] = {}
        for pair in pairs:
            by_peer.setdefault(self._peer(pair), []).append(pair)
        sends = []
        for peer in sorted(by_peer):
            group = sorted(by_peer[peer])
            buf = np.empty(sum(layout_of(*p).nbytes for p in group), np.uint8)
            offset = 0
            for pair in group:
                size = layout_of(*pair).nbytes
                pack(*pair, buf[offset:offset + size])
                offset += size
            sends.append((peer, buf))
        return sends

    def _receive_buffers(self, pairs, layout_of):
        """(sending rank, buffer) for the blocks of ``pairs`` this rank receives."""
        sizes: dict[int, int] = {}
        for pair in pairs:
            peer = self._peer(pair[::-1])
            sizes[peer] = sizes.get(peer, 0) + layout_of(*pair).nbytes
        return [(peer, np.empty(sizes[peer], np.uint8)) for peer in sorted(sizes)]

    def _blocks(self, pairs, recvs, layout_of):
        """Cut received buffers back into per-pair blocks (the order the sender packed)."""
        buffers = dict(recvs)
        offsets = dict.fromkeys(buffers, 0)
        for pair in sorted(pairs):
            peer = self._peer(pair[::-1])
            size = layout_of(*pair).nbytes
            yield pair, buffers[peer][offsets[peer]:offsets[peer] + size]
            offsets[peer] += size

    def _exchange(self, sends, recvs) -> None:
        if sends or recvs:
            self.comm.exchange(sends, recvs)

