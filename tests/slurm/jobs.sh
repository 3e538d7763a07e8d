# Helpers for tests/slurm/run.sh: submit labelled jobs, wait for them, check how they
# ended. Sourced; expects SLURM_CONF to point at the test cluster (cluster.sh).
#
# There is no slurmdbd (sacct) on the test cluster; the controller keeps finished jobs
# for MinJobAge (an hour), so `scontrol show job` answers for them, array tasks and
# restart counts included.

declare -a FAILURES=()
declare -a LABELS=()
declare -A JOB_ID=()

fail() {  # fail MESSAGE: record a failed check
    FAILURES+=("$1")
    echo "FAIL: $1"
}

submit() {  # submit LABEL SBATCH_ARGS...: submit a job and remember its id as LABEL
    local label=$1 id
    shift
    if ! id=$(sbatch --parsable --job-name="$label" "$@" 2>&1); then
        fail "$label: sbatch refused the job: $id"
        return 1
    fi
    id=${id%%;*}
    LABELS+=("$label")
    JOB_ID[$label]=$id
    echo "submitted $label as job $id"
}

job_lines() {  # job_lines LABEL: one `scontrol show job -o` line per job (array task)
    scontrol show job -o "${JOB_ID[$1]:-}" 2>&1
}

job_field() {  # job_field LINE NAME: the value of NAME=... in a scontrol line
    local line=$1 name=$2
    sed -n "s/.*\(^\| \)$name=\([^ ]*\).*/\2/p" <<<"$line"
}

wait_for_jobs() {  # wait_for_jobs LIMIT_S: until no submitted job is pending or running
    local limit=$1 start=$SECONDS ids
    ids=$(IFS=,; echo "${JOB_ID[*]}")
    [ -n "$ids" ] || return 0
    while [ -n "$(squeue -h -j "$ids" -o %i 2>/dev/null)" ]; do
        if ((SECONDS - start >= limit)); then
            fail "jobs still queued or running after ${limit} s: $(squeue -h -j "$ids" -o '%i %j %T %M' | tr '\n' ';')"
            scancel $ids 2>/dev/null
            return 1
        fi
        sleep 1
    done
}

show_output() {  # show_output LINE: the tail of the job's output file, for a failure
    local out
    out=$(job_field "$1" StdOut)
    [ -n "$out" ] && [ -f "$out" ] && { echo "--- tail of $out"; tail -n 30 "$out"; echo "---"; }
}

expect_completed() {  # expect_completed LABEL [MIN_RESTARTS]: COMPLETED, exit 0, restarts
    local label=$1 min_restarts=${2:-0} line state code restarts ok=0
    if [ -z "${JOB_ID[$label]:-}" ]; then
        fail "$label: expected a submitted job, got none"
        return 1
    fi
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        state=$(job_field "$line" JobState)
        code=$(job_field "$line" ExitCode)
        restarts=$(job_field "$line" Restarts)
        if [ "$state" != COMPLETED ] || [ "$code" != 0:0 ]; then
            fail "$label: expected COMPLETED with exit code 0:0, got $state with $code (job $(job_name "$line"))"
            show_output "$line"
            ok=1
        elif [ "${restarts:-0}" -lt "$min_restarts" ]; then
            fail "$label: expected at least $min_restarts requeue(s), got ${restarts:-0}"
            show_output "$line"
            ok=1
        fi
    done < <(job_lines "$label")
    return $ok
}

job_name() {  # job_name LINE: 12 for a job, 12_3 for task 3 of array job 12
    local task
    task=$(job_field "$1" ArrayTaskId)
    if [ -n "$task" ]; then
        echo "$(job_field "$1" ArrayJobId)_$task"
    else
        job_field "$1" JobId
    fi
}

report_times() {  # one line per job: state, restarts, run time of its last start
    local label line
    printf '%-18s %-8s %-10s %-9s %s\n' label job state restarts "run time (last start)"
    for label in "${LABELS[@]}"; do
        while IFS= read -r line; do
            [ -n "$line" ] || continue
            printf '%-18s %-8s %-10s %-9s %s\n' "$label" "$(job_name "$line")" \
                "$(job_field "$line" JobState)" "$(job_field "$line" Restarts)" \
                "$(job_field "$line" RunTime)"
        done < <(job_lines "$label")
    done
}
