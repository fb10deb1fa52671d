#!/usr/bin/env bash
# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (the unit tests as two gtest
# shards per core, the MPI tests under ctest; not the Slurm jobs), then short libFuzzer runs when
# clang can build them (scripts/ci/fuzz.sh).
# Docs: docs/testing.md.
# Takes: about 25 minutes from scratch on the idle 2-core VM (build 13, suite 8-10, fuzz 2; docs/testing.md).
#
#   bash scripts/ci/sanitize.sh            build into build-asan/, run the suite, check the logs
#   HYPIC_ASAN_BUILD_DIR=DIR            another build directory
#   HYPIC_SANITIZE_SUBSET=1             build and run only the MPI tests (hypic_mpi_tests at
#                                       1-3 ranks: messages, distribution, store, engine), for a
#                                       machine where the whole build is too slow; it says so
#                                       (.ci/run runs the whole suite)
#   HYPIC_SKIP_FUZZ=1                   leave out the seconds-long fuzz runs
#   HYPIC_ASAN_SHARDS=N                 run the unit tests as N gtest shards (default: 2 per core)
#   HYPIC_ASAN_FLAGS="-O1 -g"           other optimisation/debug flags (default below)
#   HYPIC_ASAN_GLUE_OPTIONS=            other options for the command-line glue (default -O0;
#                                       empty: the same flags as the rest)
#   HYPIC_ASAN_TEST_OPTIONS=            other options for the test sources (default -O0;
#                                       empty: the same flags as the rest)
#
# Where the build's time goes: scripts/ci/time_compile.sh as the compiler launcher (its header).
#
# What fails the job: a failing test; any AddressSanitizer error or UBSan report (UBSan halts on
# the first one); a leaked block allocated by hypic's own code (src/, kernels/, tests/: the
# first frame past the allocator, scripts/ci/leak_judge.py). Leaks inside Open MPI, PMIx,
# hwloc, HDF5 and the other libraries below are suppressed
# (scripts/ci/lsan.supp says which and why); the remaining reports go to log files under
# $BUILD_DIR/sanitize-logs, never to stderr, so the CLI tests that expect exactly one stderr
# line still see only hypic's own output.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD_DIR=${HYPIC_ASAN_BUILD_DIR:-build-asan}
start=$(date +%s)

# -O1 keeps ASan's stack traces exact enough while the suite runs at a usable speed; Debug so
# assert() stays on. -fno-var-tracking: GCC's tracking of where each local variable lives
# took most of the compile time at -O1 -g (src/model/checkpoint.cpp: 120 s with it, 41 s
# without; docs/testing.md); the reports need only the line tables and inline frames, which
# stay.
# The command-line glue (src/app, the CLI tests; HYPIC_GLUE_COMPILE_OPTIONS) at -O0: mostly
# CLI11's and nlohmann::json's inline code, half of the compile time at -O1 and none of the
# suite's run time. From scratch here: 861 s instead of 1527 s with -O1 -g throughout.
# The other test sources (tests/unit, tests/mpi; HYPIC_TEST_COMPILE_OPTIONS) at -O0 too: their
# numerical work is in the libraries they call, which stay at -O1, and at -O1 they took 2-3
# times as long to compile (docs/testing.md).
debug_flags=${HYPIC_ASAN_FLAGS:-"-O1 -g -fno-var-tracking"}
glue_options=${HYPIC_ASAN_GLUE_OPTIONS--O0}
test_options=${HYPIC_ASAN_TEST_OPTIONS--O0}
# CUDA is left out (HYPIC_CUDA=OFF; HYPIC_ASAN_CUDA=ON keeps it): nothing here runs it, the
# CPU-side device plumbing is tested through the host-memory stand-in device, which does not need
# the CUDA objects, and the Release build of scripts/test.sh already compiles them.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug -DHYPIC_SANITIZE=address,undefined \
  -DCMAKE_CXX_FLAGS_DEBUG="$debug_flags" -DCMAKE_C_FLAGS_DEBUG="$debug_flags" \
  -DHYPIC_GLUE_COMPILE_OPTIONS="$glue_options" -DHYPIC_TEST_COMPILE_OPTIONS="$test_options" \
  -DHYPIC_CUDA="${HYPIC_ASAN_CUDA:-OFF}" \
  ${HYPIC_CMAKE_ARGS:-}
