"""Cheaper fitness: race every child on growing samples of the data, scored on all of it
only where it could enter the archive.

A problem *has fidelity* when it exposes ``fidelity_rows`` (``N``, the rows of its data,
e.g. validation lines) and ``evaluate_rows(genomes, rows) -> values``: the mean over
``rows`` (an int array of row indices) of a per-row value whose mean over all ``N`` rows is
the problem's fitness, in the problem's own sense. :func:`with_fidelity` returns a copy
carrying a :class:`Fidelity` (``sample``: the fraction of rows of the first stage,
``margin``: in fitness units, ``growth``: how much each stage multiplies the rows read). An
:class:`~mpievo.evo.island.Island` of such a problem runs each step as a race
(:func:`screened_step`, successive halving against a threshold):

1. the generation's rows are put in an order drawn from ``stream(seed, island,
   generation, "fidelity")`` (the same for every child of that generation; no state, so
   runs agree on any rank count and after a resume); stage ``k`` has read its first
   ``round(sample * N) * growth**k`` rows (the last stage all ``N``), each stage scoring
   only the rows the last one did not;
2. with a full archive, the archive's worst member is scored on each stage's rows beside
   the children (but the last): its full score, known, is a control variate. A child's
   estimate is ``worst + (child's mean - worst's mean)`` on the rows read, a paired
   difference whose error is far below that of the child's mean alone when the two
   agree on most rows;
3. a child stays in the race while its estimate is at most the archive's worst plus
   ``margin`` (with a non-full archive: always); a child that reaches the last stage is
   scored on all rows, its full fitness. A child that enters the archive under full
   scoring therefore always gets there, as long as no stage's paired difference errs by
   more than ``margin``.

What is stored: fully scored children go to the algorithm and to the archive with their
full fitness; a child dropped from the race goes to the algorithm with its estimate (above
the archive's worst plus the margin, so it ranks behind every member) and never to the
archive (neither do migrants carry it). A child whose score on a stage is not finite is
dropped as failed (+inf). Budgets count cost: ``evaluations`` is ``ceil(rows scored /
N)`` (every row each child and the reference read; a child raced to the end costs 1),
exact in rows (the island state keeps them), so a budget in evaluations is a budget in
cost units.

Example::

    problem = with_fidelity(my_problem, sample=1/16, margin=0.02)   # my_problem: fidelity_rows, evaluate_rows
    island = Island(0, problem, EngineConfig(capacity=16), seed=1)
    island.run(50)          # most children dropped early; island.evaluations in cost units
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .moo.problems import sanitized_values
from .streams import stream


def check_fidelity(sample, margin) -> None:
    """Raise ValueError unless ``sample`` is in (0, 1] and ``margin`` >= 0 (finite).

    Example::

        check_fidelity(0.1, 0.02)      # fine; check_fidelity(0, 0) raises
    """
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 < sample <= 1:
        raise ValueError(f"problem.fidelity_sample: expected a fraction in (0, 1], got {sample!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < np.inf:
        raise ValueError(f"problem.fidelity_margin: expected a finite number >= 0, got {margin!r}")


#: how many times the rows of the last stage each stage of the race reads (``growth``)
GROWTH = 4


@dataclass(frozen=True)
class Fidelity:
    """The racing of a problem with ``rows`` data rows (module docstring).

    Example::

        fidelity = Fidelity(sample=1/16, margin=0.0, rows=256)
        fidelity.stages                           # (16, 64, 256): rows read by each stage's end
        fidelity.order(seed=0, island=1, generation=7)[:16]   # the first stage's rows
    """

    sample: float
    margin: float
    rows: int
    growth: int = GROWTH

    def __post_init__(self):
        check_fidelity(self.sample, self.margin)
        if isinstance(self.rows, bool) or not isinstance(self.rows, (int, np.integer)) or self.rows < 1:
            raise ValueError(f"fidelity_rows: expected an int >= 1, got {self.rows!r}")
        if isinstance(self.growth, bool) or not isinstance(self.growth, (int, np.integer)) or self.growth < 2:
            raise ValueError(f"fidelity growth: expected an int >= 2, got {self.growth!r}")

    @property
    def sample_rows(self) -> int:
        """Rows of the first stage: ``round(sample * rows)``, at least 1."""
        return max(1, min(self.rows, int(round(self.sample * self.rows))))

    @property
    def stages(self) -> tuple[int, ...]:
        """Rows read by the end of each stage: ``sample_rows`` times ``growth**k``, the
        last one all rows."""
        sizes = [self.sample_rows]
        while sizes[-1] < self.rows:
            sizes.append(min(self.rows, sizes[-1] * self.growth))
        return tuple(sizes)

    def order(self, seed: int, island: int, generation: int) -> np.ndarray:
        """Every row, in the order the stages of generation ``generation`` on ``island``
        read them (a permutation drawn from the island's stream)."""
        return stream(seed, island, generation, "fidelity").permutation(self.rows)


def fidelity_of(problem) -> Fidelity | None:
    """The :class:`Fidelity` ``problem`` carries (:func:`with_fidelity`), or None.

    Example::

        fidelity_of(with_fidelity(problem, 0.1)).sample     # 0.1
    """
    return getattr(problem, "fidelity", None)


def with_fidelity(problem, sample: float, margin: float = 0.0, growth: int = GROWTH):
    """A shallow copy of ``problem`` raced on growing samples (module docstring);
    ``sample`` 1 (every row) returns ``problem`` itself.

    Raises:
        ValueError: ``sample`` not in (0, 1], ``margin`` < 0, ``growth`` < 2, or a problem
            without ``fidelity_rows`` and ``evaluate_rows`` (named).

    Example::

        problem = with_fidelity(recipe_problem, sample=1/16, margin=0.02)
        mpievo.minimize(problem, config={"run": {"scheme": "island"}}, budget=200)
    """
    check_fidelity(sample, margin)
    if sample == 1:
        return problem
    rows = getattr(problem, "fidelity_rows", None)
    if rows is None or not callable(getattr(problem, "evaluate_rows", None)):
        raise ValueError(f"problem.fidelity_sample: expected a problem with fidelity_rows and "
                         f"evaluate_rows(genomes, rows), got {getattr(problem, 'name', type(problem).__name__)!r}")
    fidelity = Fidelity(float(sample), float(margin), int(rows), growth)
    problem = copy.copy(problem)
    problem.fidelity = fidelity
    return problem


def screened_step(island, generation: int, limit: int | None) -> int:
    """:meth:`Island.step <mpievo.evo.island.Island.step>` as a race for an island of a
    problem with fidelity (module docstring): as many children as ``limit`` cost units
    let start, each stage scoring the ones still in it (best first, as many as the cost
    left pays for); returns the children that entered the archive.

    Example::

        island = Island(0, with_fidelity(problem, 0.1), seed=1)
        island.initialize()
        screened_step(island, 1, None)          # what island.step(1) does
    """
    fidelity, problem, archive = island.fidelity, island.problem, island.archive
    genomes = island.ask(generation)
    island._pending = None
    left = np.inf if limit is None else int(limit) * fidelity.rows
    order = fidelity.order(island.seed, island.index, generation)
    stages = fidelity.stages
    full = bool(archive.size) and archive.size >= archive.limit
    worst = float(archive.fitness.max()) if full else np.inf
    reference = archive.genomes[int(np.argmax(archive.fitness))] if full else None
    paired = reference is not None and len(stages) > 1 and left >= 2 * stages[0]
    first = genomes.shape[0] if limit is None else int(min(genomes.shape[0], left // stages[0] - paired))
    alive = np.arange(max(1, first))
    sums = np.zeros(genomes.shape[0])             # minimised per-row values summed over the rows read
    reference_sum, read, spent, failed = 0.0, 0, 0, 0
    estimate = np.full(genomes.shape[0], np.inf)
    for stage, size in enumerate(stages):
        new = np.sort(order[read:size])
        last = size == fidelity.rows
        with_reference = paired and not last
        if stage and len(alive):                  # the best first, as many as the rows left pay for
            afford = int(min(len(alive), left // len(new) - with_reference))
            alive = alive[np.argsort(estimate[alive], kind="stable")[:max(0, afford)]]
            alive.sort()
        if not len(alive):
            break
        batch = np.concatenate([reference[None].astype(genomes.dtype), genomes[alive]]) if with_reference \
            else genomes[alive]
        values = problem.evaluate_rows(batch, new)
        values = -np.asarray(values, dtype=np.float64) if problem.maximize else np.asarray(values, np.float64)
        values, bad = sanitized_values(values, 1, problem.name, len(batch))
        spent += len(batch) * len(new)
        left -= len(batch) * len(new)
        if with_reference:
            if not np.isfinite(values[0]):        # no control: compare the children's own means
                paired = with_reference = False
                bad -= 1
            else:
                reference_sum += values[0] * len(new)
            values = values[1:]
        failed += bad
        sums[alive] += values * len(new)
        read = size
        estimate[alive] = sums[alive] / size + ((worst - reference_sum / size) if with_reference else 0.0)
        estimate[alive[~np.isfinite(values)]] = np.inf
        alive = alive[np.isfinite(values) & (last | (estimate[alive] <= worst + fidelity.margin))]
        if last:
            break
    chosen = alive if read == fidelity.rows else alive[:0]
    told = np.maximum(estimate[:len(genomes)], worst + fidelity.margin)   # estimates where dropped
    scored = sums[chosen] / fidelity.rows
    told[chosen] = scored
    island._spend(0, spent)
    island.nonfinite += failed
    return island._settle(generation, genomes, told[:max(1, first)], genomes[chosen], scored)
