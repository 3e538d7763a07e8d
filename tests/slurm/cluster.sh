#!/usr/bin/env bash
# A throw-away Slurm cluster on this machine, for testing the templates in slurm/.
#
#   bash tests/slurm/cluster.sh start    # install if needed, (re)start, wait until idle
#   bash tests/slurm/cluster.sh stop     # cancel jobs, stop the daemons
#   bash tests/slurm/cluster.sh env      # print `export SLURM_CONF=...` for your shell
#
# or `source` it and call slurm_install / slurm_start / slurm_stop. Needs root (it runs
# slurmd, which starts jobs as their users) and Debian's packages, which it installs
# with apt-get when any of them is missing (~10 s). Every file (munge key and socket, slurm.conf,
# state, spool, logs, pid files) lives under one directory, so the machine's own
# /etc/slurm and /etc/munge are never used, and a second `start` replaces the first.
#
# Knobs (environment):
#   MPIEVO_SLURM_DIR    where everything lives (default /tmp/mpievo-slurm)
#   MPIEVO_SLURM_NODES  emulated nodes, one slurmd each on its own port (default 2)
#   MPIEVO_SLURM_CPUS   CPUs each node claims (default: this machine's CPU count)
#   MPIEVO_SLURM_PORT   slurmctld's port; the slurmds take the next ones (default 6817)
#   MPIEVO_SLURM_CRED_EXPIRE  seconds a requeued job waits before it may start again
#                       (Slurm's default: 120; here 5, to keep the requeue test short)

SLURM_DIR=${MPIEVO_SLURM_DIR:-/tmp/mpievo-slurm}
SLURM_NODES=${MPIEVO_SLURM_NODES:-2}
SLURM_CPUS=${MPIEVO_SLURM_CPUS:-$(nproc)}
SLURM_PORT=${MPIEVO_SLURM_PORT:-6817}
SLURM_CRED_EXPIRE=${MPIEVO_SLURM_CRED_EXPIRE:-5}
SLURM_CONF_TEMPLATE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/slurm.conf.in"
# slurm-wlm's mpi/pmix plugin dlopens the unversioned libpmix.so, which only the -dev
# package ships; without it `srun --mpi=pmix` fails with "can not load PMIx library".
SLURM_PACKAGES=(slurmctld slurmd slurm-client munge libpmix-dev)

export SLURM_CONF="$SLURM_DIR/slurm.conf"

_missing_packages() {
    local pkg
    for pkg in "${SLURM_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || echo "$pkg"
    done
}

slurm_install() {  # install Debian's Slurm and munge unless already there
    local missing
    missing=$(_missing_packages)
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "cluster.sh: expected root to install ${missing//$'\n'/ }, got uid $(id -u)" >&2
        return 1
    fi
    echo "cluster.sh: installing" $missing
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || return 1
    # policy-rc.d in containers refuses to start the packaged services; we start our own.
    apt-get install -y -q --no-install-recommends $missing >/dev/null || return 1
}

_node_name() { echo "node$1"; }

_node_lines() {  # one NodeName line per emulated node, all on 127.0.0.1
    local i
    for ((i = 1; i <= SLURM_NODES; i++)); do
        echo "NodeName=$(_node_name "$i") NodeHostname=localhost NodeAddr=127.0.0.1" \
             "Port=$((SLURM_PORT + i)) CPUs=$SLURM_CPUS RealMemory=1024 State=UNKNOWN"
    done
}

_write_conf() {
    local nodes
    nodes=$(_node_lines)
    sed -e "s|@DIR@|$SLURM_DIR|g" -e "s|@CTLD_PORT@|$SLURM_PORT|g" \
        -e "s|@CRED_EXPIRE@|$SLURM_CRED_EXPIRE|g" "$SLURM_CONF_TEMPLATE" \
        | awk -v nodes="$nodes" '{ if ($0 == "@NODES@") print nodes; else print }' \
        > "$SLURM_CONF"
}

