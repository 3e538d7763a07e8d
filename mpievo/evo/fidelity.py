"""Cheaper fitness: score every child on a small sample of the data first, and on all of
it only where it could enter the archive.

A problem *has fidelity* when it exposes ``fidelity_rows`` (``N``, the rows of its data,
e.g. validation lines) and ``evaluate_rows(genomes, rows) -> values`` (in the problem's
own sense, like its ``func``; ``rows`` an int array of row indices). :func:`with_fidelity`
returns a copy carrying a :class:`Fidelity` (``sample``: the fraction of rows a cheap score
reads, ``margin``: in fitness units). An :class:`~mpievo.evo.island.Island` of such a
problem runs each step in two stages (:func:`screen`):

1. every child is scored on the generation's sample, ``round(sample * N)`` rows drawn
   without replacement from ``stream(seed, island, generation, "fidelity")`` (the same rows
   for every child of that generation; no state, so runs agree on any rank count and
   after a resume);
2. a child whose cheap (minimised) score is at most the archive's worst plus ``margin``
   is scored fully (with a non-full archive, every child). A child that enters the
   archive under full scoring is therefore always fully scored, as long as a sample
   errs by at most ``margin``.

What is stored: fully scored children go to the algorithm and to the archive with their
full fitness; a screened-out child goes to the algorithm with its cheap score (above the
archive's worst plus the margin, so it ranks behind every member) and never to the
archive (neither do migrants carry it). Budgets count cost: ``evaluations`` is
``ceil(rows scored / N)`` (a full score costs 1, a cheap one ``sample``), exact in rows
(the island state keeps them), so a budget in evaluations is a budget in cost units.

Example::

    problem = with_fidelity(my_problem, sample=0.1, margin=0.02)   # my_problem: fidelity_rows, evaluate_rows
    island = Island(0, problem, EngineConfig(capacity=16), seed=1)
    island.run(50)          # cheap scores for most children; island.evaluations in cost units
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


@dataclass(frozen=True)
class Fidelity:
    """The two-stage scoring of a problem with ``rows`` data rows (module docstring).

    Example::

        fidelity = Fidelity(sample=0.25, margin=0.0, rows=256)
        fidelity.sample_rows                      # 64
        fidelity.subset(seed=0, island=1, generation=7)   # the 64 rows of that generation
    """

    sample: float
    margin: float
    rows: int

    def __post_init__(self):
        check_fidelity(self.sample, self.margin)
        if isinstance(self.rows, bool) or not isinstance(self.rows, (int, np.integer)) or self.rows < 1:
            raise ValueError(f"fidelity_rows: expected an int >= 1, got {self.rows!r}")

    @property
    def sample_rows(self) -> int:
        """Rows of a cheap score: ``round(sample * rows)``, at least 1."""
        return max(1, min(self.rows, int(round(self.sample * self.rows))))

    def subset(self, seed: int, island: int, generation: int) -> np.ndarray:
        """The sorted rows of generation ``generation``'s cheap scores on ``island``."""
        rng = stream(seed, island, generation, "fidelity")
        return np.sort(rng.choice(self.rows, self.sample_rows, replace=False))


def fidelity_of(problem) -> Fidelity | None:
    """The :class:`Fidelity` ``problem`` carries (:func:`with_fidelity`), or None.

    Example::

        fidelity_of(with_fidelity(problem, 0.1)).sample     # 0.1
    """
    return getattr(problem, "fidelity", None)


def with_fidelity(problem, sample: float, margin: float = 0.0):
    """A shallow copy of ``problem`` scored in two stages (module docstring); ``sample``
    1 (every row) returns ``problem`` itself.

    Raises:
        ValueError: ``sample`` not in (0, 1], ``margin`` < 0, or a problem without
            ``fidelity_rows`` and ``evaluate_rows`` (named).

    Example::

        problem = with_fidelity(recipe_problem, sample=0.125, margin=0.02)
        mpievo.minimize(problem, config={"run": {"scheme": "island"}}, budget=200)
    """
    check_fidelity(sample, margin)
    if sample == 1:
        return problem
    rows = getattr(problem, "fidelity_rows", None)
    if rows is None or not callable(getattr(problem, "evaluate_rows", None)):
        raise ValueError(f"problem.fidelity_sample: expected a problem with fidelity_rows and "
                         f"evaluate_rows(genomes, rows), got {getattr(problem, 'name', type(problem).__name__)!r}")
    fidelity = Fidelity(float(sample), float(margin), int(rows))
    problem = copy.copy(problem)
    problem.fidelity = fidelity
    return problem


def screen(cheap: np.ndarray, worst: float, fidelity: Fidelity, budget_rows: int | None = None) -> np.ndarray:
    """Which children of minimised ``cheap`` scores to score fully: those at most
    ``worst + margin`` (``worst``: the archive's worst, +inf while it has room), best
    first, as many as ``budget_rows`` (rows left, or None) pays for; sorted indices.

    Example::

        screen(np.array([0.3, 0.1, 0.9]), worst=0.5, fidelity=Fidelity(0.1, 0.1, 100))   # [0, 1]
    """
    threshold = worst + fidelity.margin
    order = np.argsort(cheap, kind="stable")
    order = order[cheap[order] <= threshold]
    if budget_rows is not None:
        order = order[:max(0, budget_rows // fidelity.rows)]
    return np.sort(order)


def screened_step(island, generation: int, limit: int | None) -> int:
    """:meth:`Island.step <mpievo.evo.island.Island.step>` in two stages for an island of a
    problem with fidelity: cheap scores of as many children as ``limit`` cost units allow,
    then full scores where one could enter the archive (:func:`screen`); returns the
    children that entered the archive.

    Example::

        island = Island(0, with_fidelity(problem, 0.1), seed=1)
        island.initialize()
        screened_step(island, 1, None)          # what island.step(1) does
    """
    fidelity, problem, archive = island.fidelity, island.problem, island.archive
    genomes = island.ask(generation)
    island._pending = None
    budget = None if limit is None else int(limit) * fidelity.rows
    m = genomes.shape[0] if budget is None else max(1, min(genomes.shape[0], budget // fidelity.sample_rows))
    values = problem.evaluate_rows(genomes[:m], fidelity.subset(island.seed, island.index, generation))
    values = -np.asarray(values, dtype=np.float64) if problem.maximize else values
    cheap, bad = sanitized_values(values, 1, problem.name, m)
    worst = float(archive.fitness.max()) if archive.size and archive.size >= archive.limit else np.inf
    spent = m * fidelity.sample_rows
    chosen = screen(cheap, worst, fidelity, None if budget is None else budget - spent)
    told = np.maximum(cheap, worst + fidelity.margin)     # the cheap score itself where screened out
    scored, bad_full = np.empty(0), 0              # no full score: nothing to call
    if len(chosen):
        scored, bad_full = sanitized_values(island.evaluate(genomes[chosen]), 1, problem.name, len(chosen))
    told[chosen] = scored
    island._spend(len(chosen), spent)
    island.nonfinite += bad + bad_full
    return island._settle(generation, genomes, told, genomes[chosen], scored)
