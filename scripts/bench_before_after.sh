#!/usr/bin/env bash
# One run of each README benchmark with two hypic binaries, back to back, for a before/after
# table (docs/benchmarks.md, "Before and after"). Usage:
#   scripts/bench_before_after.sh BEFORE_BINARY AFTER_BINARY [OUT_DIR]
# e.g. build an older commit into build-before/ and compare it with build/src/hypic.
# Writes OUT_DIR/{before,after}-{blas,forward,compose,ttft,scaling}.{txt,json}; about 10 min.
# Takes: about 10 minutes on 2 cores (each benchmark once per binary).
set -u
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY [OUT_DIR]" >&2; exit 2; }
BEFORE=$1 AFTER=$2 OUT=${3:-outputs/bench-before-after}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODEL="$OUT/bench-model"
[ -d "$MODEL" ] || "$AFTER" model init --arch qwen3_5 --preset bench --seed 0 --dtype bf16 --out "$MODEL"
for which in before after; do
  bin=$BEFORE
  [ "$which" = after ] && bin=$AFTER
  echo "== $which: $bin"
  "$bin" bench blas --json "$OUT/$which-blas.json" >"$OUT/$which-blas.txt" 2>&1
  "$bin" bench forward --model "$MODEL" --tokens 4096 --reps 3 --json "$OUT/$which-forward.json" \
    >"$OUT/$which-forward.txt" 2>&1
  "$bin" bench compose --json "$OUT/$which-compose.json" >"$OUT/$which-compose.txt" 2>&1
  "$bin" bench ttft --json "$OUT/$which-ttft.json" >"$OUT/$which-ttft.txt" 2>&1
  mpirun -n 3 --oversubscribe "$bin" bench scaling --tokens 32736 --segments 24 \
    --json "$OUT/$which-scaling.json" >"$OUT/$which-scaling.txt" 2>&1
done
for which in before after; do
  echo "== $which"
  grep -h "sgemm 2048" "$OUT/$which-blas.txt"
  grep -h "tokens/s\|achieved" "$OUT/$which-forward.txt" | head -2
  grep -h "layer forward\|applying" "$OUT/$which-compose.txt"
  grep -h "ttft p50" "$OUT/$which-ttft.txt" | grep -v "store reads only" | awk '{print "  " $1, $3, $4}'
  grep -hE "^ +2 +lpt " "$OUT/$which-scaling.txt"
done
