#!/usr/bin/env bash
# The Slurm stage of tests/run.sh: a real two-node Slurm cluster on this machine
# (cluster.sh: Debian's slurmctld + two slurmd, installed with apt-get when missing),
# every template in slurm/ submitted to it, and the results checked.
#
#   bash tests/slurm/run.sh          # needs root and the repository's .venv
#
# Checks, all submitted at once and run side by side (CPU only: GPU requests are
# switched off with --gpus-per-task=0):
#   mechanics, with tests/slurm/standin_run.py (the checkpoint contract of `mpievo run`
#   without the optimiser, so these fail only when the Slurm side is wrong):
#     - single_node_gpus, mpievo launcher, a fake 2-GPU CUDA_VISIBLE_DEVICES: each rank
#       is left with the GPU at its local rank;
#     - sweep_array with a sweep file: each array task ran with its own line;
#     - requeue, srun launcher, --time=1: Slurm's SIGUSR1 before the limit, checkpoint,
#       exit 85, requeue, resume, COMPLETED, same result as an uninterrupted run;
#   the real `mpievo run` (job: tests/slurm/job.toml):
#     - single_node_gpus (mpievo launcher) and multi_node (srun --mpi=pmix, one rank
#       on each node): COMPLETED, summary.json of one 2-rank run with a finite
#       best_fitness;
#     - sweep_array (3 tasks): COMPLETED, task i ran with seed SEED+i;
#     - requeue (mpievo launcher, --time=1): interrupted by the time limit at least
#       once, resumed from its checkpoint, then COMPLETED with the same best fitness,
#       island and genome as the uninterrupted single_node_gpus run.
# Exit status 1 when any check failed; every failure is printed.
#
# Knobs (environment):
#   MPIEVO_VENV                    venv with mpievo (default: the repository's .venv)
#   MPIEVO_SLURM_TEST_CONFIG       job of the real runs (default: tests/slurm/job.toml,
#                                  a sphere that sleeps 0.1 s per generation)
#   MPIEVO_SLURM_TEST_GENERATIONS  generations of the short real runs (default: 20)
#   MPIEVO_SLURM_TEST_LONG_GENERATIONS  generations of the requeue comparison; the
#                                  run must last longer than ~35 s, or Slurm's signal
#                                  may come after it ended (default: the config's, 400)
#   MPIEVO_SLURM_TEST_LIMIT        seconds to wait for all jobs (default: 600)
#   and cluster.sh's MPIEVO_SLURM_* knobs.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
VENV=${MPIEVO_VENV:-$ROOT/.venv}
export MPIEVO_VENV=$VENV  # the templates' default (the submit directory's .venv) is elsewhere
CONFIG=${MPIEVO_SLURM_TEST_CONFIG:-$ROOT/tests/slurm/job.toml}
GENERATIONS=${MPIEVO_SLURM_TEST_GENERATIONS:-20}
LONG_GENERATIONS=${MPIEVO_SLURM_TEST_LONG_GENERATIONS:-}
LIMIT=${MPIEVO_SLURM_TEST_LIMIT:-600}
SEED=1234
# Four CPUs per emulated node: all jobs fit at once (they are small; ranks may
# oversubscribe the real cores, which only slows them).
export MPIEVO_SLURM_CPUS=${MPIEVO_SLURM_CPUS:-4}
export MPIEVO_SLURM_NODES=2

source tests/slurm/cluster.sh
source tests/slurm/jobs.sh

STANDIN="python $ROOT/tests/slurm/standin_run.py"
SUMMARY=("$VENV/bin/python" "$ROOT/tests/slurm/summary.py")

preflight() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "expected a virtual environment with mpievo at $VENV, got none" \
             "(tests/run.sh makes it; or set MPIEVO_VENV)"
        return 1
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "expected to run as root (slurmd starts the jobs), got uid $(id -u)"
        return 1
    fi
}

