#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs the main job on the embedded default in
# inputs/: the small trained hybrid model inputs/models/qwen3_5-synthqa (scripts/train/train_tiny.py)
# and its synthetic multi-document QA corpus.
#   1. warm-up: `mpirun -n RANKS hypic warmup` turns every passage of the corpus into a segment
#      entry of an HDF5 store (rank 0 plans, workers compute);
#   2. a batch of questions, each over 3-6 passages in shuffled order, served in pic mode from
#      the store, and for comparison in prefix and full (recompute) mode;
#   3. a few questions with their answers, then TTFT and answer score (EM, F1) per mode;
#   4. the long-prompt set (16-32 passages, 4-8k tokens) with the model retrained for it:
#      `hypic eval` in full, prefix, pic and pic-addition, one table (score, Δ, KL, TTFT).
# Environment: HYPIC_DEMO_RANKS (default 2), HYPIC_DEMO_QUERIES (default 100),
# HYPIC_DEMO_LONG_QUERIES (default 12), HYPIC_BUILD_DIR (default build). Outputs: outputs/demo/.
# Takes: under 3 minutes after the build on 2 cores (the set-up and build: see scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${HYPIC_BUILD_DIR:-build}
HYPIC="$BUILD_DIR/src/hypic"
MODEL=inputs/models/qwen3_5-synthqa
CORPUS=inputs/corpus/synthqa.jsonl
ALL_QUERIES=inputs/corpus/synthqa_queries.jsonl
OUT=outputs/demo
STORE="$OUT/store.h5"
RANKS=${HYPIC_DEMO_RANKS:-2}
NQ=${HYPIC_DEMO_QUERIES:-100}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$OUT"
mkdir -p "$OUT"
QUERIES="$OUT/queries.jsonl"
head -n "$NQ" "$ALL_QUERIES" >"$QUERIES"
mpi() { mpirun -n "$RANKS" --oversubscribe "$HYPIC" "$@"; }

echo "== build and machine"
"$HYPIC" info
echo
echo "== the embedded model (inputs/models/qwen3_5-synthqa/README.md says how it was trained)"
"$HYPIC" model info --model "$MODEL"
echo
echo "== warm-up on $RANKS ranks: every passage of $CORPUS becomes a segment entry in $STORE"
mpi warmup --model "$MODEL" --corpus "$CORPUS" --store "$STORE" --ranks "$RANKS"
"$HYPIC" inspect --store "$STORE" --verify
echo
for mode in pic prefix full; do
  echo "== serve $NQ questions in $mode mode"
  extra=()
  [ "$mode" = pic ] && extra=(--compare-full)
  "$HYPIC" serve --model "$MODEL" --store "$STORE" --corpus "$CORPUS" --queries "$QUERIES" \
    --mode "$mode" --out "$OUT/$mode" "${extra[@]}"
done
echo
python3 - "$OUT" "$QUERIES" <<'PY'
import json, statistics, sys
out, queries = sys.argv[1], sys.argv[2]
qs = {}
for line in open(queries):
    q = json.loads(line)
    qs[q["id"]] = q["question"].split("Question: ")[-1].split("\n")[0]
modes = ("pic", "prefix", "full")
preds = {m: [json.loads(l) for l in open(f"{out}/{m}/predictions.jsonl")] for m in modes}
print("== a few questions, answered in pic mode from the warm store")
for p in preds["pic"][:5]:
    ok = "right" if p["exact_match"] else "wrong"
    print(f"  {qs[p['id']]}\n    -> {p['answer'].strip()!r} (gold {p['answers'][0]!r}, {ok})")
print()
print(f"== TTFT and answer score over {len(preds['pic'])} questions")
print(f"{'mode':8} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'EM %':>7} {'F1 %':>7}")
row = {}
for m in modes:
    t = json.load(open(f"{out}/{m}/metrics.json"))["ttft_ms"]
    em = 100 * statistics.mean(p["exact_match"] for p in preds[m])
    f1 = 100 * statistics.mean(p["f1"] for p in preds[m])
    row[m] = (t["p50"], em)
    print(f"{m:8} {t['p50']:12.1f} {t['p99']:12.1f} {em:7.1f} {f1:7.1f}")
print(f"pic is {row['prefix'][0] / row['pic'][0]:.1f}x faster than prefix and "
      f"{row['full'][0] / row['pic'][0]:.1f}x faster than full at p50; EM pic - full = "
      f"{row['pic'][1] - row['full'][1]:+.1f} points")
PY
echo
# The long-prompt set (docs/datasets.md, synthqa_long): 16-32 passages per question, 4-8k
# tokens, with the model retrained for it (inputs/models/qwen3_5-synthlong/README.md). Here the
# prompt is long enough that recomputing it is what costs: pic's TTFT against full and prefix
# is what position-independent caching is for.
LONG_MODEL=inputs/models/qwen3_5-synthlong
LONG_SET=inputs/datasets/synthqa_long_demo.jsonl
NL=${HYPIC_DEMO_LONG_QUERIES:-12}
echo "== the long-prompt set: $NL questions over 16-32 passages (4-8k tokens), model $LONG_MODEL"
"$HYPIC" model info --model "$LONG_MODEL" | sed -n 1,4p
"$HYPIC" eval --model "$LONG_MODEL" --dataset synthqa_long --input "$LONG_SET" --limit "$NL" \
  --modes full,prefix,pic,pic-addition --out "$OUT/long" >"$OUT/long.log"
"$HYPIC" eval-table "$OUT/long"
echo
echo "demo finished; outputs in $OUT/ (every quality table: docs/quality.md; README, 'Results')"
