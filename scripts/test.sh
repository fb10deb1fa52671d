#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs the whole test suite: the unit and CLI
# tests (as one gtest shard per core), the MPI tests at 1-3 ranks and the README's commands
# under ctest, and then the Slurm job scripts on a
# single-node test cluster (scripts/test_slurm.sh; HYPIC_SKIP_SLURM=1 leaves them out and
# says so) and the three-node test cluster in network namespaces (scripts/test_cluster.sh,
# about a minute; it skips with its reason where namespaces are not permitted;
# HYPIC_SKIP_CLUSTER=1 leaves it out).
# Takes: about 13 minutes on a fresh 2-core machine, 7.5 of them the build (docs/testing.md, "CI").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The unit tests as one gtest process per core (scripts/ci/unit_shards.sh: a process per test
# cost about a second each to start), then the rest under ctest: the MPI tests at 1-3 ranks
# and the README's commands. Tests bound their own time; the timeouts are the last guard.
status=0
bash scripts/ci/unit_shards.sh "$BUILD_DIR" test.sh || status=1
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j "$(nproc)" -LE unit || status=1
if [ "$status" -ne 0 ]; then
  echo "test.sh: FAILED (the lines above name the tests; ctest --test-dir $BUILD_DIR -R NAME" \
    "runs one alone)"
  exit 1
fi
if [ "${HYPIC_SKIP_SLURM:-0}" = 1 ]; then
  echo "test.sh: Slurm job tests skipped (HYPIC_SKIP_SLURM=1)"
else
  HYPIC_BIN="$BUILD_DIR/src/hypic" bash scripts/test_slurm.sh
fi
if [ "${HYPIC_SKIP_CLUSTER:-0}" = 1 ]; then
  echo "test.sh: three-node cluster test skipped (HYPIC_SKIP_CLUSTER=1)"
else
  HYPIC_BIN="$BUILD_DIR/src/hypic" bash scripts/test_cluster.sh
fi
