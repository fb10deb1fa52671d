#!/usr/bin/env bash
# Runs hypic's warm-up on a three-node test cluster on this one machine (docs/cluster.md,
# "A test cluster on one machine"): three network namespaces, each a "node" with its own
# address on a private bridge, its own host name and hosts file; Open MPI over TCP between
# them (mpirun in node 1 starts the other nodes' daemons through a launch agent that enters
# their namespaces), and Slurm (slurmctld and three slurmd) on the same nodes; the store folder
# shared (one file system), /tmp private per node. Builds nothing.
# Takes: about a minute (HYPIC_TEST_BUDGET bounds it, 300 s).
#
#   bash scripts/test_cluster.sh              # as root; uses build/src/hypic
#   HYPIC_BIN=/path/to/hypic bash scripts/test_cluster.sh
#
# Checks, one PASS/FAIL line each, and a table at the end:
#   cluster     three namespaces on a bridge; `mpirun -n 3` across them runs one rank per
#               node, each with its node's host name and address
#   warmup      `mpirun -n 3 hypic warmup` across the nodes: exit 0, two shards in the
#               manifest, `inspect --verify` passes, and the store equals a one-process
#               warm-up of the same corpus entry for entry (key, tokens, arrays, checksum of
#               every entry after `store merge` into one file; model, dtype, junction)
#   slurm       munged, slurmctld (node 1) and one slurmd per node, in the namespaces, with
#               their own config, ports, state and sockets under the work folder: `srun -N 3
#               -n 3 --mpi=pmix hypic warmup` exits 0 and its store equals the one-process one
#   slurm-kill  the same under srun (--kill-on-bad-exit=1), node 3's hypic killed mid-warm-up:
#               srun fails with one `hypic: error:` line naming rank 2 on hypic-node3 and its
#               segment; a rerun under srun completes the store, equal to the one-process one
#   serve       `mpirun -n 3 hypic serve --mode pic` on that store: the answers equal one
#               process's on the one-process store, every segment a store hit
#   serve-owner the same with `--hit-reads owner`: each hit read by the worker on the node that
#               wrote its shard and sent to rank 0; the same answers
#   eval        `mpirun -n 3 hypic eval` (dataset fixture, pic mode) with that store: exit 0
#   kill        node 3's hypic processes killed (SIGKILL) mid-warm-up: the job fails with one
#               `hypic: error:` line naming rank 2, hypic-node3 and its segments; the store
#               verifies and keeps what was committed
#   read-only   node 3's shard read-only (a read-only bind mount on that node): the rerun
#               fails with one line naming the shard; the store still verifies, nothing lost
#   resume      a plain rerun completes the store, reusing what the killed run committed; it
#               equals the one-process store entry for entry
#   link-down   node 3's link taken down (ip link set veth down) mid-warm-up: a
#               `hypic: error:` line naming rank 2 on hypic-node3 within 20 s, the job ends
#               (or is ended) within 40 s; after the link is back a rerun completes the store
#               and it equals the one-process store
#
# What it touches: only what it creates (namespaces hc<id>n1..3, bridge hc<id>b, veth pairs
# hc<id>v1..3; addresses $HYPIC_CLUSTER_SUBNET.11-13/24 inside the namespaces; the bridge has no
# address, the namespaces no route elsewhere, so no packet leaves them); /etc/hosts is replaced
# only inside the nodes' own mount namespaces (with a private /tmp). On exit (trap) it stops
# its Slurm daemons and munged by PID, kills the processes left in its namespaces (all started
# by it), deletes the namespaces and the bridge. It never touches the machine's Slurm
# (scripts/slurm_up.sh's daemons listen in the root namespace; these listen in the nodes').
# Skips (exit 0, with the reason) when not root or when network namespaces are not permitted.
#
# Environment:
#   HYPIC_BIN             hypic binary [build/src/hypic]; a private copy is run
#   HYPIC_CLUSTER_SUBNET  first three octets of the private /24 [10.231.0]
#   HYPIC_TEST_WORK       work folder, the nodes' shared one [a new
#                         /var/tmp/hypic-cluster-test.XXXXXX, removed on success, kept on
#                         failure]; not under /tmp (each node has a private /tmp)
#   HYPIC_TEST_BUDGET     seconds for the whole script [300]
# Exit status: 0 when every check passed (or the test was skipped).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
T0=$(date +%s)
BUDGET=${HYPIC_TEST_BUDGET:-300}
HYPIC_BIN=${HYPIC_BIN:-$ROOT/build/src/hypic}
[[ "$HYPIC_BIN" == /* ]] || HYPIC_BIN=$ROOT/$HYPIC_BIN
SUBNET=${HYPIC_CLUSTER_SUBNET:-10.231.0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PATH=$PATH:/usr/sbin:/sbin

STEP_NAME=test_cluster STEP_MARGIN=10
# shellcheck source=scripts/lib/steps.sh
source scripts/lib/steps.sh  # log, result, left, step_limit, on_exit, finish_work, summary
skip() {
  log "SKIP: $*"
  exit 0
}

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, a bridge, veth pairs, bind mounts)"
for b in ip nsenter unshare mount mpirun orted h5dump timeout; do
  command -v "$b" >/dev/null 2>&1 || skip "'$b' not found"
done
if [[ ! -x "$HYPIC_BIN" ]]; then
  log "FAIL: HYPIC_BIN '$HYPIC_BIN' is not an executable (build with scripts/build.sh)"
  exit 1
fi
[[ "$SUBNET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] ||
  { log "FAIL: HYPIC_CLUSTER_SUBNET '$SUBNET' is not three octets like 10.231.0"; exit 1; }

ID=$(($$ % 100000))
BR=hc${ID}b
NODES=(hypic-node1 hypic-node2 hypic-node3)
NSS=("hc${ID}n1" "hc${ID}n2" "hc${ID}n3")
VETHS=("hc${ID}v1" "hc${ID}v2" "hc${ID}v3")
ADDRS=("$SUBNET.11" "$SUBNET.12" "$SUBNET.13")

# Not under /tmp: every node gets a private /tmp (as on a real cluster; Slurm's PMIx plugin
# needs it), which would hide the shared folder.
WORK=${HYPIC_TEST_WORK:-$(mktemp -d /var/tmp/hypic-cluster-test.XXXXXX)}
case $WORK in
  /tmp | /tmp/*)
    log "FAIL: HYPIC_TEST_WORK '$WORK' is under /tmp, which each node replaces by its own"
    exit 1
    ;;
esac
mkdir -p "$WORK/logs" "$WORK/bin"
RESULTS=()
FAILED=0
made_ns=()
made_br=0
slurm_pids=() # munged, and the on-node wrappers that became slurmctld and the slurmds
slurm_cleanup() {
  local p alive
  ((${#slurm_pids[@]})) || return 0
  for p in "${slurm_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    alive=0
    for p in "${slurm_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${slurm_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  slurm_pids=()
}

# Every process in our namespaces was started by this script: end them, then the namespaces.
kill_node_procs() { # kill_node_procs NS [SIGNAL-WAIT-SECONDS]
  local ns=$1 pids p
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [[ -n "${pids// /}" ]] || return 0
  # shellcheck disable=SC2086  # one argument per PID
  kill -TERM $pids 2>/dev/null
  for _ in $(seq 30); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -n "${pids// /}" ]] || return 0
    sleep 0.1
  done
  for p in $pids; do kill -KILL "$p" 2>/dev/null; done
  sleep 0.2
}
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$? ns
  slurm_cleanup
  for ns in "${made_ns[@]}"; do
    kill_node_procs "$ns"
    ip netns del "$ns" 2>/dev/null
  done
  ((made_br)) && ip link del "$BR" 2>/dev/null
  finish_work "$rc"
}
on_exit cleanup
show_log() { # the tail of a log, indented
  [[ -f "$1" ]] && tail -n "${2:-15}" "$1" | sed 's/^/    /'
}
now_ms() { date +%s%3N; }

# ------------------------------------------------------------------ the cluster
if ! out=$(ip netns add "${NSS[0]}" 2>&1); then
  skip "network namespaces are not permitted here: ip netns add: $out"
fi
made_ns+=("${NSS[0]}")
if ! out=$(ip link add "$BR" type bridge 2>&1); then
  skip "cannot create a bridge here: ip link add type bridge: $out"
fi
made_br=1
ip link set "$BR" up
HOSTS=$WORK/hosts
{
  echo "127.0.0.1 localhost"
  for i in 0 1 2; do echo "${ADDRS[$i]} ${NODES[$i]}"; done
} >"$HOSTS"
setup_ok=1
for i in 0 1 2; do
  ns=${NSS[$i]}
  if ((i > 0)); then
    ip netns add "$ns" || { setup_ok=0; break; }
    made_ns+=("$ns")
  fi
  {
    ip link add "${VETHS[$i]}" type veth peer name "${VETHS[$i]}p" &&
      ip link set "${VETHS[$i]}" master "$BR" && ip link set "${VETHS[$i]}" up &&
      ip link set "${VETHS[$i]}p" netns "$ns" &&
      ip -n "$ns" link set "${VETHS[$i]}p" name eth0 &&
      ip -n "$ns" addr add "${ADDRS[$i]}/24" dev eth0 &&
      ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
  } || { setup_ok=0; break; }
done
if ((setup_ok == 0)); then
  result cluster FAIL "could not set up the namespaces, veth pairs and bridge (messages above)"
  exit 1
fi

BIN=$WORK/bin
cp "$HYPIC_BIN" "$BIN/hypic" || { log "FAIL: cannot copy $HYPIC_BIN"; exit 1; }
[[ -f "$(dirname "$HYPIC_BIN")/libhypic_cuda.so" ]] && cp "$(dirname "$HYPIC_BIN")/libhypic_cuda.so" "$BIN/"
HYPIC=$BIN/hypic
# on-node NODE CMD...: CMD on NODE: its network namespace, its host name (a UTS namespace of
# its own), the cluster's hosts file over /etc/hosts (in a private mount namespace of its own;
# nsenter rather than `ip netns exec`, which mounts a new /sys and so hides /sys/fs/cgroup, which
# slurmd needs). HYPIC_CLUSTER_RO_NODE=NODE and HYPIC_CLUSTER_RO_PATH=FILE: FILE is
# read-only on that node (a read-only bind mount: root ignores file modes).
cat >"$BIN/on-node" <<EOF
#!/bin/sh
node=\$1
shift
case \$node in
  ${NODES[0]}) ns=${NSS[0]} ;;
  ${NODES[1]}) ns=${NSS[1]} ;;
  ${NODES[2]}) ns=${NSS[2]} ;;
  *) echo "on-node: no node '\$node'" >&2; exit 2 ;;
esac
exec nsenter --net=/run/netns/"\$ns" unshare --mount --propagation private --uts -- sh -c '
  mount --bind "$HOSTS" /etc/hosts || exit 1
  mkdir -p "$WORK/nodes/\$0/tmp" && mount --bind "$WORK/nodes/\$0/tmp" /tmp || exit 1
  if [ "\${HYPIC_CLUSTER_RO_NODE:-}" = "\$0" ] && [ -n "\${HYPIC_CLUSTER_RO_PATH:-}" ]; then
    mount --bind "\$HYPIC_CLUSTER_RO_PATH" "\$HYPIC_CLUSTER_RO_PATH" &&
      mount -o remount,bind,ro "\$HYPIC_CLUSTER_RO_PATH" || exit 1
  fi
  hostname "\$0" && exec "\$@"' "\$node" "\$@"
EOF
# mpirun's launch agent, called like ssh: agent [OPTIONS] HOST COMMAND-LINE...
cat >"$BIN/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
node=\$1
shift
exec "$BIN/on-node" "\$node" sh -c "\$*"
EOF
chmod +x "$BIN/on-node" "$BIN/agent"
HOSTFILE=$WORK/hostfile
printf '%s slots=1\n' "${NODES[@]}" >"$HOSTFILE"

# cluster_run LIMIT LOG CMD...: `mpirun -n 3` (one rank per node, rank 0 on node 1) from node 1,
# TCP between the nodes' addresses only; mpirun's daemon links time out after 4 s of silence
# (hypic's lifelines after 7 s: mpirun ends the job, and hypic's SIGTERM handler names the
# worker whose lifeline has gone silent); sets RC (124: ran past LIMIT).
cluster_run() {
  local limit=$1 logf=$2
  shift 2
  local envs=()
  [[ -n "${HYPIC_DEBUG_WORKER_DELAY_MS:-}" ]] && envs+=(-x HYPIC_DEBUG_WORKER_DELAY_MS)
  timeout -k 3 "$limit" "$BIN/on-node" "${NODES[0]}" mpirun --hostfile "$HOSTFILE" -n 3 \
    --mca plm_rsh_agent "$BIN/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET.0/24" \
    --mca oob_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_keepalive_time 1 \
    --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 "${envs[@]}" "$@" >"$logf" 2>&1
  RC=$?
  return "$RC"
}

log "hypic: $HYPIC_BIN; work: $WORK; budget ${BUDGET}s; nodes ${NODES[*]} on $SUBNET.0/24 (bridge $BR)"
# shellcheck disable=SC2016  # expanded on each node
cluster_run "$(step_limit 30)" "$WORK/logs/launch.log" \
  sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname) $(ip -4 -o addr show dev eth0 | awk "{print \$4}")"'
seen=$(grep -c '^rank [0-2] on hypic-node[1-3] ' "$WORK/logs/launch.log")
distinct=$(grep '^rank ' "$WORK/logs/launch.log" | awk '{print $4, $5}' | sort -u | wc -l)
if ((RC == 0 && seen == 3 && distinct == 3)); then
  result cluster PASS "$(grep '^rank ' "$WORK/logs/launch.log" | sort | awk '{printf "%s%s %s %s", (NR > 1 ? "; " : ""), $2, $4, $5}')"
else
  result cluster FAIL "mpirun across the nodes: exit $RC, $seen of 3 ranks answered, $distinct distinct nodes"
  show_log "$WORK/logs/launch.log"
  exit 1
fi

# ------------------------------------------------------------------ inputs
MODEL=$WORK/model
if ! "$HYPIC" model init --arch qwen3_5 --preset tiny --seed 1 --out "$MODEL" >"$WORK/logs/model-init.log" 2>&1; then
  result inputs FAIL "hypic model init failed: $(tail -n1 "$WORK/logs/model-init.log")"
  exit 1
fi
CORPUS=$WORK/corpus.jsonl
# 24 documents of 12..104 token ids in [1, 300) (the tiny preset's vocabulary is 512)
awk 'BEGIN {
  for (d = 0; d < 24; d++) {
    n = 12 + 4 * d; s = "";
    for (j = 0; j < n; j++) s = s (j ? "," : "") (1 + (d * 37 + j * 11 + j * j) % 299);
    printf "{\"id\": \"doc%d\", \"tokens\": [%s]}\n", d, s;
  }
}' >"$CORPUS"
QUERIES=$WORK/queries.jsonl
cat >"$QUERIES" <<'EOF'
{"id": "q0", "segments": ["doc0", "doc3", "doc5"], "question_tokens": [11, 12, 13, 14], "max_new_tokens": 4}
{"id": "q1", "segments": ["doc15", "doc0", "doc22"], "question_tokens": [21, 22, 23], "max_new_tokens": 4}
{"id": "q2", "segments": ["doc7", "doc1", "doc20", "doc6"], "question_tokens": [31, 32], "max_new_tokens": 4}
EOF
n_docs=$(awk 'END {print NR}' "$CORPUS")
n_queries=$(awk 'END {print NR}' "$QUERIES")
WARM=(warmup --model "$MODEL" --corpus "$CORPUS" --threads 1)

# store_rows STORE OUT: merges the logical store into one file (store merge verifies it) and
# writes one line per entry, "key n_tokens payload_count array_count checksum", sorted, then
# the model, dtype, junction and counts `inspect` prints.
store_rows() {
  local s=$1 out=$2 one=$2.h5
  rm -f "$one"
  "$HYPIC" store merge --out "$one" "$s" >"$out.merge.log" 2>&1 || { echo "store merge failed: $(tail -n1 "$out.merge.log")" >"$out"; return 1; }
  h5dump -d /entries "$one" 2>/dev/null | awk '
    /^ *\([0-9]+\): \{/ { n = 0; next }
    n < 7 && /^ *"?[0-9a-f-]+"?,?$/ { v = $1; gsub(/[",]/, "", v); f[n++] = v;
                                     if (n == 7) print f[0], f[1], f[3], f[5], f[6] }
  ' | sort >"$out"
  "$HYPIC" inspect --store "$one" | grep -E '^(model|dtype|junction|entries|tokens|arrays) ' >>"$out"
}
# same_store A B: sets SAME_DETAIL; status 0 when the two logical stores hold the same entries
same_store() {
  if ! store_rows "$1" "$WORK/logs/rows-a" || ! store_rows "$2" "$WORK/logs/rows-b"; then
    SAME_DETAIL="$(cat "$WORK/logs/rows-a" "$WORK/logs/rows-b" 2>/dev/null | grep -m1 failed)"
    return 1
  fi
  local na nb
  na=$(grep -c '^[0-9a-f]\{32\} ' "$WORK/logs/rows-a")
  nb=$(grep -c '^[0-9a-f]\{32\} ' "$WORK/logs/rows-b")
  if cmp -s "$WORK/logs/rows-a" "$WORK/logs/rows-b" && ((na > 0)); then
    SAME_DETAIL="$na entries equal (key, tokens, values, arrays, checksum)"
    return 0
  fi
  SAME_DETAIL="stores differ ($na vs $nb entries): $(diff "$WORK/logs/rows-a" "$WORK/logs/rows-b" | grep '^[<>]' | head -n 2 | tr '\n' ' ')"
  return 1
}
verify_store() { # verify_store STORE: status 0 when inspect --verify passes; sets VERIFY_LINE
  local out rc=0
  out=$("$HYPIC" inspect --store "$1" --verify 2>&1) || rc=$?
  VERIFY_LINE=$(echo "$out" | grep '^verify' || echo "no verify line: $(echo "$out" | tail -n1)")
  ((rc == 0)) && echo "$out" | grep -q ' 0 damaged'
}
entries_of() { "$HYPIC" inspect --store "$1" 2>/dev/null | awk '$1 == "entries" {print $2}'; }
# error_lines LOG: the `hypic: error:` lines of a job log
error_lines() { grep -h '^hypic: error:' "$1" 2>/dev/null; }

# ------------------------------------------------------------------ reference: one process
REF=$WORK/ref/store.h5
mkdir -p "$WORK/ref" "$WORK/shared"
if ! timeout 60 "$HYPIC" "${WARM[@]}" --store "$REF" >"$WORK/logs/ref.log" 2>&1 || [[ "$(entries_of "$REF")" != "$n_docs" ]]; then
  result reference FAIL "one-process warm-up: $(tail -n1 "$WORK/logs/ref.log")"
  exit 1
fi
log "reference: one-process warm-up of $n_docs documents into $REF"

# ------------------------------------------------------------------ warm-up across the nodes
STORE=$WORK/shared/store.h5
t=$(now_ms)
cluster_run "$(step_limit 60)" "$WORK/logs/warmup.log" "$HYPIC" "${WARM[@]}" --store "$STORE"
warm_ms=$(($(now_ms) - t))
shards=$(tr -d '\n' <"$STORE.shards.json" 2>/dev/null | grep -o '"shards": *\[[^]]*\]' | grep -o 'rank[0-9]*' | tr '\n' ' ')
if ((RC != 0)); then
  result warmup FAIL "mpirun exit $RC"
  show_log "$WORK/logs/warmup.log"
elif ! verify_store "$STORE"; then
  result warmup FAIL "exit 0, but inspect --verify: $VERIFY_LINE"
elif [[ "$shards" != "rank1 rank2 " ]]; then
  result warmup FAIL "exit 0, but the manifest names shards '${shards}' (expected rank1 rank2)"
elif ! same_store "$REF" "$STORE"; then
  result warmup FAIL "against the one-process store: $SAME_DETAIL"
else
  result warmup PASS "3 nodes, ${warm_ms} ms; shards ${shards}written by hypic-node2/3; $VERIFY_LINE; vs one process: $SAME_DETAIL"
fi

# ------------------------------------------------------------------ Slurm on the three nodes
# munged (root namespace, its own socket and key), slurmctld on node 1 and one slurmd per node,
# each in its namespace (ports 6817/6818 inside the namespaces: the machine's own Slurm, if
# any, listens in the root namespace and is not touched), all files under $WORK/slurm.
SL=$WORK/slurm
slurm_check() {
  local b
  for b in munged slurmctld slurmd srun sinfo; do
    command -v "$b" >/dev/null 2>&1 || {
      RESULTS+=("$(printf '%-4s %-10s %s' SKIP slurm "'$b' not found (scripts/slurm_up.sh installs Slurm)")")
      return
    }
  done
  mkdir -p "$SL"/{munge,ctld,log,run,spool}
  chmod 0700 "$SL/munge"
  mungekey --create --keyfile="$SL/munge/munge.key" >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$SL/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$SL/munge/munge.key"
  munged --foreground --force --socket="$SL/munge/munge.socket" --key-file="$SL/munge/munge.key" \
    --pid-file="$SL/run/munged.pid" --log-file="$SL/log/munged.log" \
    --seed-file="$SL/munge/munged.seed" </dev/null >"$SL/log/munged.out" 2>&1 &
  slurm_pids+=($!)
  disown $!
  for _ in $(seq 50); do [[ -S "$SL/munge/munge.socket" ]] && break; sleep 0.1; done
  {
    echo "# Written by scripts/test_cluster.sh: three nodes in network namespaces on one machine."
    echo "ClusterName=hypiccluster"
    echo "SlurmctldHost=${NODES[0]}(${ADDRS[0]})"
    echo "SlurmctldPort=6817"
    echo "SlurmdPort=6818"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$SL/munge/munge.socket"
    echo "StateSaveLocation=$SL/ctld"
    echo "SlurmdSpoolDir=$SL/spool/%n"
    echo "SlurmctldPidFile=$SL/run/slurmctld.pid"
    echo "SlurmdPidFile=$SL/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$SL/log/slurmctld.log"
    echo "SlurmdLogFile=$SL/log/slurmd-%n.log"
    echo "PlugStackConfig=$SL/plugstack.conf"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=pmix"
    echo "ReturnToService=2"
    echo "SlurmdParameters=config_overrides"
    echo "KillWait=5"
    echo "InactiveLimit=0"
    local i
    for i in 0 1 2; do
      echo "NodeName=${NODES[$i]} NodeAddr=${ADDRS[$i]} CPUs=1 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=cluster Nodes=${NODES[0]},${NODES[1]},${NODES[2]} Default=YES MaxTime=10 State=UP"
  } >"$SL/slurm.conf"
  : >"$SL/plugstack.conf"
  export SLURM_CONF=$SL/slurm.conf
  "$BIN/on-node" "${NODES[0]}" slurmctld -D -c -f "$SLURM_CONF" </dev/null >"$SL/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  disown $!
  for i in 0 1 2; do
    "$BIN/on-node" "${NODES[$i]}" slurmd -D -f "$SLURM_CONF" -N "${NODES[$i]}" </dev/null >"$SL/log/slurmd-$i.out" 2>&1 &
    slurm_pids+=($!)
    disown $!
  done
  local idle="" end=$(($(date +%s) + $(step_limit 40)))
  while (($(date +%s) < end)); do
    idle=$(timeout 5 "$BIN/on-node" "${NODES[0]}" sinfo -h -t idle -o '%D' 2>/dev/null | head -n1)
    [[ "$idle" == 3 ]] && break
    sleep 0.5
  done
  if [[ "$idle" != 3 ]]; then
    result slurm FAIL "slurmctld and 3 slurmd: ${idle:-0} of 3 nodes idle after 40 s; logs in $SL/log"
    tail -n 5 "$SL"/log/*.log 2>/dev/null | sed 's/^/    /'
    unset SLURM_CONF
    slurm_cleanup
    return
  fi
  local sstore=$WORK/shared/slurm.h5 t rc ms
  # slurm_run LIMIT LOG STORE: srun -N 3 -n 3 --mpi=pmix hypic warmup, TCP between the nodes
  slurm_run() {
    OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$SUBNET.0/24 OMPI_MCA_oob_tcp_if_include=$SUBNET.0/24 \
      timeout -k 3 "$1" "$BIN/on-node" "${NODES[0]}" srun -N 3 -n 3 --mpi=pmix \
      --kill-on-bad-exit=1 --time=2 "$HYPIC" "${WARM[@]}" --store "$3" >"$2" 2>&1
  }
  t=$(now_ms)
  slurm_run "$(step_limit 60)" "$WORK/logs/slurm.log" "$sstore"
  rc=$?
  ms=$(($(now_ms) - t))
  if ((rc == 0)) && same_store "$REF" "$sstore"; then
    result slurm PASS "slurmctld + 3 slurmd in the namespaces; srun -N 3 -n 3 --mpi=pmix hypic warmup: exit 0, ${ms} ms; vs one process: $SAME_DETAIL"
  else
    result slurm FAIL "srun -N 3 -n 3 --mpi=pmix hypic warmup: exit $rc; ${SAME_DETAIL:-}"
    show_log "$WORK/logs/slurm.log"
  fi
  # node 3's hypic killed mid-warm-up under srun: one line naming it; a rerun completes
  local kstore=$WORK/shared/slurm-kill.h5 job killed="" errs n_errs
  HYPIC_DEBUG_WORKER_DELAY_MS=150 slurm_run "$(step_limit 60)" "$WORK/logs/slurm-kill.log" "$kstore" &
  job=$!
  if wait_progress "$WORK/logs/slurm-kill.log" 6 "$(step_limit 30)"; then
    killed=$(hypic_pids "${NSS[2]}" | tr '\n' ' ')
    # shellcheck disable=SC2086  # one argument per PID
    [[ -n "$killed" ]] && kill -KILL $killed
  fi
  wait "$job"
  rc=$?
  errs=$(error_lines "$WORK/logs/slurm-kill.log")
  n_errs=$(echo -n "$errs" | grep -c .)
  if [[ -z "$killed" ]] || ((rc == 0 || rc == 124 || n_errs != 1)) ||
    ! grep -q 'worker rank 2 (pid [0-9]* on hypic-node3) died while computing segment [0-9]' <<<"$errs"; then
    result slurm-kill FAIL "killed '${killed}'; srun exit $rc; $n_errs error line(s): $errs"
    show_log "$WORK/logs/slurm-kill.log"
  else
    slurm_run "$(step_limit 60)" "$WORK/logs/slurm-kill-rerun.log" "$kstore"
    rc=$?
    if ((rc == 0)) && same_store "$REF" "$kstore"; then
      result slurm-kill PASS "srun failed, one line: $(cut -c1-160 <<<"${errs#hypic: error: }")...; rerun under srun: $SAME_DETAIL"
    else
      result slurm-kill FAIL "the rerun under srun: exit $rc; ${SAME_DETAIL:-}"
      show_log "$WORK/logs/slurm-kill-rerun.log"
    fi
  fi
  unset SLURM_CONF
  slurm_cleanup
}

# ------------------------------------------------------------------ serve and eval on it
answers() { # answers PREDICTIONS: "id answer-tokens" per query, sorted
  awk '{
    id = $0; sub(/.*"id": *"/, "", id); sub(/".*/, "", id);
    a = $0; if (sub(/.*"answer_tokens": *\[/, "", a)) sub(/\].*/, "", a); else a = "?";
    print id, a
  }' "$1" 2>/dev/null | sort
}
SERVE=(serve --model "$MODEL" --corpus "$CORPUS" --queries "$QUERIES" --mode pic --threads 1)
timeout 60 "$HYPIC" "${SERVE[@]}" --store "$REF" --out "$WORK/serve-ref" >"$WORK/logs/serve-ref.log" 2>&1
cluster_run "$(step_limit 60)" "$WORK/logs/serve.log" "$HYPIC" "${SERVE[@]}" --store "$STORE" --out "$WORK/serve"
ref_answers=$(answers "$WORK/serve-ref/predictions.jsonl")
got_answers=$(answers "$WORK/serve/predictions.jsonl")
n_got=$(echo "$got_answers" | grep -c .)
n_warm=$(grep -c '"cold": *0[,}]' "$WORK/serve/predictions.jsonl" 2>/dev/null)
if ((RC == 0)) && [[ "$n_got" == "$n_queries" && "$got_answers" == "$ref_answers" && "$n_warm" == "$n_queries" ]] &&
  ! grep -q ' ?$' <<<"$got_answers"; then
  result serve PASS "mpirun -n 3 serve --mode pic: $n_got answers equal one process's on its store; no cold segment in any query"
