"""Several objectives: Pareto islands (no MPI here either).

* :mod:`.pareto` -- dominance, non-dominated sorting, crowding distance, NSGA-II's order.
* :mod:`.problems` -- :class:`MultiObjectiveProblem` (``f(X) -> (n, n_obj)``, minimised) and
  the built-ins ZDT1-4, ZDT6, DTLZ1-7, WFG1-9 (:func:`moo_problem`; objectives and genes
  left out: the problem's, :func:`~.problems.builtin_objectives`).
* :mod:`.archive` -- :class:`ParetoArchive`: an island archive whose merge is NSGA-II's
  environmental selection (the population of a Pareto island).
* :mod:`.nsga2` -- the ``nsga2`` island algorithm (tournaments, SBX, polynomial mutation).
* :mod:`.smsemoa` -- the ``smsemoa`` island algorithm (hypervolume survival, moocore's).
* :mod:`.moead` -- the ``moead`` island algorithm (Tchebycheff subproblems, SBX or pygmo's DE).
* :mod:`.indicators` -- hypervolume (moocore) and the merge of several fronts.

Example::

    from mpievo.evo import EngineConfig, Island
    from mpievo.evo.moo import moo_problem
    island = Island(0, moo_problem("zdt1"), EngineConfig(algorithm="nsga2"), seed=1)   # 100 members
    island.run(100)
    front = island.archive.objectives[island.archive.front()]
"""

from .archive import ParetoArchive
from .indicators import hypervolume, merged_front
from .nsga2 import NSGA2
from .smsemoa import SMSEMOA
from .moead import MOEAD
from .pareto import crowding_distances, dominance, front_ranks, nondominated, survivor_order
from .problems import BUILTIN_MOO, MultiObjectiveProblem, moo_problem

__all__ = ["ParetoArchive", "hypervolume", "merged_front", "NSGA2", "SMSEMOA", "MOEAD", "crowding_distances",
           "dominance",
           "front_ranks", "nondominated", "survivor_order", "BUILTIN_MOO", "MultiObjectiveProblem",
           "moo_problem"]