smoke_test() {  # the cluster runs a trivial batch job
    local log=$SLURM_DIR/smoke.out out
    out=$(sbatch --wait --quiet --output="$log" --wrap 'echo "ran on $SLURMD_NODENAME"' 2>&1)
    if [ $? -ne 0 ] || ! grep -q "ran on node" "$log" 2>/dev/null; then
        fail "smoke test: expected 'sbatch --wait --wrap' to run, got: $out $(cat "$log" 2>&1)"
        return 1
    fi
    echo "smoke test: $(cat "$log")"
}

submit_mechanics() {  # the templates' Slurm mechanics, with the stand-in program
    # Long enough (160 x 0.25 s = 40 s) that Slurm's signal, sent within ~30 s of the
    # start of a 1-minute job, always comes before the end; the sleep costs no CPU.
    MPIEVO_LAUNCHER=srun MPIEVO_PROGRAM="$STANDIN" MPIEVO_OUT=$WORK/standin-requeue \
    MPIEVO_GENERATIONS=160 MPIEVO_SEED=$SEED MPIEVO_RUN_ARGS="--generation-seconds 0.25" \
        submit standin-requeue --ntasks-per-node=2 --time=1 --signal=B:USR1@30 \
            "$ROOT/slurm/requeue.sbatch"
    CUDA_VISIBLE_DEVICES=0,1 \
    MPIEVO_LAUNCHER=mpievo MPIEVO_PROGRAM="$STANDIN" MPIEVO_OUT=$WORK/standin-reference \
    MPIEVO_GENERATIONS=160 MPIEVO_SEED=$SEED MPIEVO_RUN_ARGS="--generation-seconds 0" \
        submit standin-gpus --gpus-per-task=0 --ntasks-per-node=2 "$ROOT/slurm/single_node_gpus.sbatch"
    printf -- '--seed 11\n--seed 12\n' >"$WORK/sweep.txt"
    MPIEVO_LAUNCHER=mpievo MPIEVO_PROGRAM="$STANDIN" MPIEVO_OUT=$WORK/standin-sweep \
    MPIEVO_SWEEP_FILE=$WORK/sweep.txt MPIEVO_GENERATIONS=3 \
        submit standin-sweep --array=0-1 --ntasks-per-node=1 "$ROOT/slurm/sweep_array.sbatch"
}

check_mechanics() {
    local rank task env_file
    if expect_completed standin-gpus; then
        for rank in 0 1; do
            env_file=$WORK/standin-reference/rank-$rank.env.json
            grep -q "\"CUDA_VISIBLE_DEVICES\": \"$rank\"" "$env_file" 2>/dev/null \
                || fail "standin-gpus: expected rank $rank to keep GPU $rank, got $(cat "$env_file" 2>&1)"
        done
    fi
    if expect_completed standin-sweep; then
        for task in 0 1; do
            "${SUMMARY[@]}" field "$WORK/standin-sweep/task-$task" seed "1$((task + 1))" \
                || fail "standin-sweep: task $task did not run with line $((task + 1)) of the sweep file"
        done
    fi
    if expect_completed standin-requeue 1; then
        "${SUMMARY[@]}" present "$WORK/standin-requeue" resumed_from \
            || fail "standin-requeue: the last start did not resume from a checkpoint"
        "${SUMMARY[@]}" same "$WORK/standin-requeue" "$WORK/standin-reference" \
            || fail "standin-requeue: requeued run differs from the uninterrupted one"
    fi
}

mpievo_run_available() {
    local out
    if ! out=$("$VENV/bin/mpievo" run --help 2>&1); then
        fail "mpievo run: expected \`mpievo run --help\` to succeed, got: $(tail -n 3 <<<"$out")"
        return 1
    fi
}

