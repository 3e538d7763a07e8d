"""The island scheme takes the validated job's objects as they are (one process)."""

import numpy as np
import pytest
from mpi4py import MPI
from parallel_helpers import small_job

from mpievo.comm import Communicator
from mpievo.evo.engine_config import EngineConfig
from mpievo.evo.problems import make_problem
from mpievo.parallel import IslandScheme, MigrationSchedule, build_scheme, build_topology
from mpievo.parallel import scheme as scheme_module

# pytest-mpi also runs unmarked tests on every rank of an MPI stage
pytestmark = pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="one process, COMM_SELF")


def _self():
    return Communicator(MPI.COMM_SELF)


def test_build_scheme_uses_the_validated_objects_without_rebuilding_them(monkeypatch):
    job = small_job(1, engine={"dtype": ["float32", "float64", "float64", "float32"], "capacity": "8 + 2*i"},
                    migration={"topology": "random", "degree": 2})

    def refuse(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(scheme_module, "build_topology", refuse)          # built once, by validate
    monkeypatch.setattr(EngineConfig, "resolve_all", refuse)              # resolved once, by validate
    scheme = build_scheme(_self(), job)
    assert scheme.schedule is job.schedule and scheme.policy is job.policy
    assert [scheme.genome_shape(i) for i in range(4)] == [
        (6, np.dtype("float32")), (6, np.dtype("float64")), (6, np.dtype("float64")), (6, np.dtype("float32"))]
    assert [scheme.migrator.shapes[i].capacity for i in range(4)] == [8, 10, 12, 14]
    assert [scheme.islands[i].config.capacity for i in range(4)] == [8, 10, 12, 14]


def test_island_scheme_wants_resolved_engines_and_a_matching_topology():
    problem = make_problem("sphere", 3)
    with pytest.raises(ValueError, match=r"expected one resolved EngineConfig per island .* islands \[0, 1\]"):
        IslandScheme(_self(), problem, [EngineConfig(capacity=[4, 8])] * 2)
    with pytest.raises(ValueError, match="expected a topology of 2 islands, got one of 3"):
        IslandScheme(_self(), problem, EngineConfig(capacity=4).resolve_all(2),
                     schedule=MigrationSchedule(build_topology("ring", 3)))
    default = IslandScheme(_self(), problem, EngineConfig(capacity=4).resolve_all(3))
    assert default.schedule.destinations(0) == [[1], [2], [0]] and default.schedule.interval == 10
