"""Integer genes (``Problem(..., integer=...)``): bred continuously, rounded wherever a
genome is made, so archives, populations, migrants and checkpoints hold integers, through
a resume, on 1 and 2 ranks; CMA-ES learns from its continuous samples with a margin."""

from statistics import NormalDist

import numpy as np
import pytest
from mpi_support import all_ranks_agree

import mpievo
from mpievo.comm import SelfComm
from mpievo.evo import EngineConfig, Island, Problem
from mpievo.evo.algorithms.cmaes import CMAES, keep_margin
from mpievo.evo.algorithms.cmaes_core import Strategy
from mpievo.io.loader import load_latest

DIM = 6
INTEGER = np.array([0, 2, 3])       # gene 0 in [-3, 5], genes 2 and 3 binary
LOWER = np.array([-3.0, -1.0, 0.0, 0.0, -1.0, -1.0])
UPPER = np.array([5.0, 1.0, 1.0, 1.0, 1.0, 1.0])


def mixed(X):
    """Smallest at gene 0 = 2, genes 2, 3 = (1, 0), the continuous genes at 0.3."""
    X = np.asarray(X, np.float64)
    return ((X[:, 0] - 2.2) ** 2 + (X[:, 2] - 1) ** 2 + X[:, 3] ** 2
            + ((X[:, [1, 4, 5]] - 0.3) ** 2).sum(axis=1))


def problem():
    return Problem(mixed, DIM, LOWER, UPPER, integer=INTEGER, name="mixed")


def integral(rows) -> bool:
    rows = np.asarray(rows, np.float64)
    return rows.size > 0 and bool(np.all(rows[:, INTEGER] == np.rint(rows[:, INTEGER])))


def states_integral(state: dict) -> bool:
    """The island's archive and the algorithm's population (DE, SHADE: also SHADE's
    external archive and the +inf fill) hold integers in the integer genes."""
    algorithm = state["algorithm"]["state"]
    archive = state["archive"]
    rows = [np.asarray(archive["genomes"])[:len(archive["fitness"])]]
    rows += [np.asarray(algorithm[key]) for key in ("x", "archive", "immigrants")
             if key in algorithm and np.asarray(algorithm[key]).ndim == 2 and len(algorithm[key])]
    return all(integral(r) for r in rows)


CONFIG = {"run": {"islands": 2, "generations": 6, "seed": 5, "checkpoint_every": 3},
          "engine": {"capacity": 8, "batch_size": 8, "de_population": 8, "shade_population": 8, "cma_popsize": 6},
          "migration": {"interval": 2, "emigrants": 2}}


@pytest.mark.parametrize("algorithm", ["ga", "shade"])     # the others' states: the island test below
def test_integer_genes_stay_integers_through_breeding_migration_checkpoint_and_resume(algorithm, tmp_path):
    config = {**CONFIG, "engine": {**CONFIG["engine"], "algorithm": algorithm}}
    straight = mpievo.run(config, problem(), tmp_path / "straight", overrides={"run.generations": 9},
                          comm=SelfComm())
    mpievo.run(config, problem(), tmp_path / "run", comm=SelfComm())
    checkpoint = load_latest(tmp_path / "run" / "checkpoints")
    assert checkpoint.generation == 6 and all(states_integral(s) for s in checkpoint.islands.values())
    resumed = mpievo.resume(tmp_path / "run", problem=problem(), overrides={"run.generations": 9}, comm=SelfComm())
    assert resumed.x.tobytes() == straight.x.tobytes() and resumed.fun == straight.fun
    assert integral(resumed.x[None])
    final = load_latest(tmp_path / "run" / "checkpoints")
    assert final.generation == 9 and all(states_integral(s) for s in final.islands.values())


