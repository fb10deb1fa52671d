# shellcheck shell=bash
# The datasets x modes array of jobs/slurm/eval.sbatch (sourced by it after common.sh; see
# its header). One function per stage; each task is one `hypic eval` (or the merge).
# shellcheck disable=SC2153  # JUNCTION, MODEL, OUT and the helpers come from common.sh

DATASETS=${DATASETS:-}
DATA_DIR=${DATA_DIR:-$HYPIC_ROOT/data}
ARRAY_MODES=${ARRAY_MODES:-prefix pic-addition pic:0}
LIMIT=${LIMIT:-0}
TEMPLATES=${TEMPLATES:-$HYPIC_ROOT/inputs/datasets/templates.json}

# shellcheck disable=SC2206
hypic_eval_datasets() { local list=(${DATASETS//,/ }); echo "${list[@]}"; }
# shellcheck disable=SC2206
hypic_eval_modes() { local list=(${ARRAY_MODES//,/ }); echo "${list[@]}"; }

# hypic_eval_run DATASET OUTDIR ARGS...: one `hypic eval` of DATASET into OUTDIR.
hypic_eval_run() {
  local d=$1 dir=$2
  shift 2
  local input=$DATA_DIR/$d.jsonl
  hypic_need_file "DATA_DIR/$d.jsonl" "$input"
  local args=(eval --model "$MODEL" --dataset "$d" --input "$input" --templates "$TEMPLATES"
    --out "$dir" "$@")
  ((LIMIT > 0)) && args+=(--limit "$LIMIT")
  [[ -n "${MAX_NEW_TOKENS:-}" ]] && args+=(--max-new-tokens "$MAX_NEW_TOKENS")
  local ranks
  ranks=$(hypic_rank_args eval) || return 2
  # shellcheck disable=SC2206
  args+=($ranks $HYPIC_ARGS)
  mkdir -p "$dir"
  hypic_log "=== $d -> $dir"
  hypic_launch "${args[@]}" 2>&1 | tee "$dir/eval.log"
}

hypic_eval_array_stage() {
  local datasets modes
  read -r -a datasets <<<"$(hypic_eval_datasets)"
  read -r -a modes <<<"$(hypic_eval_modes)"
  ((${#datasets[@]})) || hypic_die "STAGE=$1 needs DATASETS (e.g. DATASETS=\"hotpotqa gov_report\")"
  OUT=${OUT:?STAGE=$1 needs OUT, the folder shared by the three stages}
  hypic_job_banner "eval-$1"
  hypic_check_bin
  hypic_need_file MODEL "$MODEL"
  local task=${SLURM_ARRAY_TASK_ID:-0}
  case "$1" in
    prep)
      ((task < ${#datasets[@]})) || hypic_die "prep task $task: only ${#datasets[@]} datasets"
      local d=${datasets[$task]}
      hypic_eval_run "$d" "$OUT/$d/base" --modes full,pic --junction "$JUNCTION" \
        --store "$OUT/$d/store.h5"
      ;;
    mode)
      local n=${#modes[@]}
      ((task < ${#datasets[@]} * n)) || hypic_die "mode task $task: only ${#datasets[@]} x $n tasks"
      local d=${datasets[$((task / n))]} item=${modes[$((task % n))]}
      local mode=${item%%:*} junction=$JUNCTION folder=${item%%:*} store=$OUT/$d/store.h5
      if [[ "$item" == *:* ]]; then
        junction=${item#*:}
        folder=$mode-j$junction
      fi
      [[ "$junction" != "$JUNCTION" ]] && store=$OUT/$d/store.j$junction.h5
      hypic_eval_run "$d" "$OUT/$d/$folder" --modes "$mode" --junction "$junction" \
        --store "$store" --reference "$OUT/$d/base"
      ;;
    merge)
      local runs=() d item
      for d in "${datasets[@]}"; do
        runs+=("$OUT/$d/base")
        for item in "${modes[@]}"; do runs+=("$OUT/$d/${item/:/-j}"); done
      done
      "$HYPIC_BIN" eval-table "${runs[@]}" --out "$OUT/table.md"
      hypic_log "wrote $OUT/table.md (${#datasets[@]} datasets x $((2 + ${#modes[@]})) modes)"
      ;;
    *) hypic_die "STAGE must be prep, mode or merge, not '$1'" ;;
  esac
}
