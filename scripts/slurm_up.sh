#!/usr/bin/env bash
# Brings up a single-node Slurm test cluster on this machine (docs/slurm.md).
# Takes: under a minute once Slurm is installed (apt-get the first time).
#
#   bash scripts/slurm_up.sh          # install if needed, configure, start, wait for idle
#   export SLURM_CONF=/tmp/hypic-slurm/slurm.conf   # what it prints at the end
#   bash scripts/slurm_down.sh        # stops exactly the daemons started here
#
# What it does:
#   1. installs slurm-wlm, munge and libpmix-dev with apt-get when missing
#      (idempotent; libpmix-dev: see below). As
#      non-root it prints the exact apt-get command and exits 1.
#   2. writes, under HYPIC_SLURM_DIR, a munge key, slurm.conf (one node, this
#      machine's CPUs and memory as `slurmd -C` detects them, one partition,
#      proctrack/linuxproc + task/none: no cgroups, so it runs in containers),
#      and state, spool and log folders.
#   3. starts munged, slurmctld and slurmd in the background (own session),
#      records their PIDs in $HYPIC_SLURM_DIR/pids, and waits (bounded) until
#      `sinfo` shows the node idle.
# If the recorded daemons are already running it says so and exits 0.
#
# MPI launch plugin: Debian 12's slurm-wlm-basic-plugins ships mpi_pmix
# (pmix_v4, against libpmix2 4.2.2, the PMIx Debian's Open MPI 4.1.4 is built
# with), so `srun --mpi=pmix` works. pmi2 is NOT a fallback for Debian's Open
# MPI: it has no PMI-1/PMI-2 client (MPI_Init fails "OMPI was not built with
# SLURM's PMI support"); without pmix, use HYPIC_LAUNCHER=mpirun in the jobs.
# HYPIC_SRUN_MPI chooses the plugin (default: pmix when the plugin file is
# installed, else pmi2 with a warning, for an MPI that has a PMI-2 client) and
# becomes MpiDefault.
#
# Environment:
#   HYPIC_SLURM_DIR      state folder (default /tmp/hypic-slurm)
#   HYPIC_SRUN_MPI       pmix | pmi2 | none (default: pmix if available, else pmi2)
#   HYPIC_SLURM_WAIT     seconds to wait for the node to become idle (default 60)
#   HYPIC_SLURM_PORT     slurmctld port; slurmd uses PORT+1 (default 6817)
#   HYPIC_SLURM_PARTITION partition name (default debug)
#   HYPIC_SLURM_MAXTIME  partition MaxTime in minutes (default 60)
#   HYPIC_SLURM_ETC_LINK 1 (default): if /etc/slurm/slurm.conf does not exist,
#                        link it to the generated file so plain `sinfo` works;
#                        slurm_down.sh removes the link. 0: never touch /etc.
set -euo pipefail

STATE=${HYPIC_SLURM_DIR:-/tmp/hypic-slurm}
WAIT=${HYPIC_SLURM_WAIT:-60}
PORT=${HYPIC_SLURM_PORT:-6817}
PARTITION=${HYPIC_SLURM_PARTITION:-debug}
MAXTIME=${HYPIC_SLURM_MAXTIME:-60}
ETC_LINK=${HYPIC_SLURM_ETC_LINK:-1}
CONF=$STATE/slurm.conf
PIDS=$STATE/pids