@pytest.mark.parametrize("algorithm", ["ga", "de", "shade", "cmaes"])
def test_every_child_and_immigrant_is_integral_and_the_continuous_genes_are_not_rounded(algorithm):
    islands = [Island(i, problem(), EngineConfig(algorithm=algorithm, capacity=8, batch_size=8, de_population=8,
                                                 shade_population=8, cma_popsize=6), seed=1) for i in range(2)]
    children = []
    for island in islands:
        island.initialize()
    for g in range(1, 6):
        for island in islands:
            X = island.ask(g)
            children.append(X.copy())
            island.tell(island.evaluate(X))
        out = islands[0].emigrants(2)
        islands[1].immigrate(out.genomes, out.fitness, out.ids, out.origins, out.births)
    children = np.concatenate(children)
    assert integral(children) and all(states_integral(island.state_dict()) for island in islands)
    continuous = children[:, [1, 4, 5]]
    assert np.any(continuous != np.rint(continuous))        # only the integer genes are rounded
    assert set(np.unique(children[:, [2, 3]])) <= {0.0, 1.0}
    assert children[:, 0].min() >= -3 and children[:, 0].max() <= 5


def test_cmaes_learns_from_its_continuous_samples_and_keeps_a_margin_on_integer_genes():
    island = Island(0, problem(), EngineConfig(algorithm="cmaes", capacity=8, cma_popsize=6, cma_sigma0=0.3), seed=2)
    island.initialize()
    cma = island.algorithm
    X = island.ask(1)
    samples = cma._samples.copy()
    assert not integral(samples) and integral(X)             # the strategy keeps what it sampled
    island.tell(island.evaluate(X))
    # the margin: a mean far past a threshold with a small step is pulled back to z sigma of it
    strategy = Strategy(np.array([4.9, 0, 0.02, 0.97, 0, 0]), 1e-3, 6, UPPER - LOWER)
    keep_margin(strategy, INTEGER, LOWER, UPPER)
    std = strategy.sigma * (UPPER - LOWER)
    reach = np.abs(strategy.mean - np.array([4.5, 0, 0.5, 0.5, 0, 0]))[INTEGER] / std[INTEGER]
    assert np.allclose(reach, NormalDist().inv_cdf(1 - 1 / (6 * 6)))    # alpha = 1 / (dim * popsize)
    assert strategy.mean[1] == 0 and strategy.mean[0] > 4.5 and strategy.mean[2] < 0.5 < strategy.mean[3]


def test_a_binary_gene_keeps_its_margin_through_a_converging_cmaes_run():
    """The continuous genes converge (sigma shrinks); the binary genes' means stay within
    z_(1 - alpha) of their threshold, so they keep flipping with probability >= alpha."""
    def only_binary(X):
        X = np.asarray(X, np.float64)
        return ((X[:, [1, 4, 5]] - 0.3) ** 2).sum(axis=1) + 1e-3 * X[:, 2]

    island = Island(0, Problem(only_binary, DIM, LOWER, UPPER, integer=INTEGER),
                    EngineConfig(algorithm="cmaes", capacity=8, cma_popsize=6, cma_restarts="none"), seed=3)
    island.run(120)
    strategy = island.algorithm.strategy
    std = strategy.sigma * strategy.scale * np.sqrt(np.diagonal(strategy.cov))
    reach = NormalDist().inv_cdf(1 - 1 / (6 * 6))
    assert strategy.sigma < 0.05 * island.algorithm.sigma0           # converging
    assert np.all(np.abs(strategy.mean[[2, 3]] - 0.5) <= reach * std[[2, 3]] * (1 + 1e-9))


@pytest.mark.parametrize("integer, fragment", [
    ([True, False], "integer: expected a bool mask of shape (6,)"),
    ([0, 6], "integer: expected gene indices in [0, 6), got 6"),
    ([1.5], "integer: expected a bool mask of shape (6,) or int gene indices"),
    ([1], None),
])
def test_bad_integer_genes_are_refused(integer, fragment):
    upper = UPPER.copy()
    upper[1] = 0.5
    if fragment is None:
        with pytest.raises(ValueError, match=r"integer: expected integer bounds of integer genes, got gene 1's upper 0.5"):
            Problem(mixed, DIM, LOWER, upper, integer=integer)
        return
    with pytest.raises(ValueError) as caught:
        Problem(mixed, DIM, LOWER, UPPER, integer=integer)
    assert fragment in str(caught.value)


