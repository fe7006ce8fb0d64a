#!/usr/bin/env bash
# A private single-node Slurm (munged + slurmctld + slurmd) with all its state under one directory.
#
#   tests/slurm/slurm-local.sh start DIR   # prints `SLURM_CONF=DIR/slurm.conf` once the node is idle
#   tests/slurm/slurm-local.sh stop DIR    # cancels its jobs, stops every daemon it started, waits
#
# Why a script: the tests (tests/slurm/conftest.py) and a person at a shell start the same Slurm.
# Nothing is written outside DIR: no /etc/slurm, no system munge key, free ports picked at start.
# Debian's packages (slurmctld slurmd slurm-client munge libpmix-dev) must be installed: `make slurm`.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
action=$1
dir=$(realpath -m "$2")
export SLURM_CONF=$dir/slurm.conf

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_daemons() {  # TERM every daemon named by a pid file at once (each takes 1-2 s), KILL after 10 s
  local pidfile pids=()
  for pidfile in "$@"; do
    [[ -s $pidfile ]] && pids+=("$(<"$pidfile")")
    rm -f "$pidfile"
  done
  [[ ${#pids[@]} -gt 0 ]] || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do any_alive "${pids[@]}" || return 0; sleep 0.1; done
  echo "daemons ${pids[*]} still there 10 s after TERM: killing them" >&2
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

any_alive() {
  local pid
  for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done
  return 1
}

start() {
  for tool in munged mungekey slurmctld slurmd sbatch squeue scancel; do
    command -v "$tool" >/dev/null || { echo "$tool is not installed: run \`make slurm\` (Debian packages)" >&2; exit 3; }
  done
  ldconfig -p | grep 'libpmix\.so ' >/dev/null || \
    echo "warning: no libpmix.so (libpmix-dev): srun --mpi=pmix will not work" >&2
  mkdir -p "$dir"/{munge,state,spool,log,run}
  chmod 711 "$dir/munge"
  mungekey --create --keyfile="$dir/munge/munge.key" --force
  chmod 400 "$dir/munge/munge.key"
  munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed" \
    --force

  local node memory cpus
  node=$(hostname -s)
  # the node as slurmd sees it, memory lowered to 95 % (slurmd drains a node that reports less)
  read -r cpus memory < <(slurmd -C | awk '/^NodeName/ {
      for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      print v["CPUs"], int(v["RealMemory"] * 0.95) }')
  cat > "$SLURM_CONF" <<EOF
# written by tests/slurm/slurm-local.sh: one node, root, everything under $dir
ClusterName=workbench-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the Slurm default: the workbench must not rely on a site's MpiDefault
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=5
InactiveLimit=0
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=60 State=UP
EOF
  slurmctld -D -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 &
  echo $! > "$dir/run/slurmctld.pid"
  slurmd -D -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 &
  echo $! > "$dir/run/slurmd.pid"

  for _ in $(seq 300); do  # up to 30 s for the node to be idle
    if [[ $(sinfo -h -N -o %t 2>/dev/null) == idle ]]; then echo "SLURM_CONF=$SLURM_CONF"; return 0; fi
    sleep 0.1
  done
  echo "Slurm did not come up within 30 s; its logs are in $dir/log:" >&2
  tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 || true
  stop
  exit 1
}

stop() {
  if [[ -s $dir/run/slurmctld.pid ]] && kill -0 "$(<"$dir/run/slurmctld.pid")" 2>/dev/null; then
    # every job of this private cluster, then wait for their steps (slurmstepd, tasks) to end
    squeue -h -o %i | xargs -r scancel 2>/dev/null || true
    for _ in $(seq 150); do  # (a dead slurmd cannot end them: then the step daemons are killed below)
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] || ! any_alive "$(<"$dir/run/slurmd.pid")" && break
      sleep 0.1
    done
  fi
  stop_daemons "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid" "$dir/run/munged.pid"
  # step daemons and job tasks of this cluster: left only when slurmd died before its jobs were
  # cancelled (slurmd is the one that ends them)
  reap_job_processes
}

reap_job_processes() {
  # A process is this cluster's when its environment names this slurm.conf (read raw: slurmstepd
  # writes its title over the start of it) and it is a slurmd, a slurmstepd or a job's task
  # (SLURM_JOB_ID set). They are frozen first and the scan repeated until it finds no new one (a
  # task may be forking as it is found), then killed together; this script's own line is spared.
  python3 - "$SLURM_CONF" <<'PYTHON'
import os, signal, sys, time

marker = b"SLURM_CONF=" + sys.argv[1].encode()
spared, pid = set(), os.getpid()
while pid > 1:
    spared.add(pid)
    with open(f"/proc/{pid}/status") as status:
        pid = int(next(line for line in status if line.startswith("PPid:")).split()[1])

def of_this_cluster():
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in spared:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{name}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
            with open(f"/proc/{name}/comm") as comm:
                command = comm.read().strip()
        except OSError:
            continue
        if marker in variables and (
            command in ("slurmd", "slurmstepd") or any(v.startswith(b"SLURM_JOB_ID=") for v in variables)
        ):
            yield int(name)

frozen: set[int] = set()
for _ in range(100):
    found = set(of_this_cluster())
    if not found:
        break
    for pid in found - frozen:
        try:
            os.kill(pid, signal.SIGSTOP)
            frozen.add(pid)
        except ProcessLookupError:
            pass
    if found <= frozen and found:
        print(f"killing step daemons and tasks left by a dead slurmd: {sorted(found)}", file=sys.stderr)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        frozen -= found
    time.sleep(0.05)
PYTHON
}

case $action in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