else
  result serve FAIL "exit $RC; $n_got of $n_queries answers; equal to one process's: $([[ "$got_answers" == "$ref_answers" ]] && echo yes || echo no); queries without cold segments: ${n_warm:-0}"
  show_log "$WORK/logs/serve.log"
fi
# The same queries with every hit read on the node whose worker wrote its shard and sent to
# rank 0 over the bridge (serve --hit-reads owner; docs/cluster.md, "Hits read where they live").
cluster_run "$(step_limit 60)" "$WORK/logs/serve-owner.log" "$HYPIC" "${SERVE[@]}" --store "$STORE" \
  --hit-reads owner --out "$WORK/serve-owner"
owner_answers=$(answers "$WORK/serve-owner/predictions.jsonl")
owner_by_workers=$(grep -o '"hits_read_by_workers": *[0-9]*' "$WORK/serve-owner/metrics.json" \
  2>/dev/null | grep -o '[0-9]*$')
if ((RC == 0)) && [[ "$owner_answers" == "$ref_answers" ]] && ((${owner_by_workers:-0} > 0)); then
  result serve-owner PASS "mpirun -n 3 serve --hit-reads owner: answers equal one process's; $owner_by_workers hits read on their shard's node"
else
  result serve-owner FAIL "exit $RC; equal: $([[ "$owner_answers" == "$ref_answers" ]] && echo yes || echo no); hits read by workers: ${owner_by_workers:-0}"
  show_log "$WORK/logs/serve-owner.log"
