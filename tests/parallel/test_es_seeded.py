"""SeededES: members built one at a time from the key, the fitness all-gathered, the update
rebuilt in place: the one-process bits on any rank count, resume, bytes independent of
the genome size."""

import numpy as np
import pytest
from test_es_ranks import bytes_by_dim

from mpi_support import all_ranks_agree
from mpievo.comm import Communicator
from mpievo.comm.protocol import SelfComm
from mpievo.evo.algorithms.es import ES
from mpievo.evo.streams import StreamKeys
from mpievo.parallel.es_group import SeededES
from state_trees import through_hdf5, trees_equal

SHIFT = np.linspace(-1.0, 1.0, 37)


def sphere(row):
    return float(np.sum((row.astype(np.float64) - SHIFT[: len(row)]) ** 2))


def seeded(comm, dim=37, **settings):
    settings = {"popsize": 6, "sigma": 0.05, "learning_rate": 0.05, **settings}
    return SeededES(comm, sphere, np.zeros(dim, np.float32), ES(**settings), seed=3, lower=-2.0, upper=2.0)


def test_seeded_run_equals_the_island_rows_and_improves():
    run = seeded(SelfComm())
    mean = run.es.mean.copy()
    fitness = run.step()
    key, base = StreamKeys(3, 0, 1).counter_start()
    before = ES(popsize=6, sigma=0.05)
    before.start(mean, -2.0, 2.0)
    rows = np.empty((6, 37), np.float32)
    for i in range(6):     # the members of the generation's key, from the mean before the step
        before.member_into(rows[i], i, key, base, 0.05)
    assert np.array_equal(fitness, [sphere(np.clip(r, -2, 2)) for r in rows])
    start = sphere(mean)
    run.run(60)
    assert sphere(run.es.mean) < 0.2 * start and run.evaluations == 61 * 6


def test_seeded_refuses_a_bad_mean():
    with pytest.raises(ValueError, match=r"expected the mean as a non-empty 1-D float array, got shape \(2, 2\)"):
        SeededES(SelfComm(), sphere, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="es.noise: expected 'full' for SeededES .*, got 'lowrank'"):
        SeededES(SelfComm(), sphere, np.zeros(4), ES(noise="lowrank"))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("settings", [{}, {"optimizer": "sgd", "momentum": 0.0, "shaping": "zscore"}])
def test_seeded_over_ranks_is_one_process_bit_for_bit_and_resumes(world, settings):
    comm = Communicator(world)
    whole = seeded(comm, **settings).run(6)
    half = seeded(comm, **settings).run(3)
    resumed = seeded(comm, **settings)
    resumed.load_state_dict(through_hdf5(half.state_dict()))
    resumed.run(3)
    serial = seeded(SelfComm(), **settings).run(6)
    ok = trees_equal(whole.state_dict(), serial.state_dict()) and trees_equal(resumed.state_dict(),
                                                                                serial.state_dict())
    all_ranks_agree(world, ok, f"mean differs from one process by {np.abs(whole.es.mean - serial.es.mean).max()}")


@pytest.mark.mpi(min_size=2)
def test_seeded_sends_popsize_scalars_whatever_the_genome_size(world):
    def run(comm, dim):
        SeededES(comm, lambda row: float(row[0]), np.zeros(dim, np.float32), ES(popsize=8), seed=1).run(2)

    sent = bytes_by_dim(world, (10, 20_000), run, "es")
    ok = sent[10] == sent[20_000] and 0 < sent[10] <= 2 * 8 * 8
    all_ranks_agree(world, ok, f"bytes by genome size: {sent}")
