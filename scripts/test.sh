#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Tests bound their own time; ctest's timeout is the last guard.
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j "$(nproc)"