fi
EVAL_OUT=$WORK/eval
# The dataset and the prompt templates as copies in the work folder: the nodes see a private
# /tmp, so a checkout under /tmp (a CI clone) is not there for them, nor is a path relative to it.
mkdir -p "$WORK/data"
cp "$ROOT/tests/data/datasets/hotpotqa.jsonl" "$ROOT/inputs/datasets/templates.json" "$WORK/data/"
cluster_run "$(step_limit 90)" "$WORK/logs/eval.log" "$HYPIC" eval --model "$MODEL" --byte-tokenizer \
  --dataset hotpotqa --input "$WORK/data/hotpotqa.jsonl" --templates "$WORK/data/templates.json" \
  --limit 2 --max-new-tokens 2 --modes pic --store "$STORE" --out "$EVAL_OUT" --threads 1
if ((RC == 0)) && [[ -f "$EVAL_OUT/summary.json" ]] && verify_store "$STORE"; then
  result eval PASS "mpirun -n 3 eval (hotpotqa fixture, 2 examples, pic) with the cluster's store: exit 0, summary.json; store after: $VERIFY_LINE"
else
  result eval FAIL "exit $RC; summary.json $([[ -f "$EVAL_OUT/summary.json" ]] && echo present || echo missing); store: ${VERIFY_LINE:-?}"
  show_log "$WORK/logs/eval.log"
