#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs the main job on the embedded default
# in inputs/: warm-up of the corpus into an HDF5 segment store, then a batch of RAG-style
# queries (several passages in shuffled order, then a question) served in pic mode and, for
# comparison, prefix and full mode, with TTFT and agreement with full recompute.
# Outputs: outputs/demo/. The embedded model has random weights (inputs/models/*/README.md):
# its answers are noise; the caching mechanics, timings and fidelity are real.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
HYPIC="$BUILD_DIR/src/hypic"
MODEL=inputs/models/qwen3_5-small
CORPUS=inputs/corpus/towns.jsonl
QUERIES=inputs/corpus/queries.jsonl
OUT=outputs/demo
STORE="$OUT/store.h5"
RANKS=${HYPIC_DEMO_RANKS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$OUT"
mkdir -p "$OUT"
run() { mpirun -n "$RANKS" --oversubscribe "$HYPIC" "$@"; }

echo "== build and machine"
run info
echo
echo "== the embedded model"
run model info --model "$MODEL"
echo
echo "== warm-up: every passage of $CORPUS becomes a segment entry in $STORE"
run warmup --model "$MODEL" --corpus "$CORPUS" --store "$STORE"
run inspect --store "$STORE" --verify
echo
for mode in pic prefix full; do
  echo "== serve $QUERIES in $mode mode"
  extra=()
  [ "$mode" = pic ] && extra=(--compare-full)
  run serve --model "$MODEL" --store "$STORE" --corpus "$CORPUS" --queries "$QUERIES" \
    --mode "$mode" --out "$OUT/$mode" "${extra[@]}"
done
echo
echo "== a few answers (pic mode)"
head -n 3 "$OUT/pic/predictions.jsonl"
echo
echo "== TTFT by mode (ms) and agreement of pic with full recompute"
python3 - "$OUT" <<'PY' 2>/dev/null || cat "$OUT"/*/metrics.json
import json, sys
out = sys.argv[1]
rows = {m: json.load(open(f"{out}/{m}/metrics.json")) for m in ("pic", "prefix", "full")}
print(f"{'mode':8} {'p50':>9} {'p99':>9} {'mean':>9}")
for m, j in rows.items():
    t = j["ttft_ms"]
    print(f"{m:8} {t['p50']:9.1f} {t['p99']:9.1f} {t['mean']:9.1f}")
p = rows["pic"]["ttft_ms"]["p50"]
print(f"prefix/pic {rows['prefix']['ttft_ms']['p50'] / p:.2f}x, full/pic {rows['full']['ttft_ms']['p50'] / p:.2f}x at p50")
if "compare_full" in rows["pic"]:
    print("pic vs full:", json.dumps(rows["pic"]["compare_full"]))
PY
echo
echo "demo finished; outputs in $OUT/"
