#!/usr/bin/env bash
# Submits the datasets x modes evaluation (jobs/slurm/eval.sbatch, its header): the prep
# array (store warm-up + full + pic per dataset), the modes array (afterok), and the merge
# job (afterok), all sharing OUT. Prints "prep=ID mode=ID merge=ID".
#
#   DATASETS="hotpotqa triviaqa multi_news gov_report" DATA_DIR=/data/longbench \
#   MODEL=/models/Qwen3.5-... OUT=/scratch/eval1 bash jobs/slurm/eval-submit.sh [SBATCH-ARGS...]
#
# SBATCH-ARGS (e.g. -n 3 -c 4 --time=02:00:00 --partition=gpu) go to all three submissions.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export HYPIC_ROOT=${HYPIC_ROOT:-$(cd "$here/../.." && pwd)}
: "${DATASETS:?set DATASETS (LongBench names, files DATA_DIR/<name>.jsonl)}"
: "${OUT:?set OUT (shared by the three jobs)}"
ARRAY_MODES=${ARRAY_MODES:-prefix pic-addition pic:0}
# shellcheck disable=SC2206
d=(${DATASETS//,/ })
# shellcheck disable=SC2206
m=(${ARRAY_MODES//,/ })
export DATASETS ARRAY_MODES OUT
mkdir -p "$OUT/logs"
prep=$(sbatch --parsable --export=ALL,STAGE=prep --array=0-$((${#d[@]} - 1)) \
  -o "$OUT/logs/prep-%A_%a.out" "$@" "$here/eval.sbatch" | cut -d';' -f1)
mode=$(sbatch --parsable --export=ALL,STAGE=mode --dependency=afterok:"$prep" \
  --kill-on-invalid-dep=yes --array=0-$((${#d[@]} * ${#m[@]} - 1)) \
  -o "$OUT/logs/mode-%A_%a.out" "$@" "$here/eval.sbatch" | cut -d';' -f1)
merge=$(sbatch --parsable --export=ALL,STAGE=merge --dependency=afterok:"$mode" \
  --kill-on-invalid-dep=yes -n 1 -o "$OUT/logs/merge-%j.out" "$@" "$here/eval.sbatch" |
  cut -d';' -f1)
echo "prep=$prep mode=$mode merge=$merge"