fi

# ------------------------------------------------------------------ faults
# wait_progress LOG N LIMIT: waits (bounded) until the warm-up's log shows N entries stored
wait_progress() {
  local logf=$1 want=$2 end=$(($(date +%s) + $3)) got
  while (($(date +%s) < end)); do
    got=$(grep -oE '^warmup: [0-9]+/' "$logf" 2>/dev/null | tail -n1 | grep -oE '[0-9]+')
    [[ -n "$got" ]] && ((got >= want)) && return 0
    sleep 0.1
  done
  return 1
}
# hypic_pids NS: the PIDs in NS whose program is our hypic copy
hypic_pids() {
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do
    [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == "$HYPIC" ]] && echo "$p"
  done
}

# (a) node 3's hypic processes killed mid-warm-up
FSTORE=$WORK/shared/fault.h5
export HYPIC_DEBUG_WORKER_DELAY_MS=150
cluster_run "$(step_limit 60)" "$WORK/logs/kill.log" "$HYPIC" "${WARM[@]}" --store "$FSTORE" &
job=$!
killed=""
if wait_progress "$WORK/logs/kill.log" 6 "$(step_limit 30)"; then
  killed=$(hypic_pids "${NSS[2]}" | tr '\n' ' ')
  # shellcheck disable=SC2086  # one argument per PID
  [[ -n "$killed" ]] && kill -KILL $killed
