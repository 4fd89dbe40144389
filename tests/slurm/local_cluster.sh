#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for the tests marked `slurm` (tests/test_slurm.py) and for
# trying `launcher=slurm` by hand (docs/scaling.md). Needs root; installs Debian's SLURM and MUNGE where absent.
#
#   tests/slurm/local_cluster.sh start    install (apt-get) if needed, start munged, slurmctld and slurmd,
#                                         wait until `sinfo` shows the node idle; prints `export SLURM_CONF=...`
#   tests/slurm/local_cluster.sh stop     stop exactly the daemons `start` started (by the PIDs it recorded)
#   tests/slurm/local_cluster.sh status   sinfo and squeue
#
# Everything lives in $TINYLM_SLURM_DIR (default /tmp/tinylm-slurm): its own slurm.conf, MUNGE key and socket,
# state, spool, logs and PID files. Nothing under /etc is written, no system service is started, and SLURM
# commands find this cluster through SLURM_CONF=$TINYLM_SLURM_DIR/slurm.conf.
#
# The node has this machine's CPUs and memory; jobs get a short default time limit. Without cgroups (a
# container or sandbox) SLURM can still track and signal its jobs: proctrack/linuxproc, task/none,
# jobacct_gather/none. No accounting database: `sacct` does not work, squeue and scontrol do.
set -euo pipefail

DIR="${TINYLM_SLURM_DIR:-/tmp/tinylm-slurm}"
CONF="$DIR/slurm.conf"
NODE="$(hostname -s)"
CTLD_PORT="${TINYLM_SLURMCTLD_PORT:-16817}"
SLURMD_PORT="${TINYLM_SLURMD_PORT:-16818}"
DEFAULT_TIME_MIN="${TINYLM_SLURM_DEFAULT_TIME_MIN:-10}"
MUNGE_SOCKET="$DIR/munge/munge.socket"

die() { echo "local_cluster.sh: $*" >&2; exit 1; }

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    local missing=()
    command -v munged >/dev/null || missing+=(munge)
    { command -v slurmctld && command -v slurmd && command -v sinfo; } >/dev/null || missing+=(slurm-wlm)
    ((${#missing[@]})) || return 0
    command -v apt-get >/dev/null || die "SLURM is not installed and there is no apt-get to install ${missing[*]}"
    echo "installing ${missing[*]} with apt-get" >&2
    # No init system runs here, and none of the packages' services is wanted: only the daemons started below.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$DIR/apt.log" 2>&1 \
        || { apt-get update -q >>"$DIR/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$DIR/apt.log" 2>&1; } \
        || die "apt-get install ${missing[*]} failed; see $DIR/apt.log"
}

write_config() {
    local cpus memory_mb
    # nproc alone counts OMP_NUM_THREADS (1 in the tests), not the cores.
    cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
    memory_mb="$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)"
    cat >"$CONF" <<EOF
# Written by tests/slurm/local_cluster.sh: one node, this machine.
ClusterName=tinylm-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups needed: in a container they may be unavailable.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
# CPUs are what jobs consume; memory is checked against the node's but not reserved, so jobs that ask for
# none (mem_gb: null) do not each take the whole node.
SelectTypeParameters=CR_CPU
ReturnToService=2
# Requeued jobs (scontrol requeue) may run again; SIGTERM comes KillWait seconds before SIGKILL.
JobRequeue=1
KillWait=10
MinJobAge=300
SchedulerParameters=bf_interval=2,sched_min_interval=100000
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES DefaultTime=$DEFAULT_TIME_MIN MaxTime=60 State=UP
EOF
}

start_munge() {
    mkdir -p "$DIR/munge"
    chmod 700 "$DIR/munge"
    if [[ ! -f "$DIR/munge/munge.key" ]]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
        chmod 400 "$DIR/munge/munge.key"
    fi
    alive "$DIR/munged.pid" && return 0
    # --force: munged runs as root here, and the socket's directory is this cluster's own.
    munged --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCKET" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munge.seed" \
        || die "munged did not start; see $DIR/munged.log"
}

wait_for_idle_node() {
    local state=""
    for _ in $(seq 1 120); do
        state="$(SLURM_CONF="$CONF" sinfo --noheader --nodes="$NODE" --format=%t 2>/dev/null || true)"
        [[ "$state" == "idle" ]] && return 0
        sleep 0.5
    done
    die "the node is not idle after 60 s (sinfo says '${state:-nothing}'); see $DIR/slurmctld.log and $DIR/slurmd.log"
}

start() {
    [[ $EUID -eq 0 ]] || die "needs root (to install SLURM and run slurmd)"
    mkdir -p "$DIR/state" "$DIR/spool"
    install_packages
    write_config
    start_munge
    if ! alive "$DIR/slurmctld.pid"; then
        # -c: a fresh cluster, without jobs or node states left by an earlier start.
        slurmctld -f "$CONF" -c || die "slurmctld did not start; see $DIR/slurmctld.log"
    fi
    if ! alive "$DIR/slurmd.pid"; then
        slurmd -f "$CONF" -N "$NODE" || die "slurmd did not start; see $DIR/slurmd.log"
    fi
    wait_for_idle_node
    echo "export SLURM_CONF=$CONF"
}

stop() {
    # Jobs first: cancel what is left and wait until every job step's slurmstepd has ended (each has a
    # socket in this cluster's spool directory until it exits), so that none outlives the daemons.
    if alive "$DIR/slurmctld.pid"; then
        local jobs
        jobs="$(SLURM_CONF="$CONF" squeue --noheader --format=%A 2>/dev/null || true)"
        [[ -z "$jobs" ]] || SLURM_CONF="$CONF" scancel $jobs 2>/dev/null || true
    fi
    for _ in $(seq 1 120); do
        compgen -G "$DIR/spool/${NODE}_*" >/dev/null || break
        sleep 0.5
    done
    if compgen -G "$DIR/spool/${NODE}_*" >/dev/null; then
        echo "local_cluster.sh: job steps still running after 60 s: $(ls "$DIR/spool")" >&2
    fi
    # The daemons' own PID files, written when `start` started them: nothing else is signalled.
    local name pid
    for name in slurmd slurmctld munged; do
        [[ -f "$DIR/$name.pid" ]] || continue
        pid="$(cat "$DIR/$name.pid")"
        if kill -0 "$pid" 2>/dev/null && [[ "$(cat /proc/"$pid"/comm 2>/dev/null)" == "$name" ]]; then
            kill -TERM "$pid"
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
        fi
        rm -f "$DIR/$name.pid"
    done
}

status() {
    SLURM_CONF="$CONF" sinfo
    SLURM_CONF="$CONF" squeue
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
