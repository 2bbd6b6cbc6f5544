#!/usr/bin/env bash
# A throwaway one-node Slurm cluster in a directory, to try scripts/slurm-sweep.sh without a
# cluster (and for its test). As root:
#
#   scripts/slurm-local.sh start DIR     # munged, slurmctld, slurmd; prints `export SLURM_CONF=...`
#   SLURM_CONF=DIR/slurm.conf scripts/slurm-sweep.sh --wait --dir DIR/run -- sim sweep ...
#   scripts/slurm-local.sh stop DIR      # stops every daemon it started, by its PID
#
# Everything lives in DIR: the munge key and socket, slurm.conf, state, spool, logs, PID files.
# The node is this machine with its CPUs; ports are chosen free at start. Needs Debian's
# slurmctld, slurmd, slurm-client and munge. Exit status 77 when they or root are missing.
set -euo pipefail

usage() { echo "usage: slurm-local.sh start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)

daemons=(munged slurmctld slurmd)

# Whether PID is a daemon of this cluster: alive, and started with a path inside DIR (every
# daemon here is), so a PID reused by another process is never signalled.
ours() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$dir/"
}

# The daemons of this cluster still running, as `name(PID)` words.
running() {
  local d pid out=()
  for d in "${daemons[@]}"; do
    [ -f "$dir/$d.pid" ] || continue
    pid=$(cat "$dir/$d.pid")
    if ours "$pid"; then out+=("$d($pid)"); fi
  done
  echo "${out[*]}"
}

stop() {
  local status=0
  for d in slurmd slurmctld munged; do
    local pidfile=$dir/$d.pid
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    if ours "$pid"; then
      kill "$pid" 2>/dev/null || true
      # Wait for it to go, then insist.
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid" 2>/dev/null || true
        echo "slurm-local: $d ($pid) did not stop on SIGTERM; killed" >&2
        status=1
      fi
    fi
    rm -f "$pidfile"
  done
  return $status
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
  if [ "$(id -u)" -ne 0 ]; then echo "SKIPPED: a local Slurm cluster needs root"; exit 77; fi
  # A second start must not start a second set of daemons over the first (its munge key and
  # PID files would be overwritten, and the first daemons left running with nothing to stop
  # them): a whole running cluster is reused, a part of one refused.
  local up
  up=$(running)
  if [ "$(wc -w <<<"$up")" -eq ${#daemons[@]} ]; then
    echo "slurm-local: the cluster in $dir is already running: $up" >&2
    echo "export SLURM_CONF=$dir/slurm.conf"
    return 0
  fi
  if [ -n "$up" ]; then
    echo "slurm-local: part of a cluster is still running in $dir: $up; stop it first: slurm-local.sh stop $dir" >&2
    exit 1
  fi
  for d in "${daemons[@]}" sbatch; do
    command -v "$d" >/dev/null || { echo "SKIPPED: $d not found (apt-get install slurmctld slurmd slurm-client munge)"; exit 77; }
  done
  local host cpus ctld_port d_port
  host=$(hostname -s)
  cpus=$(nproc)
  ctld_port=$(free_port)
  d_port=$(free_port)
  while [ "$d_port" = "$ctld_port" ]; do d_port=$(free_port); done
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  cat >"$dir/slurm.conf" <<EOF
# A one-node cluster made by scripts/slurm-local.sh; stop it with: slurm-local.sh stop $dir
ClusterName=nvarray-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  trap 'stop || true' ERR
  munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" --force
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -f "$dir/slurm.conf"
  slurmd -f "$dir/slurm.conf"
  # Ready when the node is idle (slurmd registered with slurmctld): a poll with a deadline.
  local state=""
  for _ in $(seq 300); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
    [ "$state" = idle ] && break
    sleep 0.1
  done
  if [ "$state" != idle ]; then
    echo "slurm-local: the node is '${state:-unknown}' after 30 s, not idle; logs in $dir" >&2
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    stop || true
    exit 1
  fi
  trap - ERR
  echo "export SLURM_CONF=$dir/slurm.conf"
}

case "$action" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
