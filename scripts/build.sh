#!/usr/bin/env bash
# Configures and builds hypic (Release) into ${HYPIC_BUILD_DIR:-build}.
# Takes: about 7.5 minutes from scratch on 2 cores (docs/testing.md, "CI"), seconds when up to date; ccache helps.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${HYPIC_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$(nproc)"
