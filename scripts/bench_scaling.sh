#!/usr/bin/env bash
# Repeats `mpirun -n 3 hypic bench scaling` (a 32k-token cold query of 24 skewed segments,
# 1 and 2 workers) and prints each run's measured 2-worker speed-ups and their medians per
# policy: lpt (rebalanced, what serve does), lpt-static and round-robin. Every speed-up is a
# ratio of two times measured in the same run; the median is over runs. Run it on an idle
# machine: with 3 ranks on 2 cores, any other load lands on the workers.
# Usage: scripts/bench_scaling.sh [RUNS] [extra bench-scaling options]   (default 4 runs)
# Environment: HYPIC_BUILD_DIR (default build). Outputs: outputs/bench_scaling/run<i>.{txt,json}.
# Takes: a few minutes per run on 2 cores (each run times 1 and 2 workers); not timed as a whole.
set -euo pipefail
cd "$(dirname "$0")/.."
HYPIC="${HYPIC_BUILD_DIR:-build}/src/hypic"
RUNS=${1:-4}
shift || true
OUT=outputs/bench_scaling
[ -x "$HYPIC" ] || {
  echo "bench_scaling: $HYPIC not built; run scripts/build.sh first" >&2
  exit 1
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$OUT"
mkdir -p "$OUT"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$RUNS"); do
  mpirun -n 3 --oversubscribe "$HYPIC" bench scaling --ranks 3 --tokens 32736 --segments 24 \
    --json "$OUT/run$i.json" "$@" > "$OUT/run$i.txt"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
policies = ["lpt", "lpt-static", "round-robin"]
got = {p: [] for p in policies}
sim = {p: [] for p in policies}
print(f"\n2-worker speed-up over 1 worker, {runs} runs (measured; simulated in brackets)")
print("run  " + "".join(f"{p:>22}" for p in policies))
for i in range(1, runs + 1):
    rows = json.load(open(f"{out}/run{i}.json"))["rows"]
    line = f"{i:3d}  "
    for p in policies:
        r = next(r for r in rows if r["workers"] == 2 and r["policy"] == p)
        got[p].append(r["measured_speedup"])
        sim[p].append(r["simulated_speedup"])
        line += f"{r['measured_speedup']:>13.2f}x ({r['simulated_speedup']:.2f}x)"
    print(line)
print("med  " + "".join(f"{statistics.median(got[p]):>13.2f}x ({statistics.median(sim[p]):.2f}x)"
                        for p in policies))
rows = json.load(open(f"{out}/run{runs}.json"))["rows"]
proj = ", ".join(f"{r['workers']} workers {r['simulated_speedup']:.2f}x" for r in rows
                 if r["policy"] == "lpt" and r["workers"] in (8, 16))
print(f"simulated lpt, last run: {proj}")
PY
