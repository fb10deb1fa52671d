#!/usr/bin/env bash
# Peak memory of loading a bf16 checkpoint of a few GB, kept in bf16 (the default) and widened
# to f32 (--weights-dtype f32): issue #13's "no twice the checkpoint in RAM" and #15's "about
# half for bf16". Writes a random-weight qwen3_5 'large' checkpoint (1.1 B parameters, 2.2 GB)
# to a temporary folder under /tmp (never committed) and removes it afterwards; with
# HYPIC_PEAK_DIR=DIR the checkpoint is written there once and kept for later runs.
#   scripts/weights_peak_memory.sh [build/src/hypic] [preset]
# Takes: a few minutes (writes and loads a 2.2 GB checkpoint twice).
set -euo pipefail
HYPIC=${1:-build/src/hypic}
PRESET=${2:-large}
[ -x "$HYPIC" ] || { echo "no hypic binary at $HYPIC (build first)" >&2; exit 1; }
if [ -n "${HYPIC_PEAK_DIR:-}" ]; then
  DIR=$HYPIC_PEAK_DIR
  mkdir -p "$DIR"
else
  DIR=$(mktemp -d /tmp/hypic-peak-XXXXXX)
  trap 'rm -rf "$DIR"' EXIT
fi
if [ ! -f "$DIR/m/model.safetensors" ]; then
  echo "writing a random $PRESET qwen3_5 checkpoint in bf16 to $DIR/m ..."
  /usr/bin/time -f "model init: %e s, peak %M KiB" "$HYPIC" --threads 1 model init \
    --arch qwen3_5 --preset "$PRESET" --seed 1 --dtype bf16 --out "$DIR/m"
fi
du -sh "$DIR/m"/*.safetensors
for wd in auto f32; do
  echo "--- hypic --weights-dtype $wd model info --model $DIR/m"
  /usr/bin/time -f "process peak (time): %M KiB, %e s" "$HYPIC" --threads 1 --weights-dtype "$wd" \
    model info --model "$DIR/m" | grep -E "^(parameters|checkpoint|memory)"
done
