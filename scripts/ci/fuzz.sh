#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang + ASan + UBSan, into build-fuzz/) and runs
# each on its committed seed corpus (tests/fuzz/corpus/<target>/). Docs: docs/testing.md.
# Takes: about 35 minutes by default (300 s per target), about 100 s with HYPIC_FUZZ_SECONDS=5.
#
#   bash scripts/ci/fuzz.sh                  a campaign: 300 s per target
#   HYPIC_FUZZ_SECONDS=5 bash scripts/ci/fuzz.sh     the short run scripts/ci/sanitize.sh does
#   HYPIC_FUZZ_TARGETS="fuzz_config fuzz_tokenizer"   only these targets
#   HYPIC_FUZZ_BUILD_DIR=DIR              another build directory
#   HYPIC_FUZZ_FLAGS="-O0 -gline-tables-only"   other optimisation/debug flags (default -O1 -g;
#                                         the short run of scripts/ci/sanitize.sh uses these)
#
# New inputs that reach new code go to $BUILD_DIR/fuzz-work/<target>/, not into the committed
# corpus (copy the interesting ones there by hand). A crash, a sanitizer report, a leak, an
# exception other than hypic::Error, a single allocation over 512 MB or an input that runs
# over 30 s (wall time, so generous for loaded machines) stops that target, leaves the input
# in $BUILD_DIR/fuzz-artifacts/ and fails the script; the others still run. Reproduce with:
# $BUILD_DIR/tests/fuzz/<target> <input file>.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${HYPIC_FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${HYPIC_FUZZ_SECONDS:-300}

HYPIC_EXTRA_PACKAGES="clang libclang-rt-14-dev ${HYPIC_EXTRA_PACKAGES:-}" bash scripts/setup.sh
mkdir -p "$BUILD_DIR"
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug -DHYPIC_FUZZ=ON \
  -DHYPIC_TESTS=OFF -DHYPIC_FUZZ_FLAGS="${HYPIC_FUZZ_FLAGS:--O1 -g}" ${HYPIC_CMAKE_ARGS:-} \
  > "$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$(nproc)" --target hypic_fuzz

targets=${HYPIC_FUZZ_TARGETS:-$(cd tests/fuzz/corpus && ls)}
work="$BUILD_DIR/fuzz-work"
artifacts="$BUILD_DIR/fuzz-artifacts"
mkdir -p "$artifacts"
failed=()
for target in $targets; do
  mkdir -p "$work/$target"
  log="$BUILD_DIR/fuzz-$target.log"
  # -close_fd_mask=1: the targets print nothing worth keeping on stdout.
  if "$BUILD_DIR/tests/fuzz/$target" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -close_fd_mask=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$target-" "$work/$target" "tests/fuzz/corpus/$target" \
    > "$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    cover=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz.sh: $target: ${runs:-?} inputs in ${SECONDS_PER_TARGET} s, $cover, no finding"
  else
    echo "fuzz.sh: $target: FINDING (log $log, inputs in $artifacts/):"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|==[0-9]+==' "$log" | head -20
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: no findings"