# The build runs hypic_unit_tests once to list its tests (gtest_discover_tests); Open MPI's
# leaks at that exit must not fail the build, so leaks are not checked there.
export ASAN_OPTIONS=detect_leaks=0
select=()
if [ "${HYPIC_SANITIZE_SUBSET:-0}" = 1 ]; then
  echo "sanitize.sh: HYPIC_SANITIZE_SUBSET=1: only the MPI tests (mpi_tests_np1..3)," \
    "not the unit and CLI tests"
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target hypic_mpi_tests
  select=(-R '^mpi_tests_np')
else
  cmake --build "$BUILD_DIR" -j "$(nproc)"
fi
built=$(date +%s)

LOG_DIR="$(cd "$BUILD_DIR" && pwd)/sanitize-logs"
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
# exitcode=0: a leak alone does not change a process's exit code (the CLI tests check exit
# codes; leaks are judged below from the logs). abort_on_error=1: a memory error or UB report
# ends the process with SIGABRT, whatever exitcode says, so the test that ran it fails.
# fast_unwind_on_malloc: the frame-pointer unwinder by default. The slow (DWARF) one found the
# frames of Open MPI and its plugins, which have no frame pointers, but made every malloc cost
# an unwind: the malloc-heavy CLI tests (JSON corpora of a million tokens) took 2-10 times
# longer and the suite most of the job (docs/testing.md). Leaks are judged by the first frame
# past the allocator (scripts/ci/leak_judge.py), which the fast unwinder gets right;
# HYPIC_ASAN_SLOW_UNWIND=1 brings the slow one back (full library stacks in the logs).
# intercept_tls_get_addr=0: GCC 12's LeakSanitizer keeps a stale dynamic-TLS range after Open
# MPI unloads a plugin it opened, and its exit-time check then crashes on it ("Tracer caught
# signal 11", "LeakSanitizer has encountered a fatal error"): every hypic process ends with
# SIGABRT and Open MPI's backtrace on stderr. Whether the range is stale depends on the memory
# layout: here with TMPDIR=/nonexistent (not with TMPDIR=/nonexistent-hypic-preflight; the
# preflight below), and, by its symptoms, for every CLI test in a CI run. Without the
# interception LSan does not scan the dynamic TLS of dlopen()ed libraries; hypic's own
# thread_local variables are in the static TLS, which it still scans.
export ASAN_OPTIONS="log_path=$LOG_DIR/asan:exitcode=0:abort_on_error=1:detect_leaks=1:\
fast_unwind_on_malloc=$([ "${HYPIC_ASAN_SLOW_UNWIND:-0}" = 1 ] && echo 0 || echo 1):\
strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:\
intercept_tls_get_addr=0"
# The CUDA driver maps device memory where ASan keeps its shadow gap.
if command -v nvidia-smi > /dev/null 2>&1; then ASAN_OPTIONS+=":protect_shadow_gap=0"; fi
export LSAN_OPTIONS="suppressions=$ROOT/scripts/ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$LOG_DIR/ubsan:halt_on_error=1:print_stacktrace=1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Tests that cannot run under ASan, by name, each with its reason (ctest -E).
declare -A EXCLUDED=(
)
exclude=""
for name in "${!EXCLUDED[@]}"; do
  echo "sanitize.sh: excluded $name: ${EXCLUDED[$name]}"
  exclude+="${exclude:+|}^${name}\$"
done
# Preflight: a refused command under these options prints exactly hypic's one line and exits
# 1, also when Open MPI cannot use its temporary folder. Fails at once, with what the process
# printed, instead of after a suite whose every CLI test fails the same way.
HYPIC_ASAN_BIN="$BUILD_DIR/src/hypic"
if [ -x "$HYPIC_ASAN_BIN" ]; then
  for tmp in "${TMPDIR:-/tmp}" /nonexistent; do
    pre_code=0
    pre_err=$(TMPDIR=$tmp "$HYPIC_ASAN_BIN" bench kernels --preset tiny --threads 2,1 2>&1 \
      > /dev/null) || pre_code=$?
    if [ "$pre_code" -ne 1 ] || [ "$(printf '%s\n' "$pre_err" | wc -l)" -ne 1 ]; then
      echo "sanitize.sh: preflight FAILED with TMPDIR=$tmp: exit $pre_code, stderr:"
      printf '%s\n' "$pre_err" | head -40
      exit 1
    fi
  done
  echo "sanitize.sh: preflight: a refused command gives one stderr line and exit 1"
