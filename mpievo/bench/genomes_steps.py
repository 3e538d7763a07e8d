"""The measured steps of one cell of ``mpievo bench genomes`` (:mod:`.genomes`):
breeding, migration, checkpoint, and the check of every island's best."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from ..evo.migration_policy import MigrationPolicy
from ..io import Checkpointer
from .genomes_device import synchronize
from ..rules.mapping import rank_of_island
from ..parallel.migrator import IslandShape, Migrator
from ..parallel.packing import EdgeLayout


def record_bytes(row_dim: int, row_dtype) -> int:
    """Bytes of one migrant's record (fitness, id, origin, birth) in an edge's message."""
    return EdgeLayout(1, row_dim, row_dtype).nbytes - EdgeLayout(0, row_dim, row_dtype).nbytes


def breed_rates(islands: dict, generations: int, genome: str, itemsize: int, device: bool = False) -> dict:
    """Seconds -> GB/s of child genome of ``ask`` (and of materialising, seeded) per
    generation of every island here; the children are then evaluated and told. With
    ``device`` the GPU's queue is drained before and after each timed step; a seeded
    island's ``materialize_gbs`` is then its evaluation (materialising on the GPU, and
    the device fitness reading each genome once more)."""
    rates: dict[str, list] = {"breed_gbs": []}
    if genome == "seeded":
        rates.update(materialize_gbs=[], produce_gbs=[])
    for island in islands.values():
        encoded = island.problem
        island.step(1)   # untimed: the first call of a kernel loads or compiles it
        for generation in range(2, generations + 2):
            synchronize(device)
            t0 = time.perf_counter()
            children = island.ask(generation)
            synchronize(device)
            bred = time.perf_counter() - t0
            nbytes = children.shape[0] * getattr(encoded, "genome_dim", encoded.dim) * itemsize
            rates["breed_gbs"].append(nbytes / bred / 1e9)
            fitness = None
            if genome == "seeded":
                t0 = time.perf_counter()
                if device:   # fitness values come back to the host: the GPU's work is done
                    fitness = island.evaluate(children)
                else:
                    for _ in encoded.blocks(children):
                        pass
                made = time.perf_counter() - t0
                rates["materialize_gbs"].append(nbytes / made / 1e9)
                rates["produce_gbs"].append(nbytes / (bred + made) / 1e9)
            island.tell(island.evaluate(children) if fitness is None else fitness)
    return rates


def migration_times(comm, islands, n_islands, row_dim, row_dtype, options) -> dict:
    """Ring migrations of 1 emigrant, timed (slowest rank, median), traffic checked."""
    shapes = [IslandShape(row_dim, row_dtype, options.capacity)] * n_islands
    policy = MigrationPolicy(emigrants=1, selection="best", replacement="better", unique=False)
    migrator = Migrator(comm, islands, shapes, policy, options.seed)
    ring = [[(i + 1) % n_islands] for i in range(n_islands)]
    seconds, sent = [], []
    for repeat in range(options.repeats):
        before = comm.traffic.get("migration", 0)
        align(comm)
        report = migrator.migrate(options.generations + 2 + repeat, ring)
        seconds.append(max(comm.allgather_object(report.seconds)))
        sent.append(comm.traffic.get("migration", 0) - before)
    layout = EdgeLayout(1, row_dim, row_dtype)
    remote_edges = sum(rank_of_island(ring[i][0], n_islands, comm.size) != comm.rank for i in islands)
    expected = remote_edges * (layout.nbytes + row_dim * row_dtype.itemsize)
    problems = [] if all(s == expected for s in sent) else [
        f"expected {expected} bytes sent per migration (the layout), got {sorted(set(sent))}"]
    return {"migration_ms": 1e3 * statistics.median(seconds), "migration_min_ms": 1e3 * min(seconds),
            "traffic_bytes": max(comm.allgather_object(sent[-1])), "problems": problems}


def align(comm) -> None:
    """Start the ranks together: after a barrier a rank that slept in it may wake
    milliseconds after the others; a tiny exchange with the ring neighbours (spin-polled)
    lines them up to microseconds."""
    comm.barrier()
    if comm.size > 1:
        peers = sorted({(comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size})
        with comm.purpose("align"):
            comm.exchange([(p, np.zeros(1, np.uint8)) for p in peers],
                          [(p, np.empty(1, np.uint8)) for p in peers])


def checkpoint_size(comm, islands, directory: Path, generation: int, rows_bytes: int) -> dict:
    """Write the islands with mpievo's checkpointer: bytes on disk (all ranks), the
    slowest rank's seconds; checked to hold at least ``rows_bytes`` (every archive row)."""
    # views of the archives, as the run loop's checkpoints take them
    states = {i: island.state_dict(copy=False) for i, island in islands.items()}
    checkpointer = Checkpointer(directory, keep=1, comm=comm)
    comm.barrier()
    t0 = time.perf_counter()
    info = checkpointer.save(generation, states, config={"bench": "genomes"})
    seconds = max(comm.allgather_object(time.perf_counter() - t0))
    size = sum(entry.size_bytes for entry in info.files)
    problems = [] if len(info.files) == comm.size else [
        f"expected {comm.size} checkpoint files, got {len(info.files)}"]
    if size < rows_bytes:
        problems.append(f"expected a checkpoint of at least {rows_bytes} bytes (every archive row), "
                        f"got {size}")
    return {"checkpoint_bytes": size, "checkpoint_s": seconds, "problems": problems}


def check_best(islands: dict, fitness, dim: int, dtype, rtol: float) -> list[str]:
    """Every island's decoded best genome has the fitness the island reports (``fitness``:
    the host function, ``rtol`` the agreement asked of it)."""
    problems = []
    for index, island in islands.items():
        genome, value = island.best()
        if genome.shape != (dim,) or genome.dtype != dtype:
            problems.append(f"island {index}: expected a best genome ({dim},) {dtype}, "
                            f"got {genome.shape} {genome.dtype}")
            continue
        again = float(fitness(genome[None])[0])
        if not np.isclose(again, value, rtol=rtol, atol=0.0):
            problems.append(f"island {index}: expected the decoded best's fitness {value!r}, got {again!r}")
    return problems
