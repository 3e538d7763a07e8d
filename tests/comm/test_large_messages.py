"""Messages over MPI's count limit: exchange and object calls cut into pieces.

The piece size is forced down to 1 KiB so that every rank sending uneven, empty and
multi-piece messages to every other at once runs in a moment; the real thing (a
2.5 GiB genome between 2 ranks, exchanged and migrated, bit for bit, with peak RSS
bounded) runs only with ``MPIEVO_TEST_LARGE=1`` (its own CI stage; about 16 GiB).
"""

from __future__ import annotations

import os
import time

import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

from mpi_support import all_ranks_agree
from mpievo.comm import CollectiveTimeoutError, Communicator, chunking
from mpievo.evo.migration_policy import MigrationPolicy, Migrants
from mpievo.parallel.migrator import IslandShape, Migrator
from mpievo.rules.topology import ring

P = MPI.COMM_WORLD.Get_size()
PIECE = 1024
DTYPES = [np.float32, np.float64, np.int8, np.uint16, np.complex128, np.bool_, ml_dtypes.bfloat16]


@pytest.fixture
def comm():
    c = Communicator()
    yield c
    if c.broken is None:
        c.free()


@pytest.fixture
def posted(monkeypatch):
    """Force 1 KiB pieces; the list of every piece's byte size that went to MPI."""
    monkeypatch.setattr(chunking, "MAX_MESSAGE_BYTES", PIECE)
    sizes: list[int] = []
    cut = chunking.pieces

    def spy(flat):
        out = cut(flat)
        sizes.extend(p.nbytes for p in out)
        return out

    monkeypatch.setattr(chunking, "pieces", spy)
    return sizes


def _message(src: int, dst: int, i: int) -> np.ndarray:
    """The i-th array ``src`` sends ``dst``: its dtype, shape and bits follow from (src, dst, i)."""
    rng = np.random.default_rng([src, dst, i])
    dtype = np.dtype(DTYPES[(src + 2 * dst + i) % len(DTYPES)])
    n = [0, 1, PIECE // dtype.itemsize, 3 * PIECE + 5, 700 * (src + 1) + 13 * dst][(src * 3 + dst + i) % 5]
    raw = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8)   # any bits, NaN payloads included
    return raw.view(dtype).reshape((n, 1) if i == 1 else n)


@pytest.mark.mpi(min_size=2)
def test_everyone_sends_everyone_uneven_pieces_at_once(comm, world, posted):
    rank, messages = comm.rank, 3
    sends = [(dst, _message(rank, dst, i)) for dst in range(P) for i in range(messages)]
    expected = [(src, _message(src, rank, i)) for src in range(P) for i in range(messages)]
    recvs = [(src, np.full_like(want, 1)) for src, want in expected]
    comm.exchange(sends, recvs, timeout=60)
    bad = [(src, i % messages) for i, ((src, got), (_, want)) in enumerate(zip(recvs, expected))
           if got.dtype != want.dtype or got.tobytes() != want.tobytes()]
    moved = sum(a.nbytes for _, a in sends) + sum(a.nbytes for _, a in recvs)
    ok = (not bad and max(posted) <= PIECE and sum(posted) == moved
          and len(posted) > len(sends) + len(recvs))   # some message was cut into several
    all_ranks_agree(world, ok, f"wrong (source, message): {bad}; pieces {len(posted)}, max {max(posted)}")


@pytest.mark.mpi(min_size=2)
def test_a_missing_piece_times_out_naming_the_peer(comm, posted):
    # every rank waits for 4 pieces from its right neighbour, which sends nothing
    right = (comm.rank + 1) % P
    with pytest.raises(CollectiveTimeoutError, match=rf"exchange .*from rank {right}"):
        comm.exchange(recvs=[(right, np.empty(4 * PIECE, np.uint8))], timeout=0.5)
    assert comm.broken is not None and len(posted) == 4


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("large", [False, True])
def test_object_calls_in_pieces(comm, world, posted, large):
    rank = comm.rank
    mine = {"rank": rank, "genes": np.arange(800 * (rank + 1) if large else 3, dtype=np.float32) + rank}

    def same(got, r):
        return got["rank"] == r and np.array_equal(got["genes"], np.arange(got["genes"].size) + np.float32(r))

    def pieces_of(call, *args, **kw):
        posted.clear()
        return call(*args, **kw), list(posted)

    gathered, all_pieces = pieces_of(comm.allgather_object, mine)
    at_root, root_pieces = pieces_of(comm.gather_object, mine, root=P - 1)
    root_says, bcast_pieces = pieces_of(comm.bcast_object, mine if rank == 1 else None, root=1)
    ok = (all(same(g, r) for r, g in enumerate(gathered)) and same(root_says, 1)
          and (at_root is None if rank != P - 1 else all(same(g, r) for r, g in enumerate(at_root))))
    if large:   # pickles of 3-13 KiB: every call went in pieces
        ok = ok and all(p and max(p) <= PIECE for p in (all_pieces, root_pieces)) and len(bcast_pieces) > 1
    else:       # small pickles: one Gatherv/Allgatherv, and the broadcast's one piece
        ok = ok and all_pieces == root_pieces == [] and len(bcast_pieces) == 1
    all_ranks_agree(world, ok, f"large={large}: pieces {all_pieces[:4]} {root_pieces[:4]} {bcast_pieces[:4]}")


