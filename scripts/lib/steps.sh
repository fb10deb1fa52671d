# Sourced by the test scripts that run bounded steps and print a table of results at the end
# (scripts/test_slurm.sh, scripts/test_cluster.sh); not a command of its own.
# Takes: no time of its own (functions only).
# The sourcing script sets, before calling these:
#   STEP_NAME    the prefix of its result lines ("test_slurm")
#   T0, BUDGET   its start (date +%s) and its time bound in seconds
#   STEP_MARGIN  seconds step_limit keeps back for the clean-up [15]
#   RESULTS=()   the table; FAILED=0 (set to 1 by a failed result)

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
