"""Pareto islands over ranks: bit-identical on any rank count, exact resume, the merged
front of summary.json, and the config's refusals for several objectives."""

import json

import numpy as np
import pytest
from parallel_helpers import small_job, states_digest, stepped_scheme

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.config import ConfigError
from mpievo.evo.moo.pareto import dominance
from mpievo.evo.moo.problems import moo_problem
from mpievo.parallel import build_scheme, run_job
from mpievo.parallel.output import OutputWriter
from state_trees import through_hdf5, trees_equal

# a heterogeneous ring (NSGA-II, SMS-EMOA and MOEA/D islands, per-island settings): everything that draws
MOO = {"problem": {"name": "zdt1", "dim": 8, "n_obj": 2, "shift": False, "rotate": False, "seed": 0},
       "engine": {"algorithm": ["nsga2", "smsemoa", "moead", "smsemoa"], "capacity": 16, "batch_size": 12,
                  "sbx_eta": "5 + 10*i", "pm_eta": [10, 20, 30, 40]},
       "run": {"generations": 12},
       "migration": {"interval": 3, "emigrants": 3}}


def moo_job(nranks, **extra):
    tables = {name: {**values, **extra.get(name, {})} for name, values in MOO.items()}
    return small_job(nranks, **tables)


def test_front_in_the_result_and_summary(tmp_path):
    result = run_job(moo_job(1), SelfComm())
    front = result.front
    assert len(front["objectives"]) >= 8
    assert not dominance(front["objectives"]).any()             # non-dominated
    assert set(front["islands"].tolist()) <= {0, 1, 2, 3}
    again = moo_problem("zdt1", dim=8)(front["genomes"].astype(np.float32))   # re-evaluated as stored
    assert np.array_equal(again, front["objectives"])
    assert {"hypervolume"} <= set(result.islands[0]) or front["hypervolume"] is None
    writer = OutputWriter(tmp_path, {"problem": MOO["problem"]})
    writer.on_finish(result)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["front"]["objectives"] == front["objectives"].tolist()
    assert summary["front"]["reference_point"] == pytest.approx([1.1, 1.1])
    assert summary["front"]["size"] == len(front["genomes"]) == len(summary["front"]["genomes"])


def test_hypervolume_per_island_and_overall():
    pytest.importorskip("moocore")
    result = run_job(moo_job(1), SelfComm())
    per_island = [island["hypervolume"] for island in result.islands]
    assert 0 < max(per_island) <= result.front["hypervolume"] < 1.1 * 1.1


def test_restored_pareto_islands_continue_exactly():
    comm = SelfComm()
    job = moo_job(1)
    straight = stepped_scheme(comm, job, 10)
    first = stepped_scheme(comm, job, 4)
    saved = {i: through_hdf5(state) for i, state in first.island_states().items()}
    assert all(trees_equal(saved[i], state) for i, state in first.island_states().items())
    second = build_scheme(comm, job)
    second.restore(saved, first.run_state())
    for _ in range(6):
        second.step()
    assert states_digest(second.island_states()) == states_digest(straight.island_states())
    assert second.run_state() == straight.run_state()


@pytest.mark.mpi(min_size=1)
def test_pareto_islands_give_the_serial_result_bit_for_bit(world):
    comm = Communicator(world)
    distributed = run_job(moo_job(comm.size), comm)
    serial = run_job(moo_job(1), SelfComm())
    job = moo_job(comm.size)
    scheme = stepped_scheme(comm, job, job.run.generations)
    reference = stepped_scheme(SelfComm(), job, job.run.generations)
    mine, theirs = scheme.island_states(), reference.island_states()
    same = states_digest(mine) == states_digest({i: theirs[i] for i in mine})
    if comm.rank == 0:
        same = same and all(np.array_equal(distributed.front[k], serial.front[k])
                            for k in ("objectives", "genomes", "islands"))
    all_ranks_agree(world, same, f"rank {comm.rank}: islands {sorted(mine)} differ from the serial run")


@pytest.mark.parametrize("extra,message", [
    ({"engine": {"algorithm": "ga"}}, r"engine.algorithm: expected \['nsga2', 'smsemoa', 'moead'\].*got \['ga'\]"),
    ({"run": {"scheme": "master_worker"}}, "run.scheme: expected 'island' with several objectives"),
    ({"migration": {"replacement": "fair"}}, "migration.replacement: expected 'better' or 'worst'"),
    ({"problem": {"n_obj": 1}}, r"problem.n_obj: expected 2 for zdt1 \(its definition; or leave n_obj out\), got 1"),
    ({"problem": {"n_obj": 3}}, r"problem.n_obj: expected 2 for zdt1 \(its definition; or leave n_obj out\), got 3"),
    ({"problem": {"reference_point": [1.0]}}, r"problem.reference_point: expected 2 numbers"),
    ({"problem": {"lower": 0.5}}, "problem.lower: expected none for zdt1"),
])
def test_config_refuses_what_several_objectives_cannot_take(extra, message):
    with pytest.raises(ConfigError, match=message):
        moo_job(1, **extra)


def test_one_objective_refuses_nsga2():
    with pytest.raises(ConfigError, match="expected a one-objective algorithm for a problem with 1"):
        small_job(1, engine={"algorithm": "nsga2"})