_start_munge() {
    local dir="$SLURM_DIR/munge"
    mkdir -p "$dir"
    chmod 755 "$dir"  # clients must reach the socket
    mungekey --create --keyfile="$dir/munge.key" 2>/dev/null \
        || dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
    chmod 600 "$dir/munge.key"
    munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
        --pid-file="$SLURM_DIR/run/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
        --seed-file="$dir/munged.seed" || return 1
    munge -S "$dir/munge.sock" -n | unmunge -S "$dir/munge.sock" >/dev/null
}

slurm_wait_idle() {  # slurm_wait_idle [SECONDS]: until every node is idle
    local limit=${1:-60} start=$SECONDS states
    while ((SECONDS - start < limit)); do
        states=$(sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
        [ "$states" = "idle " ] && return 0
        sleep 0.5
    done
    echo "cluster.sh: expected all nodes idle within ${limit} s, got: ${states:-no answer}" >&2
    sinfo -N >&2
    return 1
}

slurm_start() {  # (re)create the cluster from scratch and wait until it is idle
    local i
    case "$SLURM_DIR" in
        /tmp/?* | /var/tmp/?* | */mpievo-slurm*) ;;
        *) echo "cluster.sh: expected MPIEVO_SLURM_DIR under /tmp or named *mpievo-slurm*" \
                "(it is wiped), got '$SLURM_DIR'" >&2
           return 1 ;;
    esac
    slurm_install || return 1
    slurm_stop
    rm -rf "$SLURM_DIR"
    mkdir -p "$SLURM_DIR"/{state,spool,run,log}
    _start_munge || { echo "cluster.sh: munged did not start" >&2; return 1; }
    _write_conf
    slurmctld -f "$SLURM_CONF" || { echo "cluster.sh: slurmctld failed" >&2; return 1; }
    for ((i = 1; i <= SLURM_NODES; i++)); do
        mkdir -p "$SLURM_DIR"/{spool,tmp}/"$(_node_name "$i")"
        slurmd -f "$SLURM_CONF" -N "$(_node_name "$i")" \
            || { echo "cluster.sh: slurmd $(_node_name "$i") failed" >&2; return 1; }
    done
    slurm_wait_idle 60
}

_daemon_pid() {  # _daemon_pid FILE NAME: the pid in FILE if it is still our NAME daemon
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    # The pid may have been reused since an earlier run: only touch the daemon we started.
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}

_any_alive() {  # _any_alive PID...: true while one of them still exists
    local pid
    for pid in "$@"; do
        [ -d "/proc/$pid" ] && return 0
    done
    return 1
}

_stop_daemons() {  # _stop_daemons NAME FILE...: SIGTERM them all, SIGKILL after 10 s
    local name=$1 file pid pids=() tries
    shift
    for file in "$@"; do
        [ -e "$file" ] || continue
        pid=$(_daemon_pid "$file" "$name") && pids+=("$pid")
        rm -f "$file"
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill "${pids[@]}" 2>/dev/null
    for ((tries = 0; tries < 100; tries++)); do
        _any_alive "${pids[@]}" || return 0
        sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null
    return 0
}

slurm_stop() {  # cancel every job, then stop the daemons a previous start left running
    local tries
    # Ask only a live controller: clients retry a dead one for seconds.
    if _daemon_pid "$SLURM_DIR/run/slurmctld.pid" slurmctld >/dev/null; then
        scancel --full --quiet --user="$(id -un)" 2>/dev/null
        for ((tries = 0; tries < 40; tries++)); do
            [ -z "$(squeue -h 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    local slurmds controller
    _stop_daemons slurmd "$SLURM_DIR"/run/slurmd-*.pid &
    slurmds=$!
    _stop_daemons slurmctld "$SLURM_DIR/run/slurmctld.pid" &
    controller=$!
    wait "$slurmds" "$controller"
    _stop_daemons munged "$SLURM_DIR/run/munged.pid"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
        start) slurm_start && echo "export SLURM_CONF=$SLURM_CONF" ;;
        stop) slurm_stop ;;
        env) echo "export SLURM_CONF=$SLURM_CONF" ;;
        *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
    esac
fi