# ------------------------------------------------------------------ over 2 GiB
GENES = 671_088_640                       # float32: 2.5 GiB
GENOME_BYTES = 4 * GENES
SLACK = 256 << 20                         # MPI's own buffers and the fill's temporaries
large = pytest.mark.skipif(os.environ.get("MPIEVO_TEST_LARGE") != "1" or P != 2,
                           reason="a 2.5 GiB genome between 2 ranks: MPIEVO_TEST_LARGE=1 and -n 2")


def _pattern(out: np.ndarray, seed: int, check: bool = False) -> bool:
    """Fill ``out`` (float32) with seed's bits, or check that it holds them, 16 Mi genes at a time."""
    words = out.reshape(-1).view(np.uint32)
    step = 1 << 24
    for a in range(0, words.size, step):
        i = np.arange(a, min(a + step, words.size), dtype=np.uint32)
        i *= np.uint32(2654435761)                # Knuth's multiplicative hash: every bit pattern
        i ^= np.uint32(seed * 0x9E3779B9 & 0xFFFFFFFF)
        if check and not np.array_equal(words[a:a + i.size], i):
            return False
        if not check:
            words[a:a + i.size] = i
    return True


class _Peak:
    """Peak resident memory of this process since construction (Linux VmHWM, reset here)."""

    def __init__(self):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.start = self._status("VmRSS")

    @staticmethod
    def _status(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith(key + ":"))

    def extra(self) -> int:
        return self._status("VmHWM") - self.start


@large
@pytest.mark.mpi(min_size=2)
def test_exchange_moves_a_genome_over_2_gib_both_ways_at_once(comm, world):
    peak, other = _Peak(), 1 - comm.rank
    start = time.perf_counter()
    out = np.empty(GENES, np.float32)
    _pattern(out, comm.rank)
    into = np.empty(GENES, np.float32)
    comm.exchange(sends=[(other, out)], recvs=[(other, into)], timeout=600)
    ok = _pattern(into, other, check=True)
    seconds, extra = time.perf_counter() - start, peak.extra()
    print(f"rank {comm.rank}: exchange of {GENOME_BYTES / 2**30:.1f} GiB each way in {seconds:.1f} s, "
          f"peak RSS +{extra / 2**30:.2f} GiB")
    # the sent genome and the received one, no extra copy
    all_ranks_agree(world, ok and extra <= 2 * GENOME_BYTES + SLACK, f"ok={ok}, peak +{extra} bytes")


class _OneGenome:
    """An island of one genome, with what :class:`Migrator` calls of an Island."""

    def __init__(self, genome: np.ndarray, index: int):
        self.genome, self.index = genome, index

    def emigrants(self, k, selection, rng, exclude=None) -> Migrants:
        # copies, as Island.emigrants gives: the one extra genome-sized buffer
        one = np.ones(1, np.int64)
        return Migrants(self.genome[None].copy(), np.zeros(1), one * self.index, one * self.index, one)

    def immigrate(self, genomes, fitness, ids, origins, births, *, policy, max_replace, unique) -> int:
        self.genome = genomes[0]
        return 1


@large
@pytest.mark.mpi(min_size=2)
def test_migration_moves_a_genome_over_2_gib_both_ways_at_once(comm, world):
    peak, other = _Peak(), 1 - comm.rank
    start = time.perf_counter()
    genome = np.empty(GENES, np.float32)
    _pattern(genome, comm.rank)
    island = _OneGenome(genome, comm.rank)
    del genome                             # the island's own genome is its only reference
    shape = IslandShape(GENES, np.dtype(np.float32), 1)
    comm.timeout = 600                     # CI exports MPIEVO_COMM_TIMEOUT=60; a loaded machine needs more
    policy = MigrationPolicy(1, "best", "worst", False)
    migrator = Migrator(comm, {comm.rank: island}, [shape, shape], policy, seed=1)
    report = migrator.migrate(1, ring(2))
    ok = report.sent == 1 and report.accepted == {comm.rank: 1} and _pattern(island.genome, other, check=True)
    seconds, extra = time.perf_counter() - start, peak.extra()
    print(f"rank {comm.rank}: migration of {GENOME_BYTES / 2**30:.1f} GiB each way in {seconds:.1f} s, "
          f"peak RSS +{extra / 2**30:.2f} GiB")
    # the island's genome, the emigrant copy, the arriving genome: nothing more
    all_ranks_agree(world, ok and extra <= 3 * GENOME_BYTES + SLACK, f"ok={ok}, peak +{extra} bytes")
