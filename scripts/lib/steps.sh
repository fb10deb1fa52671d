# shellcheck shell=bash
# Sourced by the test scripts that run bounded steps and print a table of results at the end
# (scripts/test_slurm.sh, scripts/test_cluster.sh); not a command of its own.
# Takes: no time of its own (functions only).
# The sourcing script sets, before calling these:
#   STEP_NAME    the prefix of its lines ("test_slurm")
#   T0, BUDGET   its start (date +%s) and its time bound in seconds
#   STEP_MARGIN  seconds step_limit keeps back for the clean-up [15]
#   RESULTS=()   the table; FAILED=0 (set to 1 by a failed result)
#   WORK         its work folder (finish_work removes it)

# log MESSAGE...: one line, prefixed with the script's name.
log() { echo "$STEP_NAME: $*"; }

# result NAME PASS|FAIL DETAIL: one row of the table, printed as it is added; anything but PASS
# fails the script.
result() {
  local line
  line=$(printf '%-4s %-10s %s' "$2" "$1" "$3")
  RESULTS+=("$line")
  echo "$STEP_NAME: $line"
  [[ "$2" == PASS ]] || FAILED=1
}
# left: seconds of the budget left.
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# step_limit MAX: seconds a step may take, at most MAX and what the budget leaves after the
# margin (10 s at the least).
step_limit() {
  local l m=${STEP_MARGIN:-15}
  l=$(left)
  ((l - m < $1)) && echo $((l > m + 10 ? l - m : 10)) || echo "$1"
}

# on_exit CLEANUP: runs the function CLEANUP on exit; an interrupt (INT, TERM) counts as a
# failure and exits 130. CLEANUP does the script's own clean-up (daemons, namespaces) and ends
# with finish_work.
on_exit() {
  # shellcheck disable=SC2064  # the function's name, fixed now
  trap "$1" EXIT
  trap 'log "interrupted"; FAILED=1; exit 130' INT TERM
}
# finish_work RC: the common end of the clean-up: WORK removed when every check passed and the
# script made it (HYPIC_TEST_WORK unset), else kept and named; then exit with RC.
finish_work() {
  if ((FAILED == 0)) && [[ -z "${HYPIC_TEST_WORK:-}" ]]; then
    rm -rf "$WORK"
  else
    log "work folder kept: $WORK"
  fi
  exit "$1"
}
# summary: the table with the time taken, then exit 1 if any check failed, else 0.
summary() {
  local r
  echo
  log "summary ($(($(date +%s) - T0)) s):"
  for r in "${RESULTS[@]}"; do echo "  $r"; done
  if ((FAILED)); then
    log "FAIL"
    exit 1
  fi
  log "PASS"
  exit 0
}
