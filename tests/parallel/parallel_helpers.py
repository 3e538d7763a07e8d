"""Small jobs shared by the parallel tests."""

from __future__ import annotations

import hashlib

import numpy as np

from mpievo.config import validate


def small_job(nranks: int, **tables):
    """A validated 4-island job that runs in a fraction of a second."""
    config = {
        "run": {"islands": 4, "generations": 24, "log_every": 6, "seed": 7},
        "problem": {"name": "rastrigin", "dim": 6, "shift": True, "rotate": True, "seed": 2},
        "engine": {"capacity": 12, "batch_size": 16},
        "migration": {"interval": 3, "emigrants": 2},
    }
    for table, values in tables.items():
        config.setdefault(table, {}).update(values)
    return validate(config, nranks)


def states_digest(states: dict) -> str:
    """SHA-1 over every island's archive genomes and fitness (bit for bit)."""
    digest = hashlib.sha1()
    for index in sorted(states):
        archive = states[index]["archive"]
        for key in ("genomes", "fitness", "ids", "births", "origins"):
            digest.update(np.ascontiguousarray(archive[key]).tobytes())
    return digest.hexdigest()


def sleepy_sphere(genomes):
    """A batch fitness that hangs on genomes whose first gene is positive (time-limit tests)."""
    import time

    if genomes[0, 0] > 0:
        time.sleep(5.0)
    return np.einsum("ij,ij->i", genomes, genomes)


class StopAt:
    """A stop flag (``requested``) raised by rank 0 once ``scheme`` passed ``generation``."""

    def __init__(self, scheme, generation, rank):
        self.scheme, self.generation, self.rank = scheme, generation, rank

    @property
    def requested(self):
        return self.rank == 0 and self.scheme.generation >= self.generation


def stop_and_checkpoint(comm, job, directory, at: int = 7):
    """Run ``job``'s scheme until rank 0 stops it after generation ``at``, checkpointing
    into ``directory`` there; returns the run loop's result."""
    from mpievo.io import Checkpointer
    from mpievo.parallel import RunLoop, RunSettings, build_scheme

    scheme = build_scheme(comm, job)
    loop = RunLoop(comm, scheme, RunSettings(job.run.generations, 5), config=job.config,
                   checkpointer=Checkpointer(directory, comm=comm), stop=StopAt(scheme, at, comm.rank))
    try:
        return loop.run()
    finally:
        getattr(scheme, "close", lambda: None)()


def stepped_scheme(comm, job, generations: int):
    """The job's scheme on ``comm``, initialised and stepped ``generations`` times."""
    from mpievo.parallel import build_scheme

    scheme = build_scheme(comm, job)
    scheme.initialize()
    for _ in range(generations):
        scheme.step()
    return scheme