submit_real() {  # the real `mpievo run` through every template
    # The job's fitness module (slow_sphere) must be importable on every rank.
    local PYTHONPATH="$ROOT/tests/slurm${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONPATH
    MPIEVO_CONFIG=$CONFIG MPIEVO_SEED=$SEED MPIEVO_LAUNCHER=mpievo MPIEVO_OUT=$WORK/requeue \
    MPIEVO_GENERATIONS=$LONG_GENERATIONS \
        submit requeue --ntasks-per-node=2 --time=1 --signal=B:USR1@30 "$ROOT/slurm/requeue.sbatch"
    MPIEVO_CONFIG=$CONFIG MPIEVO_SEED=$SEED MPIEVO_LAUNCHER=mpievo MPIEVO_OUT=$WORK/reference \
    MPIEVO_GENERATIONS=$LONG_GENERATIONS \
        submit gpus --gpus-per-task=0 --ntasks-per-node=2 "$ROOT/slurm/single_node_gpus.sbatch"
    MPIEVO_CONFIG=$CONFIG MPIEVO_SEED=$SEED MPIEVO_LAUNCHER=srun MPIEVO_OUT=$WORK/multi \
    MPIEVO_GENERATIONS=$GENERATIONS \
        submit multi --nodes=2 --ntasks-per-node=1 "$ROOT/slurm/multi_node.sbatch"
    MPIEVO_CONFIG=$CONFIG MPIEVO_SEED=$SEED MPIEVO_LAUNCHER=mpievo MPIEVO_OUT=$WORK/sweep \
    MPIEVO_GENERATIONS=$GENERATIONS \
        submit sweep --array=0-2 --ntasks-per-node=1 "$ROOT/slurm/sweep_array.sbatch"
}

check_real() {
    local task
    if expect_completed gpus; then
        "${SUMMARY[@]}" valid "$WORK/reference" && "${SUMMARY[@]}" field "$WORK/reference" ranks 2 \
            || fail "gpus: expected a summary of a 2-rank run"
    fi
    if expect_completed multi; then
        "${SUMMARY[@]}" valid "$WORK/multi" && "${SUMMARY[@]}" field "$WORK/multi" ranks 2 \
            || fail "multi: expected a summary of a 2-rank run"
    fi
    if expect_completed sweep; then
        for task in 0 1 2; do
            "${SUMMARY[@]}" field "$WORK/sweep/task-$task" config.run.seed $((SEED + task)) \
                || fail "sweep: task $task did not run with seed $((SEED + task))"
        done
    fi
    if expect_completed requeue 1; then
        "${SUMMARY[@]}" present "$WORK/requeue" resumed_from \
            || fail "requeue: the last start did not resume from a checkpoint"
        "${SUMMARY[@]}" same "$WORK/requeue" "$WORK/reference" \
            || fail "requeue: requeued run differs from the uninterrupted one"
    fi
}

show_cluster_logs() {
    local log
    for log in "$SLURM_DIR"/log/*.log; do
        [ -f "$log" ] && { echo "--- tail of $log"; tail -n 15 "$log"; }
    done
}

main() {
    local start=$SECONDS step
    preflight || return 1
    # One test cluster per machine (fixed directory and ports): queue behind another run.
    exec 9>"$SLURM_DIR.lock"
    flock -w 900 9 || { fail "another tests/slurm/run.sh held $SLURM_DIR.lock for 900 s"; return 1; }
    trap slurm_stop EXIT
    step=$SECONDS
    if ! slurm_start; then
        fail "cluster: did not start"
        show_cluster_logs
        return 1
    fi
    echo "cluster up in $((SECONDS - step)) s: $(sinfo -h -N -o '%N %T %c' | tr '\n' ' ')"
    smoke_test || { show_cluster_logs; return 1; }
    WORK=$SLURM_DIR/work
    mkdir -p "$WORK"
    cd "$WORK" || return 1
    submit_mechanics
    local real=0
    mpievo_run_available && { submit_real; real=1; }
    cd "$ROOT" || return 1
    step=$SECONDS
    wait_for_jobs "$LIMIT"
    echo "jobs finished in $((SECONDS - step)) s"
    check_mechanics
    [ "$real" = 1 ] && check_real
    report_times
    echo "slurm stage: $((SECONDS - start)) s"
}

main || [ ${#FAILURES[@]} -gt 0 ] || fail "set-up failed (see above)"
if [ ${#FAILURES[@]} -gt 0 ]; then
    echo "slurm checks FAILED (${#FAILURES[@]}):"
    printf '  - %s\n' "${FAILURES[@]}"
    echo "cluster logs: $SLURM_DIR/log; job outputs: $SLURM_DIR/work"
    exit 1
fi
echo "slurm checks passed"
