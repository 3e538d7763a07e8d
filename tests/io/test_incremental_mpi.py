"""Issue 40, item 5: a run that checkpoints incrementally in the background resumes bit for
bit, on the rank count that wrote it and on another (1 and 2 ranks; 1 -> P and P -> 1)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ranks_agree

from mpievo.comm import Communicator
from mpievo.config import validate
from mpievo.io import Checkpointer, load_latest, read_manifest
from mpievo.parallel import RunLoop, RunSettings, best_genome_bytes, build_scheme, run_job
from mpievo.parallel.scheme import islands_of_rank


def job(nranks: int):
    return validate({"run": {"islands": 4, "generations": 14, "log_every": 2, "seed": 5},
                     "problem": {"name": "rastrigin", "dim": 8, "shift": True},
                     "engine": {"capacity": 8, "batch_size": 8, "dtype": "bfloat16"},
                     "migration": {"interval": 3, "emigrants": 1}}, nranks)


class StopAfter:
    """Rank 0 raises the stop flag once the scheme passed ``generation``."""

    def __init__(self, scheme, generation: int, rank: int):
        self.scheme, self.generation, self.rank = scheme, generation, rank

    @property
    def requested(self) -> bool:
        return self.rank == 0 and self.scheme.generation >= self.generation


def checkpointed_run(comm, directory: str, **settings):
    """Checkpoints every 3 generations (by default in the background, incremental at any row
    size) and a stop after generation 9; the manifest's files (rank 0; [] elsewhere)."""
    the_job = job(comm.size)
    scheme = build_scheme(comm, the_job)
    checkpointer = Checkpointer(directory, keep=3, comm=comm, **{"min_row_bytes": 0, **settings})
    RunLoop(comm, scheme, RunSettings(14, 1, checkpoint_every=3), config=the_job.config,
            checkpointer=checkpointer, stop=StopAfter(scheme, 9, comm.rank)).run()
    return [f for e in read_manifest(directory) for f in e.files] if comm.rank == 0 else []


def resumed(comm, directory: str):
    """The run resumed from ``directory`` on ``comm``'s ranks, to generation 14."""
    the_job = job(comm.size)
    ckpt = load_latest(directory, islands=lambda all_: islands_of_rank(comm.rank, len(all_), comm.size),
                       comm=comm)
    return ckpt, run_job(the_job, comm, restored=ckpt)


def same_islands(a: dict, b: dict) -> bool:
    """Every island's archive alike, bit for bit."""
    return sorted(a) == sorted(b) and all(
        np.asarray(a[i]["archive"][key]).tobytes() == np.asarray(b[i]["archive"][key]).tobytes()
        for i in a for key in ("genomes", "fitness", "ids", "births", "origins"))


@pytest.mark.mpi(min_size=1)
def test_incremental_background_checkpoints_resume_bit_for_bit_on_any_rank_count(world, tmp_path_factory):
    comm = Communicator(world)
    one = Communicator(MPI.COMM_SELF)
    root = comm.bcast_object(str(tmp_path_factory.mktemp("inc")) if comm.rank == 0 else None)
    straight = run_job(job(comm.size), comm)
    alone = run_job(job(1), one) if comm.rank == 0 else None
    # written by every rank; resumed on the same ranks and, on rank 0, alone
    files = checkpointed_run(comm, root + "/all")
    checkpointed_run(comm, root + "/plain", incremental=False, background=False)
    ckpt, again = resumed(comm, root + "/all")
    plain = load_latest(root + "/plain", islands=sorted(ckpt.islands), comm=comm)
    ok = ckpt.generation in (9, 10) and best_genome_bytes(again) == best_genome_bytes(straight)
    ok = ok and plain.name == ckpt.name and same_islands(ckpt.islands, plain.islands)
    detail = f"resumed at {ckpt.generation}: same ranks, or the checkpoint's archives, differ"
    if comm.rank == 0:
        referencing = [f for f in files if f.references]
        ok = ok and bool(referencing) and all(len(f.references) >= 1 for f in referencing)
        _, solo = resumed(one, root + "/all")
        ok = ok and best_genome_bytes(solo) == best_genome_bytes(alone) == best_genome_bytes(straight)
        detail += f" or {len(referencing)} of {len(files)} files read earlier rows, or P -> 1 differs"
    all_ranks_agree(world, ok, detail)
    if comm.size > 1:       # written by rank 0 alone, resumed by every rank
        if comm.rank == 0:
            checkpointed_run(one, root + "/one")
        comm.barrier()
        _, spread = resumed(comm, root + "/one")
        all_ranks_agree(world, best_genome_bytes(spread) == best_genome_bytes(straight), "1 -> P differs")


class _Recording(Checkpointer):
    """Joins its writer before the loop goes on (so the next log point sees it written) and
    records the generation of every completion."""

    def __init__(self, *args, scheme=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.scheme, self.completed = scheme, []

    def save_background(self, *args, **kwargs):
        name = super().save_background(*args, **kwargs)
        self._pending.join()
        return name

    def wait(self):
        info = super().wait()
        if info is not None:
            self.completed.append((self.scheme.generation, info.generation))
        return info


@pytest.mark.mpi(min_size=1)
def test_a_written_background_checkpoint_is_published_at_the_next_log_point(world, tmp_path_factory):
    comm = Communicator(world)
    root = comm.bcast_object(str(tmp_path_factory.mktemp("pub")) if comm.rank == 0 else None)
    the_job = job(comm.size)
    scheme = build_scheme(comm, the_job)
    checkpointer = _Recording(root, comm=comm, min_row_bytes=0, scheme=scheme)
    result = RunLoop(comm, scheme, RunSettings(8, 1, checkpoint_every=3), config=the_job.config,
                     checkpointer=checkpointer).run()
    names = [e.name for e in read_manifest(root)] if comm.rank == 0 else []
    ok = checkpointer.completed == [(4, 3), (7, 6)] and result.checkpoints[-1].endswith("g000000008")
    all_ranks_agree(world, ok and (comm.rank != 0 or len(names) == 3), f"{checkpointer.completed}, {names}")