fi
wait "$job"
kill_rc=$?
unset HYPIC_DEBUG_WORKER_DELAY_MS
errs=$(error_lines "$WORK/logs/kill.log")
n_errs=$(echo -n "$errs" | grep -c .)
after_kill=$(entries_of "$FSTORE")
if [[ -z "$killed" ]]; then
  result kill FAIL "the warm-up never reached 6 entries, or node 3 ran no hypic process"
  show_log "$WORK/logs/kill.log"
elif ((kill_rc == 0 || kill_rc == 124)); then
  result kill FAIL "mpirun exit $kill_rc after node 3's processes ($killed) were killed (expected a failed job, not $([[ $kill_rc == 0 ]] && echo success || echo 'a hang'))"
  show_log "$WORK/logs/kill.log"
elif ((n_errs != 1)) || ! grep -q 'worker rank 2 (pid [0-9]* on hypic-node3) died while computing segment [0-9]' <<<"$errs"; then
  result kill FAIL "exit $kill_rc; expected one 'hypic: error:' line naming rank 2 on hypic-node3 and its segment, got $n_errs: $errs"
  show_log "$WORK/logs/kill.log"
elif ! verify_store "$FSTORE"; then
  result kill FAIL "the store after the kill does not verify: $VERIFY_LINE"
