#!/usr/bin/env bash
# The answer-quality table of README ("Answer quality"): `hypic eval` of the embedded trained
# model on the held-out synthqa test set (passages in shuffled order) in the modes full,
# prefix, pic (W=8), pic (W=0) and pic-addition, with EM and F1 per mode, the difference to
# full recompute, and EM per question kind.
# Usage: scripts/quality_table.sh [LIMIT]   (default: the whole set, 600 questions)
# Environment: HYPIC_BUILD_DIR (default build). Outputs: outputs/quality/.
# Builds nothing: run scripts/build.sh (or scripts/demo.sh) first.
set -euo pipefail
cd "$(dirname "$0")/.."
HYPIC="${HYPIC_BUILD_DIR:-build}/src/hypic"
MODEL=inputs/models/qwen3_5-synthqa
DATA=inputs/datasets/synthqa.jsonl
OUT=outputs/quality
LIMIT=${1:-0}
[ -x "$HYPIC" ] || {
  echo "quality_table: $HYPIC not built; run scripts/build.sh first" >&2
  exit 1
}
rm -rf "$OUT"
mkdir -p "$OUT"
limit=()
[ "$LIMIT" -gt 0 ] && limit=(--limit "$LIMIT")
"$HYPIC" eval --model "$MODEL" --dataset synthqa --input "$DATA" --out "$OUT/w8" \
  --modes full,prefix,pic,pic-addition --junction 8 "${limit[@]}"
"$HYPIC" eval --model "$MODEL" --dataset synthqa --input "$DATA" --out "$OUT/w0" \
  --modes pic --junction 0 "${limit[@]}"
python3 - "$OUT" "$DATA" <<'PY' | tee "$OUT/table.md"
import json, sys
out, data = sys.argv[1], sys.argv[2]
kind = {}
for line in open(data):
    j = json.loads(line)
    kind[j["_id"]] = j.get("kind", "?")
rows = []
for run, label in (("w8", None), ("w0", "pic (W=0)")):
    s = json.load(open(f"{out}/{run}/summary.json"))
    for m in s["modes"]:
        name = label or {"pic": "pic (W=8)", "pic-addition": "pic-addition (W=8)"}.get(
            m["mode"], m["mode"])
        preds = [json.loads(l) for l in open(m["predictions"])]
        rows.append((name, m, preds))
full = next(m for name, m, _ in rows if name == "full")
n = full["queries"]
print(f"synthqa test set: {n} questions, 3-6 passages each in shuffled order; "
      f"model inputs/models/qwen3_5-synthqa")
print()
print("| mode | EM | F1 | Δ EM vs full | Δ F1 vs full | TTFT p50 ms |")
print("|---|---:|---:|---:|---:|---:|")
for name, m, _ in rows:
    print(f"| {name} | {100 * m['em']:.2f} | {100 * m['f1']:.2f} | "
          f"{100 * (m['em'] - full['em']):+.2f} | {100 * (m['f1'] - full['f1']):+.2f} | "
          f"{m['ttft_ms']['p50']:.1f} |")
kinds = sorted({kind.get(p["_id"], "?") for _, _, preds in rows for p in preds})
print()
print("EM (%) per question kind (two_hop needs two passages):")
print()
print("| mode | " + " | ".join(kinds) + " |")
print("|---|" + "---:|" * len(kinds))
for name, _, preds in rows:
    cells = []
    for k in kinds:
        sel = [p["em"] for p in preds if kind.get(p["_id"]) == k]
        cells.append(f"{100 * sum(sel) / len(sel):.1f}" if sel else "-")
    print(f"| {name} | " + " | ".join(cells) + " |")
full_preds = {p["_id"]: p for p in rows[0][2]}
print()
print("answers that differ from full recompute:")
for name, _, preds in rows[1:]:
    diff = [p for p in preds if p["pred"] != full_preds[p["_id"]]["pred"]]
    gained = sum(1 for p in diff if p["em"] > full_preds[p["_id"]]["em"])
    lost = sum(1 for p in diff if p["em"] < full_preds[p["_id"]]["em"])
    print(f"  {name}: {len(diff)} of {len(preds)} ({gained} now right, {lost} now wrong)")
counts = {k: sum(1 for p in rows[0][2] if kind.get(p["_id"]) == k) for k in kinds}
print()
print("questions per kind: " + ", ".join(f"{k} {c}" for k, c in counts.items()))
PY
echo "wrote $OUT/table.md (runs in $OUT/w8 and $OUT/w0)"
