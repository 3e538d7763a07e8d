"""How many evaluations an island starts with and takes per step, from its settings
alone (every rank plans every island's share of a budget with these)."""

from __future__ import annotations

from .algorithms.base import make_algorithm
from .algorithms.cmaes_core import default_popsize
from .engine_config import EngineConfig


def initial_population(config: EngineConfig) -> int:
    """Genomes evaluated by :meth:`Island.initialize` (the archive's first limit):
    ``population``, capped at ``capacity`` (None: ``capacity``)."""
    return min(config.population or config.capacity, config.capacity)


def planned_batch(config: EngineConfig, dim: int) -> int:
    """Children per step of an island at the start: ``de_population`` for DE,
    ``cma_popsize`` (None: ``4 + floor(3 ln dim)``) for CMA-ES, ``es_popsize`` for ES, SHADE's first
    population, ``batch_size`` for the GA and user algorithms. CMA-ES restarts may
    grow it later, L-SHADE shrinks it.
    """
    if config.algorithm in ("de", "jde"):
        return config.de_population
    if config.algorithm == "cmaes":
        return config.cma_popsize or default_popsize(dim)
    if config.algorithm == "es":
        return config.es_popsize
    if config.algorithm == "shade":
        return make_algorithm("shade", config).start_size(dim)
    return config.batch_size