say() { echo "slurm_up: $*"; }
die() { echo "slurm_up: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- 1. install
# slurm-wlm pulls slurmctld, slurmd, slurm-client and slurm-wlm-basic-plugins
# (which holds mpi_pmix.so / mpi_pmix_v4.so). The pmix plugin dlopen()s the
# unversioned /usr/lib/<arch>/pmix2/lib/libpmix.so, which only libpmix-dev
# ships, so `srun --mpi=pmix` needs libpmix-dev as well (libopenmpi-dev pulls
# it in on a build machine; a run-only machine needs it named).
PKGS=(slurm-wlm munge libpmix-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
PATH=$PATH:/usr/sbin:/sbin
if ((${#missing[@]})); then
  cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "slurm_up: missing packages: ${missing[*]}. As root, run:" >&2
    echo "  $cmd" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The package scripts try to start the services; in a container without
  # systemd that fails harmlessly (policy-rc.d) and we start our own below.
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}"; }
fi
for b in slurmctld slurmd munged mungekey sinfo srun sbatch scontrol; do
  command -v "$b" >/dev/null 2>&1 || die "'$b' not found after installing ${PKGS[*]}"
done

# ------------------------------------------------------------ already up?
alive() { # alive PID NAME: the PID runs and is that program (or setsid just before its exec)
  local comm
  [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
  comm=$(cat "/proc/$1/comm" 2>/dev/null)
  [[ "$comm" == "$2" || "$comm" == setsid ]]
}
if [[ -f $PIDS ]]; then
  n_alive=0
  while read -r name pid; do alive "$pid" "$name" && n_alive=$((n_alive + 1)); done <"$PIDS"
  if ((n_alive == 3)) && SLURM_CONF=$CONF sinfo -h >/dev/null 2>&1; then
    say "already up (PIDs in $PIDS):"
    SLURM_CONF=$CONF sinfo
    echo "export SLURM_CONF=$CONF"
    exit 0
  fi
  die "$PIDS exists but only $n_alive of 3 recorded daemons run; run scripts/slurm_down.sh first"
fi
if [[ $(id -u) -ne 0 ]]; then
  say "warning: not root; running the daemons as $(id -un) (SlurmUser/SlurmdUser); jobs run as that user only"
fi

# ------------------------------------------------------------ 2. configure
rm -rf "$STATE"
mkdir -p "$STATE"/{munge,ctld,slurmd,log,run}
chmod 0755 "$STATE"
chmod 0700 "$STATE/munge"
mungekey --create --keyfile="$STATE/munge/munge.key" >/dev/null 2>&1 ||
  { dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none; }
chmod 0400 "$STATE/munge/munge.key"
MUNGE_SOCKET=$STATE/munge/munge.socket

NODE=$(hostname -s)
if ! getent hosts "$NODE" >/dev/null 2>&1; then NODE=localhost; fi
# slurmd -C prints this machine's detected layout; keep its CPU topology and
# give Slurm 95% of the memory (a full RealMemory drains a node whose memory
# reads a few MiB lower later).
detected=$(slurmd -C 2>/dev/null | head -n1)
layout=$(echo "$detected" | grep -oE '(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
mem=$(echo "$detected" | grep -oE 'RealMemory=[0-9]+' | cut -d= -f2)
[[ -n "$layout" ]] || layout="CPUs=$(nproc)"
[[ -n "$mem" ]] || mem=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)
mem=$((mem * 95 / 100))

# MPI plugin: pmix when this Slurm has it (Debian 12 does), else pmi2.
# `srun --mpi=list` needs a running cluster; look in the plugin folder instead.
plugdir=""
for d in /usr/lib/*/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
  [[ -f $d/mpi_none.so ]] && { plugdir=$d; break; }
done
have_plugin() { [[ -n "$plugdir" && -f "$plugdir/mpi_$1.so" ]]; }
MPI=${HYPIC_SRUN_MPI:-}
if [[ -z "$MPI" ]]; then
  if have_plugin pmix; then MPI=pmix; else
    MPI=pmi2
    say "WARNING: this Slurm has no mpi_pmix plugin; MpiDefault=pmi2 (set HYPIC_SRUN_MPI to choose)."
    say "WARNING: Debian's Open MPI cannot start under pmi2; run the jobs with HYPIC_LAUNCHER=mpirun"
  fi
fi
if [[ "$MPI" != none ]] && ! have_plugin "$MPI"; then
  die "HYPIC_SRUN_MPI=$MPI but $plugdir/mpi_$MPI.so does not exist"
fi

user=$(id -un)
cat >"$CONF" <<EOF
# Written by scripts/slurm_up.sh: a single-node test cluster. Do not edit;
# rerun slurm_down.sh + slurm_up.sh instead.
ClusterName=hypic
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
PlugStackConfig=$STATE/plugstack.conf
# No cgroups: plain /proc process tracking, no task binding, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=$MPI
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 ${layout}RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=$MAXTIME State=UP
EOF
: >"$STATE/plugstack.conf"

# ------------------------------------------------------------ 3. start
start() { # start NAME LOG CMD...: background, own session, record the PID
  local name=$1 log=$2
  shift 2
  setsid "$@" </dev/null >>"$log" 2>&1 &
  echo "$name $!" >>"$PIDS"
}
: >"$PIDS"
start munged "$STATE/log/munged.out" munged --foreground --force \
  --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
  --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
  --seed-file="$STATE/munge/munged.seed"
for _ in $(seq 50); do [[ -S $MUNGE_SOCKET ]] && break; sleep 0.1; done
[[ -S $MUNGE_SOCKET ]] || die "munged did not create $MUNGE_SOCKET; see $STATE/log/munged.log"
# PMIx's per-step folders (/tmp/spmix_appdir_<uid>_<job>.<step>) that an earlier cluster left
# behind: with its state cleared (-c) slurmctld numbers jobs from 1 again, and slurmd refuses to
# launch a step whose folder exists ("Cannot create directory ... File exists"). No step runs
# on this machine now (no slurmstepd), so any such folder is stale.
if ! pgrep -x slurmstepd >/dev/null; then
  find /tmp -maxdepth 1 -name 'spmix_appdir_*' -user "$(id -u)" -exec rm -rf {} + 2>/dev/null || true
fi
export SLURM_CONF=$CONF
start slurmctld "$STATE/log/slurmctld.out" slurmctld -D -c -f "$CONF"
start slurmd "$STATE/log/slurmd.out" slurmd -D -f "$CONF" -N "$NODE"

if [[ "$ETC_LINK" == 1 && ! -e /etc/slurm/slurm.conf && -w /etc/slurm ]]; then
  ln -s "$CONF" /etc/slurm/slurm.conf && echo /etc/slurm/slurm.conf >"$STATE/etc_link"
fi

say "waiting up to ${WAIT}s for node $NODE to be idle"
state=""
for _ in $(seq $((WAIT * 2))); do
  while read -r name pid; do
    alive "$pid" "$name" || {
      tail -n 20 "$STATE/log/$name.log" "$STATE/log/$name.out" >&2 2>/dev/null || true
      die "$name (PID $pid) exited during start-up; logs in $STATE/log; run scripts/slurm_down.sh"
    }
  done <"$PIDS"
  state=$(sinfo -h -n "$NODE" -o '%t' 2>/dev/null | head -n1 || true)
  [[ "$state" == idle ]] && break
  sleep 0.5
done
if [[ "$state" != idle ]]; then
  scontrol show node "$NODE" 2>&1 | grep -E 'State|Reason' >&2 || true
  tail -n 20 "$STATE/log/slurmctld.log" "$STATE/log/slurmd.log" >&2 2>/dev/null || true
  die "node $NODE not idle after ${WAIT}s (state '${state:-no answer}'); daemons left running for inspection, logs in $STATE/log; stop them with scripts/slurm_down.sh"
fi
say "up: node $NODE ($layout RealMemory=${mem}M), partition $PARTITION, MpiDefault=$MPI"
say "PIDs: $(tr '\n' ' ' <"$PIDS")(in $PIDS)"
sinfo
echo "export SLURM_CONF=$CONF"
