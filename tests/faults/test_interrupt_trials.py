"""Random-interruption trials (issue 31): SIGINT or SIGTERM to ``mpievo launch`` or to one
rank at a random moment, at 2 and 4 ranks, some of them while a checkpoint is being
written. Every trial must end in one of two ways: exit 85 with the resume command and a
complete checkpoint (every file verifies) no older than the last generation logged
before the signal, or, interrupted before the first checkpoint, a message saying so and
nothing under ``checkpoints/``. Every ``MPIEVO_TRIALS_RESUME_EVERY``-th checkpointed trial
is also resumed (one process, a few generations further).

A CI stage of its own, kept out of the others (the ``trials`` marker; skipped unless
``MPIEVO_TEST_TRIALS=1``)::

    MPIEVO_TEST_TRIALS=1 .venv/bin/python -m pytest -q -p no:randomly -m trials tests/faults/test_interrupt_trials.py

``MPIEVO_TRIALS`` sets the trials per target (launcher, rank; default 20, half at 2 ranks,
half at 4); ``MPIEVO_TRIALS_SEED`` the random moments (default 31); ``MPIEVO_TRIALS_LANES``
how many jobs run at once (default 4). Each trial prints one
line (``-s`` shows them): target, ranks, signal, moment, outcome.

A moment is counted from when the signalled process has its handler (its SigCgt mask in
/proc): before that, in the first tens of milliseconds of the interpreter's start, a
signal ends it as it ends any program, before any of mpievo's code runs.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
import signal
import time
from pathlib import Path

import pytest
from interrupt_jobs import (catches, finish, kill, logged_generation, outcome_problem, rank_pids, resume, send,
                            start, wait_until)
from mpi4py import MPI

TRIALS = int(os.environ.get("MPIEVO_TRIALS", "20"))
SEED = int(os.environ.get("MPIEVO_TRIALS_SEED", "31"))
RESUME_EVERY = int(os.environ.get("MPIEVO_TRIALS_RESUME_EVERY", "5"))
LANES = int(os.environ.get("MPIEVO_TRIALS_LANES", "4"))
#: when the signal comes, by trial number modulo 3: 0-4 s after the process has its handler
#: (mostly while MPI, the config and the islands load), 0-2 s after generation 1, or as soon
#: as a checkpoint write is under way
MOMENTS = ("during the start", "during the run", "during a checkpoint write")
#: checkpoints every other generation of a 2000-gene job: writes are a good share of the run
CHECKPOINTING = ["--checkpoint-every", "2", "--dim", "2000"]

pytestmark = [
    pytest.mark.trials,
    pytest.mark.skipif(os.environ.get("MPIEVO_TEST_TRIALS") != "1",
                       reason="random-interruption trials: a CI stage of their own (MPIEVO_TEST_TRIALS=1)"),
    pytest.mark.skipif(MPI.COMM_WORLD.Get_size() > 1, reason="drives mpiexec: one rank only"),
    pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to find the ranks"),
    pytest.mark.timeout(900),
]


def _writing(out: Path) -> bool:
    """A checkpoint directory exists that the manifest does not name yet: a write is under way."""
    folder = out / "checkpoints"
    named = (folder / "manifest.json").read_text() if (folder / "manifest.json").exists() else ""
    return any(path.name not in named for path in folder.glob("ckpt-*"))


def _trial(tmp_path: Path, target: str, k: int) -> tuple[str, str | None]:
    """One trial; (its description, what went wrong or None)."""
    rng = random.Random(f"{SEED}-{target}-{k}")
    nranks = 2 if k % 2 == 0 else 4
    signum = rng.choice([signal.SIGINT, signal.SIGTERM])
    out = tmp_path / f"{target}-{k}"
    job = start(out, nranks, *CHECKPOINTING)
    moment = MOMENTS[k % 3]
    try:
        if target == "rank":
            wait_until(lambda: len(rank_pids(job)) == nranks, job)
            victim = rng.choice(rank_pids(job))
        else:
            victim = job.pid
        # its program has started: SIGTERM is caught once mpievo's handlers are in (SIGINT from
        # the interpreter's start: Python's own KeyboardInterrupt handler)
        wait_until(lambda: catches(victim, signal.SIGTERM), job)
        if moment == "during a checkpoint write":
            wait_until(lambda: _writing(out), job)
        elif moment == "during the run":
            wait_until(lambda: logged_generation(out) >= 1, job)
            time.sleep(rng.uniform(0.0, 2.0))
        else:
            time.sleep(rng.uniform(0.0, 4.0))
        interrupted_at = logged_generation(out)
        send(victim, signum)
    except AssertionError as err:     # the job ended before its moment: a failure of its own
        kill(job)
        return f"{target} {nranks} ranks {moment}", str(err)
    except BaseException:
        kill(job)
        raise
    status, text = finish(job)
    problem = outcome_problem(out, status, text, interrupted_at)
    saved = "checkpointed" if (out / "checkpoints" / "manifest.json").exists() else "nothing saved"
    described = (f"{target} {nranks} ranks {signal.Signals(signum).name} {moment} (logged generation "
                 f"{interrupted_at}): exit {status}, {saved}")
    if problem is None and (out / "checkpoints" / "manifest.json").exists() and k % RESUME_EVERY == 0:
        from mpievo.io import load_latest

        generation = load_latest(out / "checkpoints").generation
        resumed = resume(out, generation + 2)
        if resumed.returncode != 0:
            problem = f"the resume failed ({resumed.returncode}): {resumed.stderr[-1500:]}"
        described += ", resumed"
    return described, problem


@pytest.mark.parametrize("target", ["launcher", "rank"])
def test_random_interruptions_leave_a_resumable_checkpoint_or_say_there_is_none(tmp_path, target):
    failures = []

    def one(k: int) -> None:
        described, problem = _trial(tmp_path, target, k)
        print(f"trial {k}: {described}: {'ok' if problem is None else 'FAILED: ' + problem}", flush=True)
        if problem is not None:
            failures.append(f"trial {k} ({described}): {problem}")

    # several jobs at once: a trial spends much of its time waiting for its moment or its end
    with ThreadPoolExecutor(LANES) as lanes:
        list(lanes.map(one, range(TRIALS)))
    assert not failures, "\n".join(failures)
