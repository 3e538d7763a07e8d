"""Run one stage of tests/run.sh: a pytest command under a wall-clock limit, in which a
test that times out (or crashes its process) fails alone.

    python3 tests/stage.py NAME LIMIT_S -- COMMAND...

COMMAND is a pytest run (directly or under a launcher). tests/progress.py records per rank
which test started and how each ended; when the command dies in the middle of a test
(pytest-timeout's thread method ends the process, under mpiexec every rank), that test
counts as failed and COMMAND runs again with every test that already ran deselected, so
the tests after it still run. Exit status 0 only when every test passed or was skipped,
no run died outside a test, and the stage ended within LIMIT_S seconds.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

MAX_RESTARTS = 10
#: pytest's exit codes: 0 all passed, 1 some failed, 5 nothing collected (a restart
#: whose every remaining test was deselected)
RESULT_CODES = (0, 1, 5)


def read_progress(prefix: str) -> tuple[dict[str, str], set[str]]:
    """(worst outcome per finished test over every rank, tests started but unfinished)."""
    rank = {"passed": 0, "skipped": 0, "failed": 1}
    ended: dict[str, str] = {}
    unfinished: set[str] = set()
    for path in glob.glob(prefix + ".*"):
        open_tests: set[str] = set()
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                kind, _, rest = line.rstrip("\n").partition(" ")
                if kind == "start":
                    open_tests.add(rest)
                elif kind == "end":
                    outcome, _, nodeid = rest.partition(" ")
                    open_tests.discard(nodeid)
                    if rank[outcome] >= rank.get(ended.get(nodeid, "passed"), 0):
                        ended[nodeid] = outcome
        unfinished |= open_tests
    return ended, unfinished


def run(command: list[str], env: dict, seconds_left: float) -> int | None:
    """Run ``command`` in its own process group; None when the stage's time ran out."""
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=max(seconds_left, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return None


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    name, limit, command = argv[0], float(argv[1]), argv[3:]
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="mpievo-stage-")
    killed: list[str] = []
    ended: dict[str, str] = {}
    problems: list[str] = []
    deselect: list[str] = []
    for attempt in range(MAX_RESTARTS + 1):
        prefix = os.path.join(workdir, f"progress-{attempt}")
        env = dict(os.environ, MPIEVO_TEST_PROGRESS=prefix)
        rc = run(command + deselect, env, limit - (time.monotonic() - start))
        ended_now, unfinished = read_progress(prefix)
        ended.update(ended_now)
        if rc is None:
            problems.append(f"stage limit of {limit:.0f} s reached"
                            + (f" in {sorted(unfinished)}" if unfinished else ""))
            killed += sorted(unfinished)
            break
        if not unfinished:
            if rc not in RESULT_CODES or (rc == 5 and attempt == 0):
                problems.append(f"pytest exited {rc} outside any test")
            elif rc == 1 and "failed" not in ended_now.values():
                problems.append("pytest exited 1 (failures) but recorded no failed test")
            break
        killed += sorted(unfinished)
        print(f"=== stage {name}: the process ended during {sorted(unfinished)} (exit {rc}); "
              "counted failed, running the remaining tests", flush=True)
        deselect = [arg for nodeid in sorted(set(ended) | set(killed)) for arg in ("--deselect", nodeid)]
    else:
        problems.append(f"more than {MAX_RESTARTS} restarts")
    outcomes = dict(ended, **{nodeid: "failed" for nodeid in killed})
    failed = sorted(n for n, o in outcomes.items() if o == "failed")
    count = {o: sum(1 for v in outcomes.values() if v == o) for o in ("passed", "failed", "skipped")}
    seconds = time.monotonic() - start
    for nodeid in failed:
        print(f"=== stage {name}: FAILED {nodeid}" + (" (timeout or crash)" if nodeid in killed else ""))
    for problem in problems:
        print(f"=== stage {name}: {problem}")
    print(f"=== stage {name}: {count['passed']} passed, {count['failed']} failed, "
          f"{count['skipped']} skipped in {seconds:.0f} s", flush=True)
    if os.environ.get("MPIEVO_TEST_TOTALS"):
        with open(os.environ["MPIEVO_TEST_TOTALS"], "a", encoding="utf-8") as f:
            f.write(f"{count['passed']} {count['failed']} {count['skipped']}\n")
    return 0 if not failed and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
