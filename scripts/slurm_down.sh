#!/usr/bin/env bash
# Stops the single-node Slurm test cluster that scripts/slurm_up.sh started:
# exactly the munged, slurmctld and slurmd PIDs recorded in $HYPIC_SLURM_DIR/pids
# (each checked to still be that program), then removes the state folder and the
# /etc/slurm/slurm.conf link if slurm_up.sh made it. Never kills by name.
# Takes: seconds (at most 10 s per daemon before SIGKILL).
#
# Environment:
#   HYPIC_SLURM_DIR    state folder (default /tmp/hypic-slurm)
#   HYPIC_SLURM_KEEP   1: keep the state folder (logs) after stopping (default 0)
set -uo pipefail

STATE=${HYPIC_SLURM_DIR:-/tmp/hypic-slurm}
PIDS=$STATE/pids
KEEP=${HYPIC_SLURM_KEEP:-0}

say() { echo "slurm_down: $*"; }

if [[ ! -f $PIDS ]]; then
  say "nothing recorded in $PIDS; nothing to stop"
  [[ -d $STATE && "$KEEP" != 1 ]] && rm -rf "$STATE"
  exit 0
fi

is_it() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null && [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]]; }

# slurmd first (it ends running job steps), then slurmctld, then munged.
order=(slurmd slurmctld munged)
for name in "${order[@]}"; do
  pid=$(awk -v n="$name" '$1 == n {print $2}' "$PIDS")
  if ! is_it "$pid" "$name"; then
    say "$name (PID ${pid:-?}) is not running"
    continue
  fi
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do is_it "$pid" "$name" || break; sleep 0.1; done
  if is_it "$pid" "$name"; then
    say "$name (PID $pid) ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null
    sleep 0.2
  fi
  say "stopped $name (PID $pid)"
done

if [[ -f $STATE/etc_link ]]; then
  link=$(cat "$STATE/etc_link")
  [[ -L $link ]] && rm -f "$link" && say "removed $link"
fi
if [[ "$KEEP" == 1 ]]; then
  rm -f "$PIDS"
  say "kept $STATE (logs in $STATE/log)"
else
  rm -rf "$STATE"
  say "removed $STATE"
fi
