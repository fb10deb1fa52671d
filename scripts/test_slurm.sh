#!/usr/bin/env bash
# Runs the Slurm job scripts for real on a single-node test cluster
# (docs/slurm.md): brings Slurm up with scripts/slurm_up.sh, submits each job
# with `sbatch --wait`, checks exit codes and outputs, and brings Slurm down on
# exit (only if this script brought it up). Builds nothing.
# Takes: at most HYPIC_TEST_BUDGET seconds (400).
#
#   bash scripts/test_slurm.sh                 # uses build/src/hypic
#   HYPIC_BIN=/path/to/hypic bash scripts/test_slurm.sh
#
# Checks, one PASS/FAIL line each:
#   mpi-launch  a 2-task job runs `srun --mpi=$HYPIC_SRUN_MPI -n 2 hypic info`
#               (`mpirun -n 2` with HYPIC_LAUNCHER=mpirun); both ranks must
#               report "2 rank(s)" (the MPI launch plugin works)
#   warmup      jobs/slurm/warmup.sbatch on a tiny corpus and tiny model: exit 0,
#               store exists, `hypic inspect --verify` passes, one entry per document
#   array       jobs/slurm/warmup-array.sbatch as a 3-task array: every task exits
#               0, every shard store exists and verifies
#   merge       jobs/slurm/warmup-merge.sbatch, dependent (afterok) on the array:
#               exit 0 (`hypic store merge` verifies every shard and merges them), and
#               the merged store verifies with one entry per document
#   eval        jobs/slurm/eval.sbatch with MODES="full pic pic:0": exit 0, and per
#               mode a predictions.jsonl with one line per query and a metrics.json;
#               the pic store still verifies afterwards
#   eval-array  jobs/slurm/eval-submit.sh on the dataset fixtures (tests/data/datasets,
#               hotpotqa and multi_news, 2 examples each): the prep array, the modes
#               array (afterok) and the merge job (afterok) all complete, and OUT/table.md
#               has the 5 rows (full, pic, prefix, pic-addition, pic W=0) of each dataset
#
# Environment:
#   HYPIC_BIN          hypic binary [build/src/hypic]
#   HYPIC_SRUN_MPI     srun MPI plugin [pmix]
#   HYPIC_LAUNCHER     srun | mpirun: how the jobs start ranks [srun]
#   HYPIC_TEST_WORK    work folder [a new /tmp/hypic-slurm-test.XXXXXX, removed on
#                      success, kept on failure]
#   HYPIC_TEST_BUDGET  seconds for the whole script [400]
#   HYPIC_TEST_COPY_BIN 1: run a private copy of HYPIC_BIN, safe against a
#                      rebuild of the shared build tree during the test [1]
#   CORPUS, QUERIES    use these instead of the generated tiny ones (QUERIES must
#                      name documents of CORPUS)
# Exit status: 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

