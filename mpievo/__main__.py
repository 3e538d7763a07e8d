import signal
import sys

RUN = sys.argv[1:2] == ["run"]
if RUN:    # before the imports: a stop request may come at once (mpievo.early_signals)
    from mpievo import early_signals

    early_signals.install()

from mpievo.cli.main import main  # noqa: E402

status = main()
if RUN:    # the run is over: a launcher's repeated SIGUSR1 must not end the exit (Python
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # resets its handlers, not SIG_IGN, as it exits)
raise SystemExit(status)
