#!/usr/bin/env bash
# Runs the unit-test binary as one gtest shard per core, in parallel, instead of ctest's one
# process per test: every process pays about a second to start (the runtime-settings re-exec,
# MPI's singleton start, and under ASan the leak check at exit), which for 540 tests was more
# than half of the suite's time (docs/testing.md, "CI"). Used by scripts/test.sh and
# scripts/ci/sanitize.sh; ctest still runs each test alone (`ctest --test-dir build -L unit`).
# Takes: the unit tests' own time over the cores (about 4 minutes on 2 cores, Release).
#
#   bash scripts/ci/unit_shards.sh BUILD_DIR LABEL [SHARDS]
#
# Prints one line per shard (its gtest summary, or its failures with their messages; the whole
# output stays in BUILD_DIR/unit-shards/), then the 8 slowest tests. Exits 1 when a shard fails.
set -uo pipefail
BUILD_DIR=$(cd "$1" && pwd)
LABEL=$2
shards=${3:-$(nproc)}
SHARD_DIR="$BUILD_DIR/unit-shards"
rm -rf "$SHARD_DIR"
mkdir -p "$SHARD_DIR"
pids=()
for ((i = 0; i < shards; i++)); do
  (cd "$BUILD_DIR/tests" && GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i \
    timeout 3600 ./hypic_unit_tests --gtest_brief=1 --gtest_output="xml:$SHARD_DIR/$i.xml" \
    >"$SHARD_DIR/$i.out" 2>&1) &
  pids+=($!)
done
status=0
for ((i = 0; i < shards; i++)); do
  if wait "${pids[$i]}"; then
    echo "$LABEL: unit tests, shard $((i + 1)) of $shards:" \
      "$(grep -E '^\[  PASSED  \]' "$SHARD_DIR/$i.out" | tail -1)"
  else
    status=1
    echo "$LABEL: unit tests, shard $((i + 1)) of $shards FAILED:"
    # The failures with their messages (a CLI test's message holds the child's stderr), without
    # the tests' own "[ tag ] ..." lines.
    grep -vE '^\[ [a-z]' "$SHARD_DIR/$i.out" | head -200
    echo "$LABEL: (whole output: $SHARD_DIR/$i.out)"
  fi
done
# Where the shards' time went (gtest's XML reports), for whoever trims the suite next.
echo "$LABEL: the 8 slowest unit tests:"
cat "$SHARD_DIR"/*.xml 2>/dev/null |
  sed -n 's/.*<testcase name="\([^"]*\)".* time="\([0-9.]*\)".* classname="\([^"]*\)".*/\2 \3.\1/p' |
  sort -rn | head -8 | sed 's/^/  /'
exit $status
