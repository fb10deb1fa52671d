#!/usr/bin/env bash
# A compiler launcher that appends "<seconds> <object>" per compiled file to
# ${HYPIC_COMPILE_TIMES:-/tmp/hypic-compile-times.txt}, to see where a build's time goes:
# Takes: milliseconds per compiled file on top of the compiler (it only times it).
#
#   HYPIC_CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/ci/time_compile.sh" \
#     bash scripts/ci/sanitize.sh          # or scripts/build.sh, into a fresh build folder
#   sort -rn /tmp/hypic-compile-times.txt | head            # the slowest objects
#   awk '{s += $1} END {print s}' /tmp/hypic-compile-times.txt   # compile time in all
#
# Docs: docs/testing.md ("Build time").
set -u
out=""
prev=""
for arg in "$@"; do
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
done
start=$(date +%s.%N)
"$@"
code=$?
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" -v o="$out" 'BEGIN { printf "%.2f %s\n", e - s, o }' \
  >> "${HYPIC_COMPILE_TIMES:-/tmp/hypic-compile-times.txt}"
exit $code
