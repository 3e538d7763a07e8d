"""A small real island run for the stop and checkpoint-vote tests of ``RunLoop``."""

from __future__ import annotations

from mpievo.config import validate
from mpievo.parallel import RunLoop, RunSettings, build_scheme


def small_job(nranks: int):
    """A validated 4-island job whose generations take milliseconds."""
    return validate({
        "run": {"islands": 4, "generations": 12, "log_every": 1, "seed": 5},
        "problem": {"name": "sphere", "dim": 4},
        "engine": {"capacity": 8, "batch_size": 8},
        "migration": {"interval": 3, "emigrants": 1},
    }, nranks)


def run_loop(comm, settings: RunSettings, **options):
    """(RunLoop, scheme) for ``small_job``; ``options`` go to RunLoop (stop, checkpointer, ...)."""
    job = small_job(comm.size)
    scheme = build_scheme(comm, job)
    return RunLoop(comm, scheme, settings, config=job.config, **options), scheme


class StopAfter:
    """A stop flag that rises once ``scheme`` completed ``generation`` (never when ``here`` is False)."""

    def __init__(self, scheme, generation: int, here: bool = True):
        self.scheme, self.generation, self.here = scheme, generation, here

    @property
    def requested(self) -> bool:
        return self.here and self.scheme.generation >= self.generation


class RecordingCheckpointer:
    """Stands in for mpievo.io.Checkpointer: records the generations it was asked to save."""

    def __init__(self):
        self.generations: list[int] = []

    def save(self, generation, islands, *, config=None, run_state=None):
        self.generations.append(generation)
        return f"ckpt-{generation}"


class FakeClock:
    """Stands in for the runner's ``time`` module: ``perf_counter`` is ``now``."""

    def __init__(self, now):
        self.perf_counter = now
