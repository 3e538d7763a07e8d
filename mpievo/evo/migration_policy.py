"""Migration policies: which members leave an island and how arrivals enter.

The one home of migration on the engine side (as pagmo's s_policy / r_policy and
DEAP's migRing): the parallel layer only transports what these choose, and
:meth:`Island.emigrants` / :meth:`Island.immigrate` delegate here.

Selection policies (:data:`SELECTION_POLICIES`) are plain callables
``select(archive, k, rng, eligible) -> slots``: up to ``k`` distinct member slots
among the ``eligible`` ones (a bool mask over the members; None: all).

Replacement policies (:data:`REPLACEMENT_POLICIES`) are plain callables
``replace(archive, migrants, k) -> entered``: they write migrants into the archive
and return the indices (ascending, into ``migrants``) of those that entered; ``k``
is the policy's rate (``fair`` lets at most ``k`` in; the others ignore it).

Uniqueness (elite-unique migration) uses the archive's genome hashes and duplicate
test only (:meth:`Archive.hashes`, :meth:`Archive.duplicate_mask`): a sender
excludes members whose hash the receiver holds (:func:`choose_emigrants`), and a
receiver drops migrants it holds or that an earlier migrant repeats
(:func:`unheld`), before its replacement policy runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import device
from .archive import Archive
from .moo.problems import sanitized_values


class Migrants(NamedTuple):
    """Genomes leaving or entering an island, with their records (field order matches
    :meth:`Island.immigrate`, so ``island.immigrate(*migrants)`` works).

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(4, 2, "float64")
        >>> _ = archive.insert(np.array([[0., 0.], [1., 1.]]), np.array([3., 1.]), np.arange(2), np.zeros(2, int),
        ...                    np.zeros(2, int))
        >>> migrants = choose_emigrants(archive, 1, "best")
        >>> migrants.genomes, migrants.fitness
        (array([[1., 1.]]), array([1.]))
    """

    genomes: np.ndarray   # (k, dim), host or device (a device island's)
    fitness: np.ndarray   # (k,) float64, minimised; (k, n_obj) objectives of a multi-objective island
    ids: np.ndarray       # (k,) int64
    origins: np.ndarray   # (k,) int64, island each genome was born on
    births: np.ndarray    # (k,) int64, generation each genome was born in

    @classmethod
    def of_members(cls, archive: Archive, slots) -> "Migrants":
        """Copies of the archive members in ``slots`` (in that order)."""
        # one copy of each emigrant (indexing copies), where the archive keeps its genomes
        slots = np.asarray(slots, dtype=np.intp)
        return cls(archive.take(slots), archive.objectives[slots], archive.ids[slots],
                   archive.origins[slots], archive.births[slots])

    def take(self, indices) -> "Migrants":
        """The migrants at ``indices`` (in that order)."""
        indices = np.asarray(indices, dtype=np.intp)
        if np.array_equal(indices, np.arange(len(self.fitness))):
            return self      # all of them: no copy of genomes that may be gigabytes
        return Migrants(device.take(self.genomes, indices), *(column[indices] for column in self[1:]))


def policy_of(policies: dict, name, what: str):
    """The callable named ``name`` in ``policies`` (ValueError naming ``what`` otherwise).

    Example:
        >>> policy_of(SELECTION_POLICIES, "best", "selection").__name__
        'select_best'
    """
    if not isinstance(name, str) or name not in policies:
        raise ValueError(f"expected {what} among {tuple(policies)}, got {name!r}")
    return policies[name]


# --- selection ---------------------------------------------------------------------

def select_best(archive: Archive, k: int, rng, eligible: np.ndarray | None) -> np.ndarray:
    """The ``k`` best eligible members, best first (ties: lower slot first).

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(4, 2, "float64")
        >>> _ = archive.insert(np.array([[0., 0.], [1., 1.], [2., 2.]]), np.array([3., 1., 2.]), np.arange(3),
        ...                    np.zeros(3, int), np.zeros(3, int))
        >>> select_best(archive, 2, None, None)        # the slots of fitness 1 and 2
        array([1, 2])
    """
    ranking = archive.ranking()
    if eligible is not None:
        ranking = ranking[eligible[ranking]]
    return ranking[:k]


def select_random(archive: Archive, k: int, rng: np.random.Generator | None,
                  eligible: np.ndarray | None) -> np.ndarray:
    """``k`` distinct eligible members drawn from ``rng`` (all of them when fewer).

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(4, 2, "float64")
        >>> _ = archive.insert(np.array([[0., 0.], [1., 1.], [2., 2.]]), np.array([3., 1., 2.]), np.arange(3),
        ...                    np.zeros(3, int), np.zeros(3, int))
        >>> len(select_random(archive, 2, np.random.default_rng(0), None))
        2
    """
    if rng is None:
        raise ValueError("expected a Generator for selection policy 'random', got None")
    pool = np.arange(archive.size) if eligible is None else np.flatnonzero(eligible)
    if len(pool) == 0:
        return pool
    return rng.choice(pool, size=min(k, len(pool)), replace=False)


#: MigrationPolicy.selection name -> select(archive, k, rng, eligible) -> slots
SELECTION_POLICIES = {"best": select_best, "random": select_random}


def choose_emigrants(archive: Archive, k: int, policy: str, rng=None, exclude=None) -> Migrants:
    """Copies of up to ``k`` members chosen by selection policy ``policy``.

    Args:
        exclude: uint64 genome hashes the receiver holds (from its
            :meth:`Archive.hashes`); members with such a hash are not eligible.
            None: every member is.

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(4, 2, "float64")
        >>> _ = archive.insert(np.array([[0., 0.], [1., 1.]]), np.array([3., 1.]), np.arange(2), np.zeros(2, int),
        ...                    np.zeros(2, int))
        >>> choose_emigrants(archive, 1, "best").fitness
        array([1.])
    """
    select = policy_of(SELECTION_POLICIES, policy, "selection policy")
    eligible = None if exclude is None else ~np.isin(archive.hashes(), exclude)
    return Migrants.of_members(archive, select(archive, k, rng, eligible))


# --- replacement -------------------------------------------------------------------

def unheld(archive: Archive, migrants: Migrants) -> np.ndarray:
    """Indices of the migrants whose genome the archive does not hold and that no
    earlier migrant repeats.

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(4, 2, "float64")
        >>> _ = archive.insert(np.array([[0., 0.], [1., 1.]]), np.array([3., 1.]), np.arange(2), np.zeros(2, int),
        ...                    np.zeros(2, int))
        >>> unheld(archive, choose_emigrants(archive, 1, "best"))   # the archive holds its own best
        array([], dtype=int64)
    """
    return np.flatnonzero(~archive.duplicate_mask(migrants.genomes))


def replace_worst(archive: Archive, migrants: Migrants, k: int) -> np.ndarray:
    """Migrants fill free slots, then evict the worst members, unconditionally.

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(2, 1, "float64")
        >>> _ = archive.insert(np.array([[5.], [6.]]), np.array([1., 2.]), np.arange(2), np.zeros(2, int),
        ...                    np.zeros(2, int))
        >>> arrival = Migrants(np.array([[7.]]), np.array([9.]), np.array([7]), np.array([1]), np.array([0]))
        >>> _ = replace_worst(archive, arrival, 1)
        >>> sorted(archive.fitness.tolist())       # 9 entered though worse than both
        [1.0, 9.0]
    """
    keep = unheld(archive, migrants) if archive.unique else np.arange(len(migrants.fitness))
    # Free slots first (in order, so no gap), then the worst members, worst first.
    slots = np.concatenate([np.arange(archive.size, archive.limit), archive.ranking()[::-1]])[:len(keep)]
    keep = keep[:len(slots)]
    archive.replace(slots, *migrants.take(keep))
    return keep


def replace_if_better(archive: Archive, migrants: Migrants, k: int) -> np.ndarray:
    """Migrants merge like children: each enters only when better than the worst member.

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(2, 1, "float64")
        >>> _ = archive.insert(np.array([[5.], [6.]]), np.array([1., 2.]), np.arange(2), np.zeros(2, int),
        ...                    np.zeros(2, int))
        >>> arrival = Migrants(np.array([[7.], [8.]]), np.array([9., 0.5]), np.array([7, 8]), np.array([1, 1]),
        ...                    np.array([0, 0]))
        >>> _ = replace_if_better(archive, arrival, 2)
        >>> sorted(archive.fitness.tolist())       # 0.5 entered, 9 did not
        [0.5, 1.0]
    """
    return archive.insert(*migrants).entered


def replace_fair(archive: Archive, migrants: Migrants, k: int) -> np.ndarray:
    """Like :func:`replace_if_better`, but only the ``k`` best migrants may enter
    (pagmo's fair_replace; ties: the earlier migrant).

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(3, 1, "float64")
        >>> _ = archive.insert(np.array([[5.], [6.], [7.]]), np.array([1., 2., 3.]), np.arange(3), np.zeros(3, int),
        ...                    np.zeros(3, int))
        >>> arrival = Migrants(np.array([[8.], [9.]]), np.array([0.5, 0.7]), np.array([8, 9]), np.array([1, 1]),
        ...                    np.array([0, 0]))
        >>> _ = replace_fair(archive, arrival, 1)  # k = 1: only the best migrant may enter
        >>> sorted(archive.fitness.tolist())
        [0.5, 1.0, 2.0]
    """
    best = np.sort(np.lexsort((np.arange(len(migrants.fitness)), migrants.fitness))[:k])
    return best[archive.insert(*migrants.take(best)).entered]


#: MigrationPolicy.replacement name -> replace(archive, migrants, k) -> entered
REPLACEMENT_POLICIES = {"worst": replace_worst, "better": replace_if_better, "fair": replace_fair}


def checked_migrants(archive: Archive, problem, n_obj: int, genomes, fitness, ids, origins, births) -> Migrants:
    """Immigrant columns validated against ``problem`` (its dim, ``n_obj`` objectives), the
    genomes cast to ``archive``'s dtype, scalar ids/origins/births broadcast.

    Raises:
        ValueError: a column of another shape (named, with the shape expected).

    Example::

        checked_migrants(island.archive, island.problem, 1, rows, fitness, ids, 3, 10)   # origin 3, born at 10
    """
    shape = tuple(np.shape(genomes) if not device.is_device_array(genomes) else genomes.shape)
    if len(shape) != 2 or shape[1] != problem.dim:
        raise ValueError(f"expected immigrant genomes of shape (k, {problem.dim}), got {shape}")
    n = shape[0]
    expected = (n,) if n_obj == 1 else (n, n_obj)
    if np.shape(fitness) != expected:
        raise ValueError(f"expected immigrant fitness of shape {expected}, got {np.shape(fitness)}")
    fitness, _ = sanitized_values(fitness, n_obj, problem.name)
    columns = []
    for name, column in (("ids", ids), ("origins", origins), ("births", births)):
        column = np.asarray(column, dtype=np.int64)
        if column.ndim == 0:
            column = np.full(n, column)
        elif column.shape != (n,):
            raise ValueError(f"expected immigrant {name} of shape ({n},), got {column.shape}")
        columns.append(column)
    return Migrants(archive.as_rows(genomes, "immigrant genomes"), fitness, *columns)


def admit(archive: Archive, migrants: Migrants, policy: str, k: int, unique: bool = False) -> Migrants:
    """Take ``migrants`` into the archive under replacement policy ``policy``.

    Args:
        k: the policy's rate (``fair``: most migrants that may enter).
        unique: first drop migrants the archive holds or an earlier migrant repeats.

    Returns:
        The migrants that entered.

    Example:
        >>> import numpy as np
        >>> from mpievo.evo import Archive
        >>> archive = Archive(2, 1, "float64")
        >>> _ = archive.insert(np.array([[5.], [6.]]), np.array([1., 2.]), np.arange(2), np.zeros(2, int),
        ...                    np.zeros(2, int))
        >>> arrival = Migrants(np.array([[7.], [8.]]), np.array([9., 0.5]), np.array([7, 8]), np.array([1, 1]),
        ...                    np.array([0, 0]))
        >>> admit(archive, arrival, "better", 2).fitness
        array([0.5])
    """
    replace = policy_of(REPLACEMENT_POLICIES, policy, "replacement policy")
    if unique:
        migrants = migrants.take(unheld(archive, migrants))
    if len(migrants.fitness) == 0:
        return migrants
    return migrants.take(replace(archive, migrants, k))


@dataclass(frozen=True)
class MigrationPolicy:
    """How islands exchange members.

    Attributes:
        emigrants: migrants per edge (k).
        selection: ``best`` (the k best) or ``random`` (k distinct members).
        replacement: ``worst`` (evict the worst members unconditionally), ``better``
            (enter only when better than the worst member), ``fair`` (at most k of
            the incoming migrants, the best, may enter and only when better).
        unique: elite-unique (never send a genome the receiver holds; a receiver
            drops arrivals it holds or that repeat an earlier one).

    Example:
        >>> MigrationPolicy(emigrants=2, selection="best", replacement="fair")
        MigrationPolicy(emigrants=2, selection='best', replacement='fair', unique=True)
    """

    emigrants: int = 2
    selection: str = "best"
    replacement: str = "better"
    unique: bool = True

    def __post_init__(self):
        if isinstance(self.emigrants, bool) or not isinstance(self.emigrants, int) or self.emigrants < 0:
            raise ValueError(f"expected emigrants to be an int >= 0, got {self.emigrants!r}")
        policy_of(SELECTION_POLICIES, self.selection, "selection")
        policy_of(REPLACEMENT_POLICIES, self.replacement, "replacement")