T0=$(date +%s)
BUDGET=${HYPIC_TEST_BUDGET:-400}
HYPIC_BIN=${HYPIC_BIN:-$ROOT/build/src/hypic}
[[ "$HYPIC_BIN" == /* ]] || HYPIC_BIN=$ROOT/$HYPIC_BIN
export HYPIC_BIN
export HYPIC_SRUN_MPI=${HYPIC_SRUN_MPI:-pmix}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STATE=${HYPIC_SLURM_DIR:-/tmp/hypic-slurm}

STEP_NAME=test_slurm STEP_MARGIN=15
# shellcheck source=scripts/lib/steps.sh
source scripts/lib/steps.sh  # log, result, left, step_limit, on_exit, finish_work, summary
if [[ ! -x "$HYPIC_BIN" ]]; then
  log "FAIL: HYPIC_BIN '$HYPIC_BIN' is not an executable (build with scripts/build.sh)"
  exit 1
fi

WORK=${HYPIC_TEST_WORK:-$(mktemp -d /tmp/hypic-slurm-test.XXXXXX)}
mkdir -p "$WORK/logs" "$WORK/bin"
# Run a private copy: a shared build tree may relink the binary mid-test.
if [[ "${HYPIC_TEST_COPY_BIN:-1}" == 1 ]]; then
  cp "$HYPIC_BIN" "$WORK/bin/hypic" || { log "FAIL: cannot copy $HYPIC_BIN"; exit 1; }
  log "testing a copy of $HYPIC_BIN ($(stat -c '%y' "$HYPIC_BIN" | cut -d. -f1))"
  HYPIC_BIN=$WORK/bin/hypic
fi
RESULTS=()
FAILED=0
we_started=0
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$?
  if ((we_started)); then
    if ((FAILED)); then HYPIC_SLURM_KEEP=1 bash scripts/slurm_down.sh; else bash scripts/slurm_down.sh; fi
  else
    log "Slurm was already up before this test; leaving it up"
  fi
  finish_work "$rc"
}
on_exit cleanup
show_log() { # show_log FILE...: the tail of job logs, indented
  local f
  for f in "$@"; do
    [[ -f "$f" ]] || continue
    echo "    --- $f"
    tail -n 25 "$f" | sed 's/^/    /'
  done
}
# submit_wait NAME LIMIT SBATCH-ARGS...: sbatch --wait under a timeout; sets JOBID, RC.
# On timeout the job is cancelled and RC is 124.
submit_wait() {
  local name=$1 limit=$2
  shift 2
  local idf=$WORK/logs/$name.jobid
  timeout "$limit" sbatch --wait --parsable "$@" >"$idf" 2>"$WORK/logs/$name.sbatch.err"
  RC=$?
  JOBID=$(head -n1 "$idf" 2>/dev/null | cut -d';' -f1)
  if ((RC == 124)) && [[ -n "$JOBID" ]]; then
    scancel "$JOBID" 2>/dev/null
    log "$name: job $JOBID ran past ${limit}s; cancelled"
  fi
  [[ -s "$WORK/logs/$name.sbatch.err" ]] && sed 's/^/    sbatch: /' "$WORK/logs/$name.sbatch.err"
  # sbatch --wait exits 0 for a job cancelled before it started (e.g. an
  # afterok dependency that can never be met), so also require COMPLETED.
  JOBSTATE=$(scontrol show job "${JOBID:-none}" -o 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | head -n1 | cut -d= -f2)
  if ((RC == 0)) && [[ "$JOBSTATE" != COMPLETED ]]; then
    log "$name: sbatch exited 0 but job ${JOBID:-?} is ${JOBSTATE:-unknown}"
    RC=1
  fi
  return 0
}
verify_store() { # verify_store STORE -> prints the verify line; status 0 if it passes
  local out rc=0
  out=$("$HYPIC_BIN" inspect --store "$1" --verify 2>&1) || rc=$?
  VERIFY_OUT=$out
  VERIFY_ENTRIES=$(echo "$out" | awk '$1 == "entries" {print $2}')
  VERIFY_LINE=$(echo "$out" | grep '^verify' || echo "no verify line")
  ((rc == 0)) && echo "$out" | grep -q ' 0 damaged'
}

# ------------------------------------------------------------------ cluster
log "hypic: $HYPIC_BIN; work: $WORK; budget ${BUDGET}s"
"$HYPIC_BIN" --help 2>/dev/null | sed -n '/Subcommands:/,$p' | sed 's/^/    /'
if [[ -f "$STATE/pids" ]] && bash scripts/slurm_up.sh >/dev/null 2>&1; then
  log "Slurm already up"
else
  we_started=1
  if ! bash scripts/slurm_up.sh; then
    result slurm-up FAIL "scripts/slurm_up.sh failed"
    exit 1
  fi
fi
export SLURM_CONF=$STATE/slurm.conf
result slurm-up PASS "$(sinfo -h -o '%P %t %D node(s) %c cpus' | head -n1); mpi plugins: $(srun --mpi=list 2>&1 | grep -vi 'types are' | tr -d '\t' | tr '\n' ' ')"

# ------------------------------------------------------------------ inputs
MODEL=$WORK/model
if ! "$HYPIC_BIN" model init --arch qwen3_5 --preset tiny --seed 1 --out "$MODEL" >"$WORK/logs/model-init.log" 2>&1; then
  result inputs FAIL "hypic model init failed: $(tail -n1 "$WORK/logs/model-init.log")"
  exit 1
fi
if [[ -z "${CORPUS:-}" ]]; then
  CORPUS=$WORK/corpus.jsonl
  # 8 documents of 12..40 token ids in [1, 300) (the tiny preset's vocabulary is 512)
  awk 'BEGIN {
    for (d = 0; d < 8; d++) {
      n = 12 + 4 * d; s = "";
      for (j = 0; j < n; j++) s = s (j ? "," : "") (1 + (d * 37 + j * 11 + j * j) % 299);
      printf "{\"id\": \"doc%d\", \"tokens\": [%s]}\n", d, s;
    }
  }' >"$CORPUS"
fi
if [[ -z "${QUERIES:-}" ]]; then
  QUERIES=$WORK/queries.jsonl
  cat >"$QUERIES" <<'EOF'
{"id": "q0", "segments": ["doc0", "doc3", "doc5"], "question_tokens": [11, 12, 13, 14], "max_new_tokens": 4}
{"id": "q1", "segments": ["doc5", "doc0"], "question_tokens": [21, 22, 23], "max_new_tokens": 4}
{"id": "q2", "segments": ["doc7", "doc1", "doc2", "doc6"], "question_tokens": [31, 32], "max_new_tokens": 4}
EOF
fi
export MODEL CORPUS QUERIES
n_docs=$(awk 'END {print NR}' "$CORPUS")
n_queries=$(awk 'END {print NR}' "$QUERIES")
log "inputs: tiny model $MODEL, $n_docs documents, $n_queries queries"

# ------------------------------------------------------------ (a) MPI launch
LAUNCH2="srun --mpi=$HYPIC_SRUN_MPI -n 2"
[[ "${HYPIC_LAUNCHER:-srun}" == mpirun ]] && LAUNCH2="mpirun -n 2"
cat >"$WORK/mpi-launch.sbatch" <<EOF
#!/usr/bin/env bash
#SBATCH --job-name=hypic-mpi-launch
#SBATCH --ntasks=2
#SBATCH --time=00:02:00
$LAUNCH2 "$HYPIC_BIN" info
EOF
submit_wait mpi-launch "$(step_limit 60)" -o "$WORK/logs/mpi-launch.out" "$WORK/mpi-launch.sbatch"
n2=$(grep -c 'MPI .*2 rank(s)' "$WORK/logs/mpi-launch.out" 2>/dev/null)
if ((RC == 0)) && [[ "$n2" == 2 ]]; then
  result mpi-launch PASS "job $JOBID: $LAUNCH2 hypic info: both ranks report '$(grep -m1 -o 'Open MPI.*rank(s)' "$WORK/logs/mpi-launch.out")'"
else
  result mpi-launch FAIL "job ${JOBID:-?} exit $RC; ${n2:-0} of 2 ranks report '2 rank(s)'"
  show_log "$WORK/logs/mpi-launch.out"
fi

# ------------------------------------------------------------ (b) warm-up
WSTORE=$WORK/warm/store.h5
submit_wait warmup "$(step_limit 90)" --time=00:03:00 -o "$WORK/logs/warmup.out" \
  --export=ALL,STORE="$WSTORE" jobs/slurm/warmup.sbatch
if ((RC != 0)); then
  result warmup FAIL "job ${JOBID:-?} exit $RC"
  show_log "$WORK/logs/warmup.out"
elif [[ ! -f "$WSTORE" ]]; then
  result warmup FAIL "job $JOBID exit 0 but $WSTORE does not exist"
  show_log "$WORK/logs/warmup.out"
elif ! verify_store "$WSTORE"; then
  result warmup FAIL "job $JOBID exit 0, but inspect --verify failed: $VERIFY_LINE"
  echo "$VERIFY_OUT" | tail -n 12 | sed 's/^/    /'
elif [[ "$VERIFY_ENTRIES" != "$n_docs" ]]; then
  result warmup FAIL "job $JOBID: store has ${VERIFY_ENTRIES:-?} entries, corpus $n_docs documents"
else
  result warmup PASS "job $JOBID: $VERIFY_ENTRIES entries; $VERIFY_LINE"
fi

# ------------------------------------------------- (c) job array + merge job
ASTORE=$WORK/array/store.h5
ASHARDS=$WORK/array/shards
mkdir -p "$WORK/array"
# The array is submitted with --wait in the background (its exit code is the
# highest of its tasks), the merge job with afterok on it in the foreground.
limit=$(step_limit 120)
timeout "$limit" sbatch --wait --parsable --array=0-2 --time=00:03:00 \
  -o "$WORK/logs/array-%A_%a.out" --export=ALL,STORE="$ASTORE",SHARD_DIR="$ASHARDS" \
  jobs/slurm/warmup-array.sbatch >"$WORK/logs/array.jobid" 2>"$WORK/logs/array.sbatch.err" &
array_pid=$!
array_id=""
for _ in $(seq 100); do
  array_id=$(head -n1 "$WORK/logs/array.jobid" 2>/dev/null | cut -d';' -f1)
  [[ -n "$array_id" ]] && break
  kill -0 "$array_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$array_id" ]]; then
  wait "$array_pid"
  result array FAIL "sbatch did not submit: $(cat "$WORK/logs/array.sbatch.err")"
  result merge FAIL "not submitted (no array job)"
else
  submit_wait merge "$limit" --time=00:02:00 --kill-on-invalid-dep=yes \
    --dependency=afterok:"$array_id" -o "$WORK/logs/merge.out" \
    --export=ALL,STORE="$ASTORE",SHARD_DIR="$ASHARDS" jobs/slurm/warmup-merge.sbatch
  merge_rc=$RC merge_id=$JOBID
  wait "$array_pid"
  array_rc=$?
  ((array_rc == 124)) && scancel "$array_id" 2>/dev/null
  shard_ok=0 shard_msgs=()
  for ((i = 0; i < 3; i++)); do
    VERIFY_LINE="" VERIFY_ENTRIES=""
    s=$ASHARDS/$(printf 'shard-%03d-of-%03d' "$i" 3).h5
    if [[ -f "$s" ]] && verify_store "$s"; then
      shard_ok=$((shard_ok + 1))
      shard_msgs+=("shard $i: $VERIFY_ENTRIES entries")
    else
      shard_msgs+=("shard $i: ${VERIFY_LINE:-missing}")
    fi
  done
  if ((array_rc == 0 && shard_ok == 3)); then
    result array PASS "job $array_id (3 tasks): all exit 0; $(IFS=';'; echo "${shard_msgs[*]}") verified"
  else
    result array FAIL "job $array_id: exit $array_rc, $shard_ok of 3 shards verify ($(IFS=';'; echo "${shard_msgs[*]}"))"
    show_log "$WORK"/logs/array-*.out
  fi
  VERIFY_LINE="" VERIFY_ENTRIES=""
  if ((merge_rc == 0)) && [[ ! -f "$ASTORE" ]]; then
    result merge FAIL "job $merge_id exit 0 but the merged store $ASTORE does not exist"
    show_log "$WORK/logs/merge.out"
  elif ((merge_rc == 0)) && ! verify_store "$ASTORE"; then
    result merge FAIL "job $merge_id exit 0, but inspect --verify of $ASTORE failed: $VERIFY_LINE"
    echo "$VERIFY_OUT" | tail -n 12 | sed 's/^/    /'
  elif ((merge_rc == 0)) && [[ "$VERIFY_ENTRIES" != "$n_docs" ]]; then
    result merge FAIL "job $merge_id: merged store has ${VERIFY_ENTRIES:-?} entries, corpus $n_docs documents"
    show_log "$WORK/logs/merge.out"
  elif ((merge_rc == 0)); then
    result merge PASS "job $merge_id (afterok:$array_id) exit 0: $(grep -E '^store merge: [0-9]+ shard' "$WORK/logs/merge.out" | tr '\n' ' ')merged store: $VERIFY_ENTRIES entries; $VERIFY_LINE"
  else
    result merge FAIL "job ${merge_id:-?} (afterok:$array_id) exit $merge_rc, state ${JOBSTATE:-?}"
    show_log "$WORK/logs/merge.out"
  fi
fi

# ------------------------------------------------------------ (d) evaluation
EOUT=$WORK/eval
MODES_T="full pic pic:0"
submit_wait eval "$(step_limit 120)" --time=00:04:00 -o "$WORK/logs/eval.out" \
  --export=ALL,STORE="$WSTORE",OUT="$EOUT",MODES="$MODES_T" jobs/slurm/eval.sbatch
eval_msgs=() eval_bad=0
for item in $MODES_T; do
  folder=${item/:/-j}
  p=$EOUT/$folder/predictions.jsonl
  n=$(awk 'END {print NR}' "$p" 2>/dev/null || echo 0)
  if [[ -f "$p" && "$n" == "$n_queries" && -f "$EOUT/$folder/metrics.json" ]]; then
    eval_msgs+=("$folder: $n predictions")
  else
    eval_msgs+=("$folder: ${n:-0}/$n_queries predictions$([[ -f $EOUT/$folder/metrics.json ]] || echo ', no metrics.json')")
    eval_bad=1
  fi
done
if ((RC == 0 && eval_bad == 0)) && verify_store "$WSTORE"; then
  result eval PASS "job $JOBID exit 0; $(IFS=';'; echo "${eval_msgs[*]}"); store after serve: $VERIFY_LINE"
else
  result eval FAIL "job ${JOBID:-?} exit $RC; $(IFS=';'; echo "${eval_msgs[*]}"); store: ${VERIFY_LINE:-?}"
  show_log "$WORK/logs/eval.out"
fi

# ------------------------------------------------ (e) datasets x modes array
AOUT=$WORK/eval-array
ids=$(DATASETS="hotpotqa multi_news" DATA_DIR="$ROOT/tests/data/datasets" OUT="$AOUT" LIMIT=2 \
  MAX_NEW_TOKENS=2 HYPIC_ARGS="--byte-tokenizer" NTASKS=1 \
  bash jobs/slurm/eval-submit.sh --ntasks=1 --time=00:03:00 2>"$WORK/logs/eval-array.submit.err")
merge_id=$(echo "$ids" | sed -n 's/.*merge=\([0-9]*\).*/\1/p')
if [[ -z "$merge_id" ]]; then
  result eval-array FAIL "eval-submit.sh did not submit: $(cat "$WORK/logs/eval-array.submit.err")"
else
  end=$(($(date +%s) + $(step_limit 150)))
  JOBSTATE=""
  while (($(date +%s) < end)); do
    JOBSTATE=$(scontrol show job "$merge_id" -o 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | head -n1 | cut -d= -f2)
    case "$JOBSTATE" in COMPLETED | FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY | NODE_FAIL) break ;; esac
    sleep 1
  done
  rows=0
  for d in hotpotqa multi_news; do
    for m in "full" "pic (W=8)" "prefix" "pic-addition (W=8)" "pic (W=0)"; do
      grep -qF "| $d | $m |" "$AOUT/table.md" 2>/dev/null && rows=$((rows + 1))
    done
  done
  if [[ "$JOBSTATE" == COMPLETED && "$rows" == 10 ]]; then
    result eval-array PASS "$ids: merge COMPLETED, table.md has 10 of 10 dataset x mode rows"
  else
    # shellcheck disable=SC2046  # one argument per job id
    [[ "$JOBSTATE" == COMPLETED ]] || scancel $(echo "$ids" | grep -oE '[0-9]+') 2>/dev/null
    result eval-array FAIL "$ids: merge ${JOBSTATE:-unknown}, table.md has $rows of 10 rows"
    show_log "$AOUT"/logs/*.out
  fi
fi

# ------------------------------------------------------------------ summary
summary