else
  result kill PASS "mpirun exit $kill_rc; $after_kill of $n_docs entries kept and verified; the line: ${errs#hypic: error: }"
fi

# (c) node 3's shard read-only: the rerun fails naming it, nothing is lost
SHARD3=$FSTORE.rank2.h5
if [[ -f "$SHARD3" ]]; then
  export HYPIC_CLUSTER_RO_NODE=${NODES[2]} HYPIC_CLUSTER_RO_PATH=$SHARD3
  cluster_run "$(step_limit 40)" "$WORK/logs/readonly.log" "$HYPIC" "${WARM[@]}" --store "$FSTORE"
  unset HYPIC_CLUSTER_RO_NODE HYPIC_CLUSTER_RO_PATH
  errs=$(error_lines "$WORK/logs/readonly.log")
  n_errs=$(echo -n "$errs" | grep -c .)
  after_ro=$(entries_of "$FSTORE")
  if ((RC == 0 || RC == 124)); then
    result read-only FAIL "mpirun exit $RC with node 3's shard read-only (expected a clear failure)"
    show_log "$WORK/logs/readonly.log"
  elif ((n_errs < 1)) || ! grep -q "rank2.h5" <<<"$errs"; then
    result read-only FAIL "exit $RC; no 'hypic: error:' line naming the shard: $errs"
    show_log "$WORK/logs/readonly.log"
  elif ! verify_store "$FSTORE" || ((after_ro < after_kill)); then
    result read-only FAIL "the store afterwards: $VERIFY_LINE, $after_ro entries (before: $after_kill)"
  else
    result read-only PASS "mpirun exit $RC; $n_errs error line(s): $(head -n1 <<<"${errs#hypic: error: }"); store verifies, $after_ro entries (before: $after_kill)"
  fi
else
  result read-only FAIL "no shard $SHARD3 after the killed run"
fi

# resume: a plain rerun completes the store
cluster_run "$(step_limit 60)" "$WORK/logs/resume.log" "$HYPIC" "${WARM[@]}" --store "$FSTORE"
already=$(grep -oE '[0-9]+ already in the store' "$WORK/logs/resume.log" | grep -oE '^[0-9]+')
if ((RC != 0)); then
  result resume FAIL "rerun exit $RC"
  show_log "$WORK/logs/resume.log"
elif ! same_store "$REF" "$FSTORE"; then
  result resume FAIL "rerun exit 0, but against the one-process store: $SAME_DETAIL"
elif [[ -z "$already" ]] || ((already < after_kill)); then
  result resume FAIL "rerun exit 0, but it reused ${already:-?} entries (the killed run left $after_kill)"
else
  result resume PASS "rerun exit 0: $already entries kept from the killed run, the rest computed; vs one process: $SAME_DETAIL"
fi

# (b) node 3's link down mid-warm-up
LSTORE=$WORK/shared/link.h5
export HYPIC_DEBUG_WORKER_DELAY_MS=150
cluster_run "$(step_limit 60)" "$WORK/logs/link.log" "$HYPIC" "${WARM[@]}" --store "$LSTORE" &
job=$!
down=0
if wait_progress "$WORK/logs/link.log" 6 "$(step_limit 30)"; then
  ip link set "${VETHS[2]}" down && down=1
  t_down=$(now_ms)
fi
err_s=""
if ((down)); then
  for _ in $(seq 200); do # 20 s
    if error_lines "$WORK/logs/link.log" >/dev/null; then
      err_s=$(awk -v a="$(now_ms)" -v b="$t_down" 'BEGIN {printf "%.1f", (a - b) / 1000}')
      break
    fi
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
fi
# The job must end: mpirun may wait for node 3's daemon, which it can no longer reach.
ended_by=""
for _ in $(seq 200); do # 20 s more
  kill -0 "$job" 2>/dev/null || { ended_by=itself; break; }
  sleep 0.1
done
if [[ -z "$ended_by" ]]; then
  kill_node_procs "${NSS[0]}"
  ended_by="the script (mpirun still waited for hypic-node3's daemon)"
fi
wait "$job"
link_rc=$?
end_s=$(awk -v a="$(now_ms)" -v b="${t_down:-0}" 'BEGIN {printf "%.1f", (a - b) / 1000}')
unset HYPIC_DEBUG_WORKER_DELAY_MS
ip link set "${VETHS[2]}" up
kill_node_procs "${NSS[2]}" # what was left on node 3 (its daemon and its worker)
# While the link was down the nodes' neighbour entries for each other failed; a connect that
# meets a failed entry gets "no route to host" at once, and node 3's daemon of the rerun then
# never reached mpirun (which waited for it until the step's limit). Forget them.
for ns in "${NSS[@]}"; do ip -n "$ns" neigh flush all 2>/dev/null; done
sleep 1
errs=$(error_lines "$WORK/logs/link.log")
if ((down == 0)); then
  result link-down FAIL "the warm-up never reached 6 entries"
  show_log "$WORK/logs/link.log"
elif [[ -z "$err_s" ]] || ! grep -q 'worker rank 2 (pid [0-9]* on hypic-node3)' <<<"$errs"; then
  result link-down FAIL "no 'hypic: error:' line naming rank 2 on hypic-node3 within 20 s of the link going down (mpirun exit $link_rc): $errs"
  show_log "$WORK/logs/link.log"
else
  cluster_run "$(step_limit 60)" "$WORK/logs/link-resume.log" "$HYPIC" "${WARM[@]}" --store "$LSTORE"
  if ((RC == 0)) && same_store "$REF" "$LSTORE"; then
    result link-down PASS "error after ${err_s} s, job ended after ${end_s} s (by $ended_by, exit $link_rc); rerun with the link up: $SAME_DETAIL; the line: $(head -n1 <<<"${errs#hypic: error: }")"
  else
    result link-down FAIL "error after ${err_s} s, but the rerun with the link up: exit $RC, ${SAME_DETAIL:-}"
    show_log "$WORK/logs/link-resume.log"
  fi
fi

slurm_check

# ------------------------------------------------------------------ summary
summary
