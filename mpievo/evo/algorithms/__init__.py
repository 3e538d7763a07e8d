"""Island algorithms: the archive GA (default), jDE, SHADE/L-SHADE, CMA-ES and OpenAI-ES; protocol in :mod:`.base`."""

from .base import IslandAlgorithm, check_algorithm, make_algorithm
from .cmaes import CMAES
from .de import JDE
from .es import ES
from .ga import GeneticAlgorithm
from .shade import SHADE

__all__ = ["IslandAlgorithm", "check_algorithm", "make_algorithm", "GeneticAlgorithm", "JDE", "SHADE", "CMAES", "ES"]
