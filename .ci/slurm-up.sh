#!/usr/bin/env bash
# A real single-host SLURM for the tests (tests/cluster/slurm_host.py): munge and slurm-wlm from apt where missing,
# munged as the munge user, slurmctld and slurmd started as root without systemd (they daemonize; pid files in /run).
# Idempotent: a SLURM already up with its node ready is left as it is. Exit 0 once `sinfo` shows the node ready.
# Needs root. Prints one line on success ("slurm: up ...") and the reason on failure (exit 1).
#
# What mattered (issue 47): the node is `localhost` at 127.0.0.1 (`slurmd -N localhost`) because the host's own
# name differs; select/cons_tres with CR_Core_Memory needs DefMemPerCPU, or a job without --mem takes the whole
# node and jobs run one at a time; proctrack/linuxproc and task/none (no cgroups in a container); accounting and
# job completion logging off.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
MARK="# written by hypersweep .ci/slurm-up.sh"

fail() { echo "slurm: $*" >&2; exit 1; }

ready() {
    timeout 5 scontrol ping 2>/dev/null | grep -q "is UP" || return 1
    local state
    state="$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null | head -1)"
    case "$state" in idle* | mixed* | alloc* | completing*) return 0 ;; *) return 1 ;; esac
}

if command -v scontrol >/dev/null && ready; then
    echo "slurm: already up ($(sinfo -h -n localhost -o '%T, %c CPUs, %m MB'))"
    exit 0
fi
[ "$(id -u)" = 0 ] || fail "needs root to start munged, slurmctld and slurmd"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || fail "slurm-wlm and munge are not installed and there is no apt-get"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm munge; } >/dev/null ||
        fail "apt-get install slurm-wlm munge failed"
fi
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    fail "$CONF exists and was not written here: not touching a real site's configuration"
fi

# Folders and owners.
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
install -d -o slurm -g slurm -m 0755 /var/lib/slurm /var/lib/slurm/slurmctld /var/log/slurm
install -d -o root -g root -m 0755 /var/lib/slurm/slurmd
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key

# Not nproc alone: it counts OMP_NUM_THREADS, which is 1 in a test process that started a Dask nanny (distributed sets
# it in the parent) and which tests/cluster/test_slurm_jobs.py runs this from: the node had 1 CPU, one job at a time.
cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
memory_mb="$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
cat >"$CONF" <<EOF
$MARK
ClusterName=hypersweep-ci
SlurmctldHost=$(uname -n | cut -d. -f1)(127.0.0.1)
SlurmUser=slurm
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=30
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF

if ! pgrep -u munge -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged || fail "munged did not start (see /var/log/munge/munged.log)"
fi
for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
munge -n </dev/null | unmunge >/dev/null 2>&1 || fail "munge does not answer"

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
running /run/slurmctld.pid || slurmctld || fail "slurmctld did not start (see /var/log/slurm/slurmctld.log)"
running /run/slurmd.pid || slurmd -N localhost || fail "slurmd did not start (see /var/log/slurm/slurmd.log)"
for _ in $(seq 120); do
    ready && break
    state="$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null | head -1 || true)"
    case "$state" in down* | drain*) scontrol update NodeName=localhost State=RESUME 2>/dev/null || true ;; esac
    sleep 0.5
done
ready || fail "the node is not ready after 60 s: $(sinfo -h -N -o '%N %T %E' 2>&1 | head -1)"
echo "slurm: up ($(sinfo -h -n localhost -o '%T, %c CPUs, %m MB'))"
