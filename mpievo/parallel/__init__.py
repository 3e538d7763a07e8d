"""mpievo.parallel: islands over MPI ranks (the only place where comm and evo meet; runtime only).

* :mod:`.migrator` -- synchronous buffer migration: edges, packing, hash exchange, one
  message of records per rank pair, genomes straight from and into their arrays (the
  policies live in :mod:`mpievo.evo.migration_policy`, the topologies in :mod:`mpievo.rules`).
* :mod:`.world` -- COMM_WORLD under a launcher, else SelfComm (no MPI).
* :mod:`.scheme` -- the :class:`Scheme` protocol and the :class:`IslandScheme`.
* :mod:`.runner` -- the run loop (logging, checkpoints, stop requests).
* :mod:`.job` -- build and run a validated TOML job (:func:`run_job`).
* :mod:`.output` -- progress line, per-island logs, summary.json, convergence plot.
* :mod:`.device_binding` -- bind each rank to a node-local GPU when there is one.

The MPI-free rules (placement, topologies, adaptive interval, budget shares) live in
:mod:`mpievo.rules` and are re-exported here; the benchmarks in :mod:`mpievo.bench`.
"""

from ..rules.adaptive import AdaptiveInterval, next_interval
from ..rules.budget import SharePlan, plan
from .device_binding import DeviceBinding, bind_device, choose_device, local_rank
from .job import best_genome_bytes, build_problem, build_scheme, run_job
from ..rules.mapping import islands_of_rank, rank_of_island
from ..evo.migration_policy import MigrationPolicy
from .migrator import IslandShape, MigrationReport, Migrator
from .runner import LogPoint, RunLoop, RunResult, RunSettings
from ..rules.schedule import MigrationSchedule
from .scheme import BestMember, IslandRecord, IslandScheme, Scheme, StepResult
from ..rules.topology import (TOPOLOGIES, bidirectional_ring, build_topology, fully_connected, graph,
                              random_topology, ring, torus, unconnected)
from .world import launched, world_comm

__all__ = [
    "SharePlan", "plan", "launched", "world_comm",
    "AdaptiveInterval", "next_interval", "DeviceBinding", "bind_device", "choose_device", "local_rank",
    "best_genome_bytes", "build_problem", "build_scheme", "run_job", "islands_of_rank",
    "rank_of_island", "IslandShape", "MigrationPolicy", "MigrationReport", "Migrator", "LogPoint",
    "RunLoop", "RunResult", "RunSettings", "BestMember", "IslandRecord", "IslandScheme",
    "MigrationSchedule", "Scheme", "StepResult", "TOPOLOGIES", "bidirectional_ring",
    "build_topology", "fully_connected", "graph", "random_topology", "ring", "torus", "unconnected",
]
