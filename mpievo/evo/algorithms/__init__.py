"""Island algorithms: the archive GA (default), jDE and CMA-ES; protocol in :mod:`.base`."""

from .base import IslandAlgorithm, check_algorithm, make_algorithm
from .cmaes import CMAES
from .de import JDE
from .ga import GeneticAlgorithm

__all__ = ["IslandAlgorithm", "check_algorithm", "make_algorithm", "GeneticAlgorithm", "JDE", "CMAES"]
