#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs the whole test suite: the ctest suite
# (unit tests, MPI tests at 1-3 ranks, CLI tests) and then the Slurm job scripts on a
# single-node test cluster (scripts/test_slurm.sh; HYPIC_SKIP_SLURM=1 leaves them out and
# says so).
# Takes: about 28 minutes on a fresh 2-core machine, 17 of them the build (issue #49).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Tests bound their own time; ctest's timeout is the last guard.
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j "$(nproc)"
if [ "${HYPIC_SKIP_SLURM:-0}" = 1 ]; then
  echo "test.sh: Slurm job tests skipped (HYPIC_SKIP_SLURM=1)"
else
  HYPIC_BIN="$BUILD_DIR/src/hypic" bash scripts/test_slurm.sh
fi
