#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs the main job on the embedded default
# in inputs/: the small Qwen3.5-architecture model, a prompt, greedy generation, logits to
# HDF5, and a prefill benchmark. Outputs go to outputs/demo/.
#
# The caching engine (warm-up, serve, eval) replaces this job as it lands; until then the
# demo shows the forward pass everything else stands on.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
HYPIC="$BUILD_DIR/src/hypic"
MODEL=inputs/models/qwen3_5-small
PROMPT=inputs/prompts/demo_ids.json
OUT=outputs/demo
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== build and machine"
"$HYPIC" info
echo
echo "== the embedded model"
"$HYPIC" model info --model "$MODEL"
echo
echo "== greedy generation (16 tokens) from $PROMPT"
"$HYPIC" generate --model "$MODEL" --input-ids "$PROMPT" --max-new-tokens 16
echo
echo "== logits of the prompt to $OUT/logits.h5"
"$HYPIC" forward --model "$MODEL" --input-ids "$PROMPT" --out "$OUT/logits.h5"
h5ls -r "$OUT/logits.h5" 2>/dev/null || true
echo
echo "== prefill benchmark (1024 tokens)"
"$HYPIC" bench forward --model "$MODEL" --tokens 1024 --reps 3 --json "$OUT/bench_forward.json"
echo
echo "demo finished; outputs in $OUT/"
