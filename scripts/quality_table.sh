#!/usr/bin/env bash
# The answer-quality table (README, "Results"; docs/quality.md): `hypic eval` of a model on held-out
# sets in the modes full, prefix, pic (W=8), pic-addition (W=8) and pic (W=0), merged by
# `hypic eval-table` into one table per dataset x mode: score (EM/F1 or ROUGE-L), Δ vs full
# with its 95 % bootstrap interval over questions, first-token KL to full, TTFT p50 and the
# state contribution ‖T·S_in‖/‖S‖ of the pic modes; then EM per question kind for QA sets.
#
# Usage: scripts/quality_table.sh [LIMIT]   (default: every example of each set)
# Environment:
#   MODEL     model folder [inputs/models/qwen3_5-synthqa]
#   DATASETS  dataset names, files DATA_DIR/<name>.jsonl [synthqa], or NAME=FILE to read another
#             file as dataset NAME (e.g. synthqa_long=inputs/datasets/synthqa_long_demo.jsonl,
#             the 40 committed long questions); the long-prompt held-out sets are
#             "synthqa_long synthsum" (600 questions, 200 summaries), committed as .jsonl.xz and
#             unpacked here on first use (made by `scripts/train/train_tiny.py --task long
#             --data-only --answers tail`, which needs only the tokenizers package for that; the
#             first 40 questions are inputs/datasets/synthqa_long_demo.jsonl)
#   DATA_DIR  [inputs/datasets]
#   HYPIC_BUILD_DIR [build];  HYPIC_ARGS  extra arguments for every `hypic eval`
#   QUALITY_OUT  output folder [outputs/quality]: two runs at once (say one dataset each, with
#             HYPIC_ARGS="--threads 1") need two folders; `hypic eval-table` merges their runs
# Outputs: $QUALITY_OUT/<dataset>/{w8,w0}/ and $QUALITY_OUT/table.md.
# Builds nothing: run scripts/build.sh (or scripts/demo.sh) first.
# Takes: synthqa (600 short questions) about 5 min on 2 cores; the long sets about 40 min each;
# with a LIMIT of 5, under a minute per dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
HYPIC="${HYPIC_BUILD_DIR:-build}/src/hypic"
MODEL=${MODEL:-inputs/models/qwen3_5-synthqa}
DATASETS=${DATASETS:-synthqa}
DATA_DIR=${DATA_DIR:-inputs/datasets}
OUT=${QUALITY_OUT:-outputs/quality}
LIMIT=${1:-0}
[ -x "$HYPIC" ] || {
  echo "quality_table: $HYPIC not built; run scripts/build.sh first" >&2
  exit 1
}
rm -rf "$OUT"
mkdir -p "$OUT"
extra=()
[ "$LIMIT" -gt 0 ] && extra=(--limit "$LIMIT")
# shellcheck disable=SC2206
extra+=(${HYPIC_ARGS:-})
# The long held-out sets are committed xz-compressed (inputs/datasets/*.jsonl.xz, 190 KB for
# 18 MB); unpacked next to them on first use.
unpack() {
  local file=$1
  [ -f "$file" ] || [ ! -f "$file.xz" ] || {
    echo "quality_table: unpacking $file.xz" >&2
    xz -dc "$file.xz" >"$file.part" && mv "$file.part" "$file"
  }
}
runs=()
names=()
declare -A files
for spec in ${DATASETS//,/ }; do
  d=${spec%%=*}
  files[$d]=$DATA_DIR/$d.jsonl
  [ "$d" != "$spec" ] && files[$d]=${spec#*=}
  names+=("$d")
  unpack "${files[$d]}"
  [ -f "${files[$d]}" ] || {
    echo "quality_table: no ${files[$d]} for dataset $d (docs/quality.md)" >&2
    exit 1
  }
done
for d in "${names[@]}"; do
  data=${files[$d]}
  mkdir -p "$OUT/$d"
  "$HYPIC" eval --model "$MODEL" --dataset "$d" --input "$data" --out "$OUT/$d/w8" \
    --modes full,prefix,pic,pic-addition --junction 8 "${extra[@]}" >"$OUT/$d/w8.log"
  "$HYPIC" eval --model "$MODEL" --dataset "$d" --input "$data" --out "$OUT/$d/w0" \
    --modes pic --junction 0 --reference "$OUT/$d/w8" "${extra[@]}" >"$OUT/$d/w0.log"
  runs+=("$OUT/$d/w8" "$OUT/$d/w0")
done
{
  echo "model $MODEL; datasets: ${names[*]} (scores x100; Δ and its 95 % bootstrap interval"
  echo "over questions against full recompute; KL(full ‖ mode) of the first token; state"
  echo "contrib. = ‖T·S_in‖/‖S‖ per linear layer at segment boundaries, mean over layers)"
  echo
  "$HYPIC" eval-table "${runs[@]}"
} | tee "$OUT/table.md"

# EM per question kind (the "kind" field of the synthetic sets), QA sets only.
# shellcheck disable=SC2086  # one argument per dataset
python3 - "$OUT" $(for d in "${names[@]}"; do echo "$d=${files[$d]}"; done) <<'PY' | tee -a "$OUT/table.md"
import json, os, sys
out, specs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
for d, path in specs:
    kind = {}
    for line in open(path):
        j = json.loads(line)
        kind[j["_id"]] = j.get("kind", "?")
    rows = []
    for run, label in (("w8", None), ("w0", "pic (W=0)")):
        s = json.load(open(f"{out}/{d}/{run}/summary.json"))
        if s["metric"] == "rouge_l":
            break
        for m in s["modes"]:
            name = label or {"pic": "pic (W=8)", "pic-addition": "pic-addition (W=8)"}.get(
                m["mode"], m["mode"])
            rows.append((name, [json.loads(l) for l in open(m["predictions"])]))
    if not rows or len(set(kind.values())) < 2:
        continue
    kinds = sorted({kind.get(p["_id"], "?") for _, preds in rows for p in preds})
    print(f"\n{d}: EM (%) per question kind\n")
    print("| mode | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for name, preds in rows:
        cells = []
        for k in kinds:
            sel = [p["em"] for p in preds if kind.get(p["_id"]) == k]
            cells.append(f"{100 * sum(sel) / len(sel):.1f}" if sel else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    counts = {k: sum(1 for p in rows[0][1] if kind.get(p["_id"]) == k) for k in kinds}
    print("\nquestions per kind: " + ", ".join(f"{k} {c}" for k, c in counts.items()))
PY

# Summary sets, per mode: how often the summary opens with the reference's first sentence (the
# synthetic summaries follow the passages' order, so this asks whether passage 1 was found), the
# share of the reference's sentences it contains anywhere, and the share of its own sentences that
# are not repeats (greedy decoding of a small model loops; ROUGE-L alone hides how much).
# shellcheck disable=SC2086  # one argument per dataset
python3 - "$OUT" "${names[@]}" <<'PY' | tee -a "$OUT/table.md"
import json, sys
out, names = sys.argv[1], sys.argv[2:]
sentences = lambda text: [x.strip() for x in text.split(".") if x.strip()]
first = lambda text: text.split(".")[0].strip()
for d in names:
    s = json.load(open(f"{out}/{d}/w8/summary.json"))
    if s["metric"] != "rouge_l":
        continue
    print(f"\n{d}, per mode: summaries that open with the reference's first sentence; reference "
          "sentences found in the summary (mean share); the summary's sentences that are not "
          "repeats (mean share)\n")
    print("| mode | open right | reference sentences found | distinct sentences |")
    print("|---|---:|---:|---:|")
    for m in s["modes"]:
        preds = [json.loads(l) for l in open(m["predictions"])]
        hits = sum(first(p["pred"]) == first(p["answers"][0]) for p in preds)
        found, distinct = 0.0, 0.0
        for p in preds:
            said, ref = sentences(p["pred"]), sentences(p["answers"][0])
            said_set = set(said)
            found += sum(x in said_set for x in ref) / max(len(ref), 1)
            distinct += len(said_set) / max(len(said), 1)
        n = max(len(preds), 1)
        print(f"| {m['mode']} | {hits}/{len(preds)} | {100 * found / n:.1f} % | "
              f"{100 * distinct / n:.1f} % |")
PY
echo "wrote $OUT/table.md"
