#!/usr/bin/env bash
# A private Slurm on this host for the Slurm tests (tests/slurm) and for trying docs/clusters.md:
# munged, slurmctld and two slurmd (nodes kolo-n1 and kolo-n2 on this one host, told apart by
# NodeName and Port) with everything under one directory.
# Usage: scripts/slurm.sh install       the Debian packages (root; apt), when missing
#        scripts/slurm.sh up            install, write the configuration, start the daemons, wait
#                                       until both nodes are idle (idempotent: a running one is kept)
#        scripts/slurm.sh test-up       `up` without installing, for CTest's fixture (slurm_up):
#                                       says why it cannot start (not root, no packages) and exits 0,
#                                       so that the tests run and skip with that reason
#        scripts/slurm.sh down          stop what `up` started (only those daemons, by pid file)
#        scripts/slurm.sh status        exit 0 when the nodes answer; prints sinfo
#        scripts/slurm.sh env           prints `export SLURM_CONF=...` for srun/sbatch to find it
# KOLO_SLURM_DIR (default /tmp/kolo-slurm) holds slurm.conf, the state, spool, logs and pid files.
# Needs root (slurmd starts the tasks as the submitting user; munged runs as user munge).
# The node names must resolve (Kolo's rank 0 hosts its store on the step's first node, by name):
# `up` adds them to /etc/hosts as 127.0.0.1 when they are missing.
set -euo pipefail
dir="${KOLO_SLURM_DIR:-/tmp/kolo-slurm}"
conf="$dir/slurm.conf"
nodes=(kolo-n1 kolo-n2)
ctld_port=16817
first_node_port=16818
export SLURM_CONF="$conf"

log() { echo "slurm.sh: $*" >&2; }

install() {
  local missing=()
  for p in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [[ $(id -u) -eq 0 ]] || { log "installing ${missing[*]} needs root"; return 1; }
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

write_conf() {
  mkdir -p "$dir/state" "$dir/log"
  local cpus=4 line
  {
    echo "# Written by scripts/slurm.sh: a one-host cluster for Kolo's tests."
    echo "ClusterName=kolo"
    echo "SlurmctldHost=$(hostname)(127.0.0.1)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool-%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    # No cgroups in a container: track tasks by their parent pid, bind nothing.
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    # The nodes declare more CPUs than a small CI machine has; take the configuration's word.
    echo "SlurmdParameters=config_overrides"
    echo "KillWait=2"
    echo "MinJobAge=60"
    echo "SchedulerParameters=sched_interval=1"
    local port=$first_node_port
    for n in "${nodes[@]}"; do
      echo "NodeName=$n NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$port CPUs=$cpus State=UNKNOWN"
      port=$((port + 1))
    done
    line=$(IFS=,; echo "${nodes[*]}")
    echo "PartitionName=kolo Nodes=$line Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } >"$conf.new"
  mv "$conf.new" "$conf"
}

running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_munge() {
  if munge -n </dev/null >/dev/null 2>&1; then return 0; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  [[ -f /etc/munge/munge.key ]] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
  cp /run/munge/munged.pid "$dir/munged.pid" 2>/dev/null || pgrep -u munge -n -x munged >"$dir/munged.pid"
  for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "munged did not start"; return 1
}

up() {
  install
  mkdir -p "$dir"
  running "$dir/slurmctld.pid" || write_conf  # a running cluster keeps the configuration it read
  start_munge
  for n in "${nodes[@]}"; do
    grep -qw "$n" /etc/hosts || echo "127.0.0.1 $n" >>/etc/hosts
  done
  running "$dir/slurmctld.pid" || /usr/sbin/slurmctld -f "$conf" -i
  for n in "${nodes[@]}"; do
    mkdir -p "$dir/spool-$n"
    running "$dir/slurmd-$n.pid" || /usr/sbin/slurmd -f "$conf" -N "$n"
  done
  for _ in $(seq 100); do
    if [[ $(sinfo -h -t idle,mix,alloc -o '%D' 2>/dev/null | awk '{s+=$1} END {print s+0}') -ge ${#nodes[@]} ]]; then
      log "up: ${#nodes[@]} nodes idle (SLURM_CONF=$conf)"; return 0
    fi
    sleep 0.2
  done
  log "the nodes did not come up; see $dir/log"; sinfo >&2 || true; return 1
}

# Stops the daemons of these pid files (only those still running), all at once, then waits.
stop_pidfiles() {
  local pids=() f
  for f in "$@"; do running "$f" && pids+=("$(cat "$f")"); done
  ((${#pids[@]})) || return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0 p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

down() {
  local files=()
  for n in "${nodes[@]}"; do files+=("$dir/slurmd-$n.pid"); done
  stop_pidfiles "${files[@]}" "$dir/slurmctld.pid"
  # munged last: the others authenticate through it while they stop.
  stop_pidfiles "$dir/munged.pid"
  rm -f "$dir/munged.pid"
  log "down"
}

case "${1:-}" in
  install) install ;;
  up) up ;;
  test-up)
    if [[ $(id -u) -ne 0 ]]; then log "not root: no cluster; the Slurm tests skip"; exit 0; fi
    if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
      log "slurmctld, slurmd or munged is not installed (scripts/setup.sh installs them): the Slurm tests skip"
      exit 0
    fi
    up || { log "the cluster did not start: the Slurm tests skip"; exit 0; } ;;
  down) down ;;
  status) sinfo ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 install|up|down|status|env" >&2; exit 2 ;;
esac
