"""ES over a group of ranks for genomes too large to hold a population: seeds and scalars
on the wire (:class:`SeededES`).

The island path (``engine.algorithm = "es"`` under ``run.scheme = "replicated"``) holds
the generation's ``popsize`` member rows on every rank. For a genome of 1e8 genes and
more, :class:`SeededES` holds one: every rank keeps the mean (and the optimizer's
moments) replicated, builds only the members of its share (:func:`.groups.row_blocks` of
the population) one at a time into one work row from the generation's key
(:meth:`mpievo.evo.algorithms.es.ES.member_into`), evaluates it, and all-gathers the
``popsize`` float64 fitness values through mpievo's all-gather (purpose ``"es"`` in
``comm.traffic``). Every rank then rebuilds the same update from the key in place
(:meth:`~mpievo.evo.algorithms.es.ES.update`), so the replicas never diverge and the
result is the same bits on any rank count. Per generation a rank sends at most
``8 * popsize`` bytes, whatever the genome size.

Memory per rank: the mean, the moments (Adam: two, SGD with momentum: one, plain SGD:
none), one work row and the float32 noise of the pair being evaluated (its two members
from one draw), each one genome, plus what the fitness needs (a model).

Example::

    comm = Communicator()                       # or SelfComm() in one process
    run = SeededES(comm, lambda x: float(x @ x), np.ones(10**6, np.float32),
                   ES(popsize=30, sigma=1e-3, learning_rate=5e-4, optimizer="sgd", momentum=0.0,
                      shaping="zscore"), seed=0)
    run.run(10)
    run.es.mean                                 # the same bits on every rank
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mpievo.kernels import es_noise

from ..evo.algorithms.es import ES
from ..evo.streams import StreamKeys
from .groups import row_blocks

STATE_FORMAT = 1


class SeededES:
    """One ES run replicated over ``comm``'s ranks, members evaluated in shares (see the
    module docstring).

    Args:
        comm: an mpievo Communicator (``allgather``, ``purpose``), or ``SelfComm``.
        fitness: ``fitness(genome) -> float``, minimised, of one host row (it may write the
            row into a model: a :class:`~mpievo.torch.ModelProblem`'s ``evaluate`` of
            ``row[None]``).
        mean: the starting mean (e.g. a merged model's genome); its dtype is the members'.
        es: the :class:`~mpievo.evo.algorithms.es.ES` settings (default ``ES()``).
        seed, island: the keys of the noise (as an island's).
        lower, upper: the box (scalars or arrays; default unbounded).

    Raises:
        ValueError: a mean that is not a non-empty 1-D real array, or low-rank noise.

    Example::

        run = SeededES(SelfComm(), sphere_row, np.zeros(1000), ES(popsize=8), seed=1)
        fitness = run.step()          # the generation's 8 values, the same on every rank
    """

    def __init__(self, comm, fitness: Callable[[np.ndarray], float], mean, es: ES | None = None, *,
                 seed: int = 0, island: int = 0, lower=-np.inf, upper=np.inf):
        mean = np.asarray(mean)
        if mean.ndim != 1 or not len(mean) or mean.dtype.kind != "f":
            raise ValueError(f"expected the mean as a non-empty 1-D float array, got shape {mean.shape} "
                             f"of dtype {mean.dtype}")
        self.comm = comm
        self.fitness = fitness
        self.es = ES() if es is None else es
        if self.es.noise != "full":
            raise ValueError(f"es.noise: expected 'full' for SeededES (members built one at a time), "
                             f"got {self.es.noise!r}")
        self.seed, self.island = int(seed), int(island)
        StreamKeys(self.seed, self.island, 0).counter_start()     # validates the keys early
        self.es.start(mean, lower, upper)
        self.generation = 0
        self.evaluations = 0
        self._row = np.empty(len(mean), mean.dtype)
        self._z = np.empty(len(mean), np.float32)      # the noise of the pair being evaluated

    def step(self) -> np.ndarray:
        """One generation: this rank's members evaluated, the fitness all-gathered, the mean
        updated from the key. Returns every member's fitness (float64, minimised)."""
        es, generation = self.es, self.generation + 1
        key, base = StreamKeys(self.seed, self.island, generation).counter_start()
        sigma = es.current_sigma()
        blocks = row_blocks(es.popsize, self.comm.size)
        first, stop = blocks[self.comm.rank]
        local = np.empty(stop - first, np.float64)
        drawn = -1
        for i, member in enumerate(range(first, stop)):
            if member // 2 != drawn:           # both members of a pair from one draw
                drawn = member // 2
                es_noise.noise(self._z, key, base, pair=drawn, stride=es.stride)
            es_noise.shift(self._row, es.mean, -sigma if member % 2 else sigma, self._z)
            es.clip(self._row)
            local[i] = float(self.fitness(self._row))
        local[~np.isfinite(local)] = np.inf
        fitness = self._gather(local, [b - a for a, b in blocks])
        es.update(fitness, key, base, sigma)
        self.generation = generation
        self.evaluations += es.popsize
        return fitness

    def _gather(self, local: np.ndarray, counts: list[int]) -> np.ndarray:
        if self.comm.size == 1:
            return local
        fitness = np.empty(sum(counts), np.float64)
        with self.comm.purpose("es"):
            self.comm.allgather(local, fitness, counts=counts)
        return fitness

    def run(self, generations: int) -> "SeededES":
        """:meth:`step` ``generations`` times."""
        for _ in range(int(generations)):
            self.step()
        return self

    def state_dict(self) -> dict:
        """The mean, the optimizer's state and the counters (plain arrays and ints), the same
        on every rank."""
        return {"format": STATE_FORMAT, "seed": self.seed, "island": self.island, "generation": self.generation,
                "evaluations": self.evaluations, "es": self.es.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (saved on any rank count) bit for bit.

        Raises:
            ValueError: another format, seed or island, or ES state of another shape.
        """
        for key, value in (("format", STATE_FORMAT), ("seed", self.seed), ("island", self.island)):
            if state.get(key) != value:
                raise ValueError(f"expected {key} = {value!r} in the ES state, got {state.get(key)!r}")
        self.es.load_state_dict(state["es"])
        self.generation = int(state["generation"])
        self.evaluations = int(state["evaluations"])