fi

status=0
if [ "${HYPIC_SANITIZE_SUBSET:-0}" = 1 ]; then
  ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 1800 -j "$(nproc)" \
    ${exclude:+-E "$exclude"} "${select[@]}" || status=$?
else
  # The unit tests as a few gtest shards (scripts/ci/unit_shards.sh), not a process per test:
  # under ASan every process pays seconds to start and to check for leaks at exit. Two shards
  # per core (HYPIC_ASAN_SHARDS): gtest deals the tests out by index, and with one shard per
  # core the few long tests left one shard 60 % longer than the other (422 s against 265 s);
  # four shards share the two cores until the last ends. The MPI tests stay under ctest
  # (mpirun per rank count).
  [ -n "$exclude" ] && echo "sanitize.sh: exclusions apply to ctest only (the MPI tests)"
  bash scripts/ci/unit_shards.sh "$BUILD_DIR" "sanitize.sh (ASan)" \
    "${HYPIC_ASAN_SHARDS:-$((2 * $(nproc)))}" || status=1
  ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 1800 -j "$(nproc)" \
    -R '^mpi_tests_np' ${exclude:+-E "$exclude"} || status=$?
fi
tested=$(date +%s)

# Sanitizer logs: errors and UB always fail; a leak fails when the first frame of its
# allocation stack past the allocator lies in hypic's sources (scripts/ci/leak_judge.py; what
# the suppressions left is listed, the rest only counted).
shopt -s nullglob
logs=("$LOG_DIR"/*)
errors=0
leak_logs=0
for log in "${logs[@]}"; do
  if grep -qE 'ERROR: AddressSanitizer|runtime error:|ERROR: UndefinedBehaviorSanitizer' "$log"; then
    echo "sanitize.sh: sanitizer error in $log:"
    sed -n 1,60p "$log"
    errors=$((errors + 1))
  elif grep -q 'ERROR: LeakSanitizer' "$log"; then
    leak_logs=$((leak_logs + 1))
  fi
done
if [ "$leak_logs" -gt 0 ]; then
  judged=$(python3 scripts/ci/leak_judge.py "$ROOT" "${logs[@]}")
  hypic_leaks=$(printf '%s\n' "$judged" | sed -n 's/^hypic-leaks //p')
  if [ "${hypic_leaks:-1}" != 0 ]; then
    echo "sanitize.sh: leaks from hypic's code:"
    printf '%s\n' "$judged" | head -200
    errors=$((errors + 1))
  fi
fi
echo "sanitize.sh: ${#logs[@]} sanitizer logs, $leak_logs with leaks not suppressed" \
  "(libraries' own: see $LOG_DIR); $errors fail the job"

fuzz_status=0
if [ "${HYPIC_SKIP_FUZZ:-0}" != 1 ]; then
  # Seconds-long runs: built at -O0 (half the compile time; tests/fuzz/CMakeLists.txt).
  HYPIC_FUZZ_SECONDS=${HYPIC_FUZZ_SECONDS:-5} \
    HYPIC_FUZZ_FLAGS=${HYPIC_FUZZ_FLAGS:-"-O0 -gline-tables-only"} bash scripts/ci/fuzz.sh ||
    fuzz_status=$?
fi
done_at=$(date +%s)
# The load average goes with the times: on a shared machine they mean little without it.
echo "sanitize.sh: build $((built - start)) s, suite $((tested - built)) s," \
  "fuzz $((done_at - tested)) s, total $((done_at - start)) s;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
if [ "$status" -ne 0 ] || [ "$errors" -ne 0 ] || [ "$fuzz_status" -ne 0 ]; then
  echo "sanitize.sh: FAILED (ctest $status, sanitizer logs $errors, fuzz $fuzz_status)"
  exit 1
fi
echo "sanitize.sh: passed"
