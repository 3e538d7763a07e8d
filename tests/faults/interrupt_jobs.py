"""Tiny ``mpievo launch -n P -- mpievo run`` jobs to interrupt, and the check of what an
interrupt left (tests/faults/test_interrupt.py and the trials of test_interrupt_trials.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MPIEVO = str(Path(sys.executable).parent / "mpievo")
#: a job that runs until stopped; every generation logged (the interrupted generation is known)
ENDLESS = ["--problem", "rastrigin", "--dim", "16", "--islands", "4", "--generations", "100000000",
           "--log-every", "1", "--progress", "none", "--set", "engine.capacity=8",
           "--set", "engine.batch_size=8"]
#: what the ranks and the launcher print when an interrupt came before anything could be saved
BEFORE_FIRST = ("interrupted before the first checkpoint", "without a checkpoint of this interrupt")


def start(out: Path, nranks: int, *extra: str) -> subprocess.Popen:
    """``mpievo launch`` of the endless job writing to ``out``, in a session of its own
    (the test's signals reach only whom they are sent to)."""
    argv = [MPIEVO, "launch", "-n", str(nranks), "--", "mpievo", "run", "--out", str(out), *ENDLESS, *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def rank_pids(launcher: subprocess.Popen) -> list[int]:
    """The ranks: the children of mpiexec, the launcher's child."""
    return [rank for mpiexec in children(launcher.pid) for rank in children(mpiexec)]


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc): a
    signal sent before that meets the program not yet started, and ends it like any other."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) >> (signum - 1) & 1)


def logged_generation(out: Path) -> int:
    """The last generation rank 0 logged for island 0 (-1: none yet)."""
    last = -1
    try:
        lines = (out / "islands" / "island-0000.jsonl").read_text().splitlines()
    except OSError:
        return last
    for line in lines:
        try:
            last = max(last, int(json.loads(line)["generation"]))
        except (ValueError, KeyError):
            continue     # a line being written
    return last


def wait_until(condition, job: subprocess.Popen, timeout: float = 240.0) -> None:
    """Poll ``condition()`` until true; fail when the job ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if job.poll() is not None:
            raise AssertionError(f"the job ended (status {job.returncode}) before the moment awaited:\n"
                                 f"{job.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the moment awaited did not come within {timeout} s")
        time.sleep(0.05)


def send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass      # already gone: what it left is checked all the same


def finish(job: subprocess.Popen, timeout: float = 240.0) -> tuple[int, str]:
    """(exit status, stdout + stderr) of an interrupted job; kills its session on a hang."""
    try:
        out, err = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(job)
        out, err = job.communicate()
        raise AssertionError(f"the job did not end within {timeout} s of its interrupt:\n{err[-2000:]}")
    return job.returncode, out + err


def kill(job: subprocess.Popen) -> None:
    """SIGKILL the job's processes: the ranks, mpiexec (a process group of its own), the launcher."""
    for pid in [*rank_pids(job), *children(job.pid)]:
        send(pid, signal.SIGKILL)
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def looks_like_a_checkpoint(out: Path) -> list[str]:
    """Anything under ``out/checkpoints`` that a resume or a user could take for a checkpoint."""
    folder = out / "checkpoints"
    return sorted(str(p.relative_to(out)) for p in folder.rglob("*")) if folder.is_dir() else []


def outcome_problem(out: Path, status: int, text: str, interrupted_at: int) -> str | None:
    """What is wrong with an interrupt's outcome (None: fine): a checkpoint of a generation
    at least ``interrupted_at`` whose every file verifies, after exit 85 and its message;
    or, interrupted before the first checkpoint, a message saying so and no checkpoint."""
    from mpievo.io import load_latest
    from mpievo.io.loader import verify_checkpoint

    if any(phrase in text for phrase in BEFORE_FIRST):
        left = looks_like_a_checkpoint(out)
        return f"said 'before the first checkpoint' but left {left}" if left else None
    if status != 85:
        return f"expected exit 85 or a 'before the first checkpoint' message, got {status}:\n{text[-1500:]}"
    if f"resume with `mpievo run --resume {out}`" not in text:
        return f"expected the resume command in the output, got:\n{text[-1500:]}"
    try:
        latest = load_latest(out / "checkpoints")
    except Exception as err:    # noqa: BLE001 - any failure is the finding
        return f"exit 85 but no loadable checkpoint: {err}"
    problems = verify_checkpoint(out / "checkpoints", latest.entry)
    if problems:
        return f"checkpoint {latest.name} does not verify: {problems}"
    if latest.skipped:
        return f"a newer checkpoint was unusable: {latest.skipped}"
    if latest.generation < interrupted_at:
        return f"checkpoint at generation {latest.generation}, older than the interrupted {interrupted_at}"
    return None


def resume(out: Path, generations: int, nranks: int = 1) -> subprocess.CompletedProcess:
    """``mpievo run --resume out --generations N`` (one process, or ``nranks`` under launch)."""
    run = ["mpievo", "run", "--resume", str(out), "--generations", str(generations), "--progress", "none"]
    argv = [MPIEVO, *run[1:]] if nranks == 1 else [MPIEVO, "launch", "-n", str(nranks), "--", *run]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)