def test_integer_genes_are_refused_on_encoded_genomes():
    with pytest.raises(ValueError, match="problem.integer: expected dense host genomes"):
        Island(0, Problem(mixed, DIM, LOWER, UPPER, integer=INTEGER, bases=np.zeros((2, DIM))),
               EngineConfig(genome="delta"))


@pytest.mark.mpi(min_size=2)
def test_on_two_ranks_integer_genes_run_and_resume_as_one_process(world, tmp_path, mpi_tmp_path):
    config = {**CONFIG, "run": {**CONFIG["run"], "islands": 4}, "engine": {**CONFIG["engine"], "algorithm": "ga"}}
    one = mpievo.run(config, problem(), tmp_path / "one", overrides={"run.generations": 9}, comm=SelfComm())
    mpievo.run(config, problem(), mpi_tmp_path / "run")
    resumed = mpievo.resume(mpi_tmp_path / "run", problem=problem(), overrides={"run.generations": 9})
    checkpoint = load_latest(mpi_tmp_path / "run" / "checkpoints")
    ok = (resumed.x.tobytes() == one.x.tobytes() and integral(resumed.x[None])
          and all(states_integral(s) for s in checkpoint.islands.values()))
    all_ranks_agree(world, ok, f"{resumed.x} against {one.x}")


def test_a_job_files_problem_table_declares_integer_genes_by_index_or_mask():
    """``integer`` in ``[problem]``: the run keeps those genes integers, the others not;
    indices and the mask give the same run."""
    table = {"name": "sphere", "dim": 4, "lower": -3.0, "upper": [3.0, 2.5, 3.0, 2.5]}
    runs = [mpievo.minimize(config={"problem": {**table, "integer": integer}, "run": {"islands": 1},
                                    "engine": {"algorithm": "ga", "capacity": 16, "batch_size": 16}},
                            budget=200, seed=2, comm=SelfComm()) for integer in ([0, 2], [True, False, True, False])]
    assert np.array_equal(runs[0].x, runs[1].x)
    x = runs[0].x
    assert np.array_equal(x[[0, 2]], np.rint(x[[0, 2]])) and not np.array_equal(x[[1, 3]], np.rint(x[[1, 3]]))


@pytest.mark.parametrize("problem_table, message", [
    ({"integer": [0, 7]}, "problem.integer: expected gene indices in [0, 4), got 7"),
    ({"integer": [True, False]}, "problem.integer: expected a bool mask of shape (4,) or gene indices, got shape (2,)"),
    ({"integer": [0, True]}, "problem.integer: expected a non-empty list of gene indices (ints) or a mask of dim "
                             "booleans, got list [0, True]"),
    ({"integer": 3}, "problem.integer: expected a non-empty list of gene indices (ints) or a mask of dim "
                     "booleans, got int 3"),
    ({"integer": [1], "lower": [-3.0, -2.5, -3.0, -3.0]},
     "problem.integer: expected integer bounds of integer genes, got gene 1's lower -2.5"),
    ({"name": "zdt1", "n_obj": 2, "lower": None, "upper": None, "integer": [1]},
     "problem.integer: expected none with several objectives, got list [1]"),
])
def test_bad_integer_genes_of_a_job_are_refused_naming_the_key(problem_table, message):
    from mpievo.config import ConfigError, validate

    with pytest.raises(ConfigError) as caught:
        table = {"name": "sphere", "dim": 4, "lower": -3.0, "upper": 3.0, **problem_table}
        validate({"problem": {key: value for key, value in table.items() if value is not None}}, 1)
    assert message in str(caught.value)
