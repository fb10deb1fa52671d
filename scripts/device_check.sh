#!/usr/bin/env bash
# The GPU check (issues #14 and #45), for a fresh machine with one GPU, ~16 cores and the CUDA
# toolkit, made to diagnose in one run of at most 420 s, build included:
#   configure a dedicated build folder for this GPU's architecture (nvidia-smi's compute_cap,
#   else 90) and build only hypic and hypic_unit_tests; the roofline of a cold 32k-token prefill
#   of the Qwen3.5-35B-A3B shape on this GPU (`hypic bench roofline`); the op harness on cuda;
#   the real-shape op cases against the host (head dims 128/256/576, dk = dv = 128, 32 value
#   heads, 256 experts top-8, 4096 tokens); every architecture's forward against the host (max
#   logit difference and first-token KL, one row each); `bench forward` at 4096 tokens with
#   achieved TFLOP/s against this GPU's bf16 peak and the cuBLAS bf16 GEMM rate of the same run;
#   the cold 32k prefill beside its roofline; `bench ttft` (prefix vs pic, 16 x 512 tokens);
#   the golden, cache-contract and PIC tests on cuda; compute-sanitizer memcheck and racecheck
#   over the op harness at small shapes. Correctness steps run with HYPIC_CUDA_SYNC_DEBUG=1
#   (synchronise and check after every launch: a fault is named where it happens).
#
# Every row is appended to REPORT/device_check.md as it finishes, with the last 40 lines of the
# step's log in REPORT/tails/STEP.txt, so a run killed at any point still returns a diagnosis
# (REPORT/running.txt names the step that was running). Each step runs under `timeout` with
# its own bound; the bounds add up to at most DEVICE_CHECK_BUDGET (420) seconds, and a global
# deadline skips later steps ("skipped: out of time") instead of running past it. Bench rows fail
# on non-finite figures or logits; the targets of issue #45 are read off their last column.
# Exit status 0 only when every step passed; no visible GPU fails at once.
#
# Usage: scripts/device_check.sh [--dry-run] [REPORT]
#   REPORT  the report folder (default: $OUT when set, else build-device)
#   --dry-run (or DEVICE_CHECK_DRY_RUN=1): no GPU needed; every GPU step is echoed instead of
#           run (rows "DRY"), the roofline runs for real when a hypic binary is there: checks the
#           orchestration (rows, tails, bounds, deadline) on any machine.
# Environment: DEVICE_CHECK_BUILD [build-device-check] the build folder; DEVICE_CHECK_BUDGET
#   [420] seconds in all; DEVICE_CHECK_PEAK_TFLOPS and DEVICE_CHECK_BANDWIDTH_GBS override the
#   GPU table (hypic bench roofline --gpu; docs/gpu.md); DEVICE_CHECK_HYPIC a hypic binary to use
#   instead of the build's; DEVICE_CHECK_DRY_SLEEP [0] seconds each echoed step sleeps;
#   HYPIC_DEVICE_KIT the library archive of scripts/device-kit/device_kit.sh (docs/testing.md);
#   DEVICE_CHECK_MPI=1 also builds hypic_mpi_tests and runs rank invariance on the GPU (and the
#   NCCL entry path with two GPUs), which the 420 s leave out by default.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

DRY=${DEVICE_CHECK_DRY_RUN:-0}
REPORT=
while (($#)); do
  case $1 in
    --dry-run) DRY=1 ;;
    -h | --help)
      sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "device_check: unknown option $1 (see --help)" >&2
      exit 2
      ;;
    *)
      if [[ -n $REPORT ]]; then
        echo "device_check: one report folder only (got $REPORT and $1)" >&2
        exit 2
      fi
      REPORT=$1
      ;;
  esac
  shift
done
REPORT=${REPORT:-${OUT:-build-device}}
BUILD=${DEVICE_CHECK_BUILD:-build-device-check}
BUDGET=${DEVICE_CHECK_BUDGET:-420}
if ! [[ $BUDGET =~ ^[0-9]+$ ]]; then
  echo "device_check: DEVICE_CHECK_BUDGET must be a whole number of seconds, not '$BUDGET'" >&2
  exit 2
fi
JOBS=$(nproc)
T0=$(date +%s)
DEADLINE=$((T0 + BUDGET))
GRACE=3     # timeout's --kill-after, reserved out of each step's bound
MIN_STEP=5  # a step is not started with less time than this left
MD=$REPORT/device_check.md
TAILS=$REPORT/tails
LOGS=$BUILD/device_check_logs
mkdir -p "$REPORT" "$TAILS" "$LOGS" || exit 1
rm -f "$TAILS"/*.txt "$REPORT/running.txt"

failed=0
n_pass=0
n_fail=0
n_skip=0
dry() { [[ $DRY == 1 ]]; }

{
  echo "# device_check $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $JOBS cores, budget $BUDGET s$(dry && echo ', DRY RUN: GPU steps echoed, not run')"
  echo
  echo "| step | result | sec | figures | target |"
  echo "|---|---|---|---|---|"
} >"$MD"

# row STEP RESULT SECONDS FIGURES [TARGET]: one table row, appended now (and echoed).
row() {
  local cells=()
  for c in "$@"; do cells+=("${c//|//}"); done
  printf '| %s | %s | %s | %s | %s |\n' "${cells[0]}" "${cells[1]}" "${cells[2]}" "${cells[3]}" \
    "${cells[4]:-}" >>"$MD"
  printf 'device_check: %-36s %-8s %4ss  %s  %s\n' "$1" "$2" "$3" "$4" "${5:-}"
  case $2 in
    PASS | DRY) n_pass=$((n_pass + 1)) ;;
    SKIP*)
      n_skip=$((n_skip + 1))
      [[ $4 == "skipped: out of time"* ]] && failed=1
      ;;
    *)
      n_fail=$((n_fail + 1))
      failed=1
      ;;
  esac
}

summary() {
  local total=$(($(date +%s) - T0))
  row "total" "$( ((failed)) && echo FAIL || echo PASS)" "$total" \
    "$n_pass passed, $n_fail failed, $n_skip skipped; budget $BUDGET s" ""
  {
    echo
    echo "exit status $failed; logs in $LOGS on the machine that ran it, their last 40 lines in $TAILS"
  } >>"$MD"
  rm -f "$REPORT/running.txt"
}

CUR=
# A run stopped from outside (the device tool's limit, Ctrl-C) still leaves its rows, the
# running step's tail and a summary.
# shellcheck disable=SC2317  # called through the trap
on_signal() {
  if [[ -n $CUR ]]; then
    [[ -n ${STEP_PID:-} ]] && kill -TERM "$STEP_PID" 2>/dev/null
    tail -n 40 "$LOGS/$CUR.log" >"$TAILS/$CUR.txt" 2>/dev/null
    row "$CUR" KILLED "$(($(date +%s) - STEP_T0))" "the check itself was stopped during this step" ""
  fi
  summary
  exit 1
}
trap on_signal TERM INT HUP

# step NAME BOUND CMD...: runs CMD with its log in $LOGS/NAME.log under min(BOUND, time left),
# copies the log's last 40 lines to $TAILS/NAME.txt; sets RC (124: past its bound, 125: not
# started, out of time), SECS and LIMIT. In a dry run CMD is echoed (STEP_REAL=1: run anyway).
step() {
  local name=$1 bound=$2
  shift 2
  local now left
  now=$(date +%s)
  left=$((DEADLINE - now - GRACE))
  SECS=0
  if ((left < MIN_STEP)); then
    RC=125
    LIMIT=0
    echo "skipped: out of time ($((DEADLINE - now)) s of $BUDGET s left)" >"$LOGS/$name.log"
    tail -n 40 "$LOGS/$name.log" >"$TAILS/$name.txt"
    return
  fi
  LIMIT=$((bound < left ? bound : left))
  CUR=$name
  STEP_T0=$now
  echo "$name started $(date -u +%T), bound ${LIMIT} s" >"$REPORT/running.txt"
  local cmd=("$@")
  if dry && [[ ${STEP_REAL:-0} != 1 ]]; then
    # shellcheck disable=SC2016  # expanded by the inner shell
    cmd=(bash -c 'echo "dry run: $*"; sleep "${DEVICE_CHECK_DRY_SLEEP:-0}"' _ "$@")
  fi
  timeout --kill-after="$GRACE" "$LIMIT" "${cmd[@]}" >"$LOGS/$name.log" 2>&1 &
  STEP_PID=$!
  wait "$STEP_PID" # a trapped signal interrupts `wait`; on_signal stops the step
  RC=$?
  STEP_PID=
  SECS=$(($(date +%s) - now))
  if ((RC == 124 || RC == 137)); then
    RC=124
    echo "device_check: $name ran past its bound of $LIMIT s and was stopped" >>"$LOGS/$name.log"
  fi
  tail -n 40 "$LOGS/$name.log" >"$TAILS/$name.txt"
  CUR=
}

# verdict OK: the row's result from RC and whether the step's own check passed (0/1).
verdict() {
  if ((RC == 125)); then
    echo SKIP
  elif ((RC == 124)); then
    echo TIMEOUT
  elif dry && [[ ${STEP_REAL:-0} != 1 ]]; then
    echo DRY
  elif [[ $1 == 1 ]]; then
    echo PASS
  else
    echo FAIL
  fi
}
# The figures cell for a step that did not run or ran out of time, else $1.
figure_or_why() {
  if dry && [[ ${STEP_REAL:-0} != 1 ]] && ((RC != 125 && RC != 124)); then
    echo "dry run: the command is in tails/$CUR_NAME.txt"
  elif ((RC == 125)); then
    echo "skipped: out of time"
  elif ((RC == 124)); then
    echo "stopped at its bound of $LIMIT s; see tails/$CUR_NAME.txt"
  else
    echo "$1"
  fi
}

# gtest's summary: "<passed> passed, <skipped> skipped, <failed> failed".
gtest_counts() {
  local f=$1 p s x
  p=$(grep -Eo '\[  PASSED  \] [0-9]+' "$f" | grep -Eo '[0-9]+$' | tail -1)
  s=$(grep -Eo '\[  SKIPPED \] [0-9]+ test' "$f" | grep -Eo '[0-9]+' | tail -1)
  x=$(grep -Eo '\[  FAILED  \] [0-9]+ test' "$f" | grep -Eo '[0-9]+' | tail -1)
  echo "${p:-0} passed, ${s:-0} skipped, ${x:-0} failed"
}
# A gtest step: passes when it exits 0, ran something, and nothing failed (or was skipped,
# unless $4 = allow-skips). Names the failed tests in the row.
gtest_row() {
  local label=$1 name=$2 log=$LOGS/$2.log allow=${3:-}
  local counts ok=0 failed_names
  CUR_NAME=$name
  counts=$(gtest_counts "$log")
  if [[ $RC -eq 0 && $counts != "0 passed"* && $counts == *", 0 failed" ]] &&
    [[ $allow == allow-skips || $counts == *" 0 skipped,"* ]]; then ok=1; fi
  failed_names=$(grep -Eo '^\[  FAILED  \] [^ ,]+' "$log" | awk '{print $4}' | sort -u | head -5 |
    paste -sd' ')
  local fig
  fig=$(figure_or_why "$counts${failed_names:+; failed: $failed_names}")
  ((RC == 124)) && fig+="; $(gtest_progress "$log")"
  row "$label" "$(verdict $ok)" "$SECS" "$fig"
}
# Where a gtest run stopped at its bound was: tests passed so far and the one running.
gtest_progress() {
  echo "$(grep -c '^\[       OK \]' "$1") passed before, running: $(grep '^\[ RUN      \]' "$1" | tail -1 | awk '{print $4}')"
}

# The figures are read with Python's standard library; the system's interpreter when there is
# one (a pyenv shim in PATH can take half a second per call).
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
# A JSON figure by dotted key, or "" (python3's json: NaN/inf written as such are caught by
# `finite`).
json_get() {
  "$PY" - "$1" "$2" <<'PY' 2>/dev/null
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    for k in sys.argv[2].split("."):
        v = v[k]
    print(v if not isinstance(v, bool) else ("true" if v else "false"))
except Exception:
    pass
PY
}
# finite X...: every argument a finite positive number.
finite() {
  "$PY" - "$@" <<'PY' 2>/dev/null
import math, sys
try:
    sys.exit(0 if all(math.isfinite(float(x)) and float(x) > 0 for x in sys.argv[1:]) else 1)
except ValueError:
    sys.exit(1)
PY
}
calc() { "$PY" -c "print(format($1, '$2'))" 2>/dev/null; }

# ---- 0. The GPU, its architecture and peak ----
if dry; then
  GPU_NAME="dry run (no GPU)"
  CC=90
  GPU_KEY=h100
else
  if ! command -v nvidia-smi >/dev/null || [[ $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') -lt 1 ]]; then
    row "GPU visible" FAIL 0 "nvidia-smi -L lists no GPU: this check needs one (--dry-run checks the script alone)"
    summary
    echo "device_check: FAIL: no GPU visible (nvidia-smi -L lists none); rows in $MD" >&2
    exit 1
  fi
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
  [[ $CC =~ ^[0-9]+$ ]] || CC=90
  # The GPU's row of hypic's table (model/roofline.cpp: dense bf16 TFLOP/s, GB/s).
  case $GPU_NAME in
    *H100*PCIe*) GPU_KEY=h100-pcie ;;
    *H100*NVL*) GPU_KEY=h100-nvl ;;
    *H100*) GPU_KEY=h100 ;;
    *H200*) GPU_KEY=h200 ;;
    *H20*) GPU_KEY=h20 ;;
    *A100*) GPU_KEY=a100 ;;
    *) GPU_KEY= ;;
  esac
fi
peak_args=()
[[ -n $GPU_KEY ]] && peak_args+=(--gpu "$GPU_KEY")
[[ -n ${DEVICE_CHECK_PEAK_TFLOPS:-} ]] && peak_args+=(--peak-tflops "$DEVICE_CHECK_PEAK_TFLOPS")
[[ -n ${DEVICE_CHECK_BANDWIDTH_GBS:-} ]] && peak_args+=(--bandwidth-gbs "$DEVICE_CHECK_BANDWIDTH_GBS")
row "GPU visible" "$(dry && echo DRY || echo PASS)" 0 \
  "$GPU_NAME, sm_$CC, peak table: ${GPU_KEY:-none (set DEVICE_CHECK_PEAK_TFLOPS and DEVICE_CHECK_BANDWIDTH_GBS)}"

# ---- 0b. A machine without hypic's libraries: unpack scripts/device-kit/device_kit.sh's archive ----
KIT=${HYPIC_DEVICE_KIT:-.devkit/hypic-device-kit.tar.xz}
if ! dry && { ! command -v mpicc >/dev/null || [[ ! -e /usr/include/trilinos/KokkosCore_config.h ]]; }; then
  if [[ ! -f $KIT ]]; then
    row "libraries" FAIL 0 "Open MPI (mpicc) or Kokkos missing and no $KIT: make it with scripts/device-kit/device_kit.sh and carry .devkit"
    summary
    exit 1
  fi
  step unpack 30 bash scripts/device-kit/device_kit_unpack.sh "$KIT"
  CUR_NAME=unpack
  ok=0
  [[ $RC -eq 0 ]] && command -v mpicc >/dev/null && ok=1
  row "unpack $(basename "$KIT")" "$(verdict $ok)" "$SECS" "$(figure_or_why "libraries added where missing")"
  ((ok)) || {
    summary
    exit 1
  }
fi
# Open MPI looks for ssh or rsh even for a singleton; a machine without either points it
# elsewhere (never used locally).
if ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
  export OMPI_MCA_plm_rsh_agent=false
fi
# NCCL: the toolkit's, else the nvidia-nccl Python package's.
nccl_args=()
if [[ ! -e /usr/local/cuda/include/nccl.h && ! -e /usr/include/nccl.h ]]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [[ -n $nccl_dir && -e $nccl_dir/include/nccl.h ]]; then
    nccl_lib=$(find "$nccl_dir/lib" -maxdepth 1 -name 'libnccl.so*' | sort | head -1)
    nccl_args=(-DHYPIC_NCCL_INCLUDE="$nccl_dir/include" -DHYPIC_NCCL_LIB="$nccl_lib")
  fi
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)

# ---- 1. Configure and build for this GPU only, the targets the check runs ----
targets=(hypic hypic_unit_tests)
[[ ${DEVICE_CHECK_MPI:-0} == 1 ]] && targets+=(hypic_mpi_tests)
# shellcheck disable=SC2086  # HYPIC_CMAKE_ARGS holds several flags
step configure 20 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHYPIC_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$CC" "${nccl_args[@]}" "${launcher[@]}" ${HYPIC_CMAKE_ARGS:-}
CUR_NAME=configure
row "configure (sm_$CC)" "$(verdict $((RC == 0)))" "$SECS" "$(figure_or_why "CUDA on, $BUILD")"
if ((RC == 0)); then
  step build 160 cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
  CUR_NAME=build
  ok=$((RC == 0))
  err=$(grep -m1 -E 'error|Error [0-9]' "$LOGS/build.log" | cut -c1-160)
  row "build ${targets[*]}" "$(verdict $ok)" "$SECS" \
    "$(figure_or_why "$JOBS jobs${err:+; first error: $err}")"
else
  row "build ${targets[*]}" SKIP 0 "not started: the configure step failed"
fi
HYPIC=${DEVICE_CHECK_HYPIC:-$BUILD/src/hypic}
TESTS=$BUILD/tests/hypic_unit_tests
if ! dry && [[ ! -x $TESTS || ! -x $HYPIC ]]; then
  row "binaries" FAIL 0 "no $HYPIC or $TESTS after the build: nothing more can run"
  summary
  exit 1
fi
SYNC=(env HYPIC_CUDA_SYNC_DEBUG=1)

# ---- 2. The roofline of the cold 32k prefill on this GPU (host arithmetic, runs in a dry run) ----
CONFIG=tests/data/configs/qwen3.5-35b-a3b.json
PEAK_TFLOPS=
ROOF_S=
if [[ ${#peak_args[@]} -gt 0 ]]; then
  STEP_REAL=$([[ -x $HYPIC ]] && echo 1 || echo 0)
  step roofline 5 "$HYPIC" bench roofline --config "$CONFIG" --tokens 32768 "${peak_args[@]}" \
    --json "$REPORT/roofline_32k.json"
  CUR_NAME=roofline
  PEAK_TFLOPS=$(json_get "$REPORT/roofline_32k.json" peak_tflops)
  ROOF_S=$(json_get "$REPORT/roofline_32k.json" roofline_seconds)
  classes=$("$PY" - "$REPORT/roofline_32k.json" <<'PY' 2>/dev/null
import json, sys
j = json.load(open(sys.argv[1]))
print(", ".join("%s %.3f s (%s)" % (c["name"], c["seconds"], c["bound"]) for c in j["classes"] if c["seconds"] > 0))
PY
)
  ok=0
  finite "${ROOF_S:-x}" "${PEAK_TFLOPS:-x}" && ok=1
  row "roofline 32k cold prefill (35B-A3B)" "$(verdict $ok)" "$SECS" \
    "$(figure_or_why "$(calc "${ROOF_S:-0}" .3f) s at $(calc "${PEAK_TFLOPS:-0}" g) TFLOP/s, $(calc "$(json_get "$REPORT/roofline_32k.json" bandwidth_gbs)" g) GB/s: $classes")"
  STEP_REAL=0
else
  row "roofline 32k cold prefill (35B-A3B)" FAIL 0 \
    "GPU '$GPU_NAME' not in the table: set DEVICE_CHECK_PEAK_TFLOPS and DEVICE_CHECK_BANDWIDTH_GBS"
fi

# ---- 3. The op harness on cuda, the bf16 GEMM and the existing device forward tests ----
step op_harness 20 "${SYNC[@]}" "$TESTS" \
  --gtest_filter='Backends/BackendOps.*/cuda:BackendOpsDtype.*:CudaBackend.*:DeviceForward.*'
gtest_row "op harness + device forward" op_harness

# ---- 4. Real shapes against the host ----
step real_shapes 35 "${SYNC[@]}" HYPIC_REAL_SHAPES=1 "$TESTS" \
  --gtest_filter='RealShapes/DeviceVsHost.*/cuda'
gtest_row "real-shape ops vs host (4096 tokens)" real_shapes
grep -E '^real-shape ' "$LOGS/real_shapes.log" >"$REPORT/real_shapes.txt" 2>/dev/null
if [[ -s $REPORT/real_shapes.txt ]]; then
  worst=$(awk -F'max rel err ' 'NF > 1 {split($2, a, " "); if (a[1] + 0 >= w + 0) {w = a[1]; l = $1}} END {if (l != "") {sub(/: *$/, "", l); print l ": " w}}' "$REPORT/real_shapes.txt")
  echo "(every case's error: real_shapes.txt; the worst: ${worst:-?})" >>"$MD"
fi

# ---- 5. Every architecture's forward on the device against the host ----
ARCHS=(qwen3_5 qwen3_next qwen3_5_moe kimi_linear bailing_moe_linear minimax)
step arch_forward 20 "${SYNC[@]}" "$TESTS" --gtest_filter='Archs/DeviceForwardVsHost.*_cuda'
CUR_NAME=arch_forward
for arch in "${ARCHS[@]}"; do
  log=$LOGS/arch_forward.log
  line=$(grep -m1 "^device-vs-host $arch on cuda:" "$log" | cut -d: -f2- | sed 's/^ //')
  test_name="Archs/DeviceForwardVsHost.LogitsAndFirstTokenKl/${arch}_cuda"
  if ((RC == 125)); then
    res=SKIP fig="skipped: out of time"
  elif dry; then
    res=DRY fig="dry run"
  elif grep -q "^\[       OK \] $test_name " "$log"; then
    res=PASS fig=$line
  elif grep -q "^\[  FAILED  \] $test_name " "$log"; then
    res=FAIL fig="${line:-failed before its figures}; see tails/arch_forward.txt"
  elif grep -q "^\[  SKIPPED \] $test_name" "$log" || grep -q "^\[  SKIPPED \]" "$log"; then
    res=FAIL fig="skipped: $(grep -m1 -A1 "^\[ RUN      \] $test_name" "$log" | tail -1 | cut -c1-120)"
  elif ((RC == 124)); then
    res=TIMEOUT fig="not reached within the step's bound of $LIMIT s"
  else
    res=FAIL fig="no result (crash?); see tails/arch_forward.txt"
  fi
  row "forward vs host: $arch" "$res" "$SECS" "$fig" "max dlogit <= 1e-2 rel., KL <= 1e-4"
done

# ---- 6. bench forward on the device: the bench preset at 4096 tokens ----
MODEL=$BUILD/device_check_model
step model_init 5 "$HYPIC" model init --arch qwen3_5 --preset bench --seed 1 --out "$MODEL"
if ((RC != 0)); then  # a row only when it failed: bench forward needs it
  CUR_NAME=model_init
  row "model init (bench preset)" "$(verdict 0)" "$SECS" "$(figure_or_why "exit status $RC")"
fi
J=$LOGS/bench_forward.json
rm -f "$J"
step bench_forward 25 "$HYPIC" bench forward --model "$MODEL" --tokens 4096 --reps 2 \
  --device cuda --json "$J"
CUR_NAME=bench_forward
cp "$J" "$REPORT/" 2>/dev/null
sec=$(json_get "$J" prefill_seconds_median)
gf=$(json_get "$J" achieved_gflops)
bf=$(json_get "$J" bf16_gemm_gflops)
ok=0
[[ $RC -eq 0 && $(json_get "$J" device) == cuda && $(json_get "$J" logits_finite) == true ]] &&
  finite "$sec" "$gf" "$bf" && ok=1
fig="prefill $(calc "${sec:-0}" .4f) s, $(calc "${gf:-0}/1e3" .1f) TFLOP/s"
[[ -n $PEAK_TFLOPS ]] && fig+=" = $(calc "100*${gf:-0}/1e3/$PEAK_TFLOPS" .1f) % of the $(calc "$PEAK_TFLOPS" g) TFLOP/s bf16 peak"
fig+="; cuBLAS bf16 GEMM $(calc "${bf:-0}/1e3" .1f) TFLOP/s ($(calc "100*${bf:-0}/1e3/${PEAK_TFLOPS:-1e9}" .0f) % of peak); logits finite: $(json_get "$J" logits_finite)"
target=
if ((ok)); then
  pct=$(calc "100*$gf/$bf" .1f)
  target="prefill = $pct % of cuBLAS bf16 GEMM (target >= 40 %): $(calc "$gf/$bf >= 0.4" '' | sed 's/True/met/;s/False/missed/')"
fi
row "bench forward (bench preset, 4096)" "$(verdict $ok)" "$SECS" "$(figure_or_why "$fig")" "$target"

# ---- 7. The cold 32k-token prefill of the Qwen3.5-35B-A3B shape beside its roofline ----
# Random weights, 4 of its 40 layers (3 Gated DeltaNet + 1 attention, its pattern), scaled to 40.
J=$LOGS/cold_32k.json
rm -f "$J"
step cold_32k 45 "$HYPIC" bench forward --config "$CONFIG" --layers 4 --tokens 32768 --reps 1 \
  --device cuda --json "$J"
CUR_NAME=cold_32k
cp "$J" "$REPORT/" 2>/dev/null
sec=$(json_get "$J" prefill_seconds_scaled_to_config)
ok=0
[[ $RC -eq 0 && $(json_get "$J" device) == cuda && $(json_get "$J" logits_finite) == true ]] &&
  finite "$sec" && ok=1
target=
if ((ok)) && finite "${ROOF_S:-x}"; then
  target="$(calc "$sec/$ROOF_S" .2f) x roofline (target <= 2x): $(calc "$sec <= 2*$ROOF_S" '' | sed 's/True/met/;s/False/missed/')"
fi
row "cold 32k prefill (35B-A3B, 4/40 layers)" "$(verdict $ok)" "$SECS" \
  "$(figure_or_why "measured $(calc "${sec:-0}" .3f) s scaled to 40 layers; roofline $(calc "${ROOF_S:-0}" .3f) s (row above); reference 2.83 s on one H20")" \
  "$target"

# ---- 8. bench ttft on the device: prefix vs pic with a warm store, 16 x 512-token segments ----
J=$LOGS/bench_ttft.json
rm -f "$J"
step bench_ttft 15 "$HYPIC" bench ttft --preset small --segments 16 --segment-tokens 512 \
  --queries 4 --modes prefix,pic --device cuda --json "$J"
CUR_NAME=bench_ttft
cp "$J" "$REPORT/" 2>/dev/null
ratio=$(json_get "$J" ratio_prefix_over_pic_p50)
ok=0
[[ $RC -eq 0 && $(json_get "$J" device) == cuda ]] && finite "$ratio" && ok=1
target=
((ok)) && target="prefix/pic ${ratio} x (target >= 5x): $(calc "$ratio >= 5" '' | sed 's/True/met/;s/False/missed/')"
row "bench ttft (16 x 512)" "$(verdict $ok)" "$SECS" "$(figure_or_why "p50 ratio prefix/pic ${ratio:-?}")" "$target"

# ---- 9. Golden logits, the cache contract and the PIC tests on the CUDA backend ----
# Exact products (HYPIC_CUDA_GEMM=f32): the golden logits' tolerance (1e-4) is f32's; the
# tensor-core mode is checked against the host by the op harness, the real shapes and forward
# vs host steps above.
step golden_pic 15 "${SYNC[@]}" HYPIC_CUDA_GEMM=f32 HYPIC_TEST_DEVICE=cuda "$TESTS" \
  --gtest_filter='Models/Golden.*:*CacheContract*:GoldenData.*:PicEngine.*:PicModes.*:Models/PicModesPerArch.*:DevicePlumbing.*:RingLinear.*:DeviceEntries.*'
gtest_row "golden + cache contract + PIC (cuda)" golden_pic allow-skips

# ---- 10. compute-sanitizer over the op harness at small shapes ----
SAN=$(command -v compute-sanitizer || ls "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" 2>/dev/null || true)
SMALL='Backends/BackendOps.*/cuda:BackendOpsDtype.CudaGemmBf16:RealShapes/DeviceVsHost.*/cuda'
RACY='Backends/BackendOps.Attention*/cuda:Backends/BackendOps.Family*/cuda:Backends/BackendOps.Moe*/cuda:Backends/BackendOps.*Norm*/cuda:RealShapes/DeviceVsHost.Attention*/cuda'
for tool in memcheck racecheck; do
  if [[ -z $SAN ]] && ! dry; then
    row "compute-sanitizer $tool (small shapes)" FAIL 0 "compute-sanitizer not found (PATH, \$CUDA_HOME/bin)"
    continue
  fi
  if [[ $tool == memcheck ]]; then
    step memcheck 25 "${SYNC[@]}" "${SAN:-compute-sanitizer}" --tool memcheck --error-exitcode 86 \
      --print-limit 20 "$TESTS" --gtest_filter="$SMALL"
  else
    step racecheck 20 "${SYNC[@]}" "${SAN:-compute-sanitizer}" --tool racecheck \
      --racecheck-report hazard --error-exitcode 86 --print-limit 20 "$TESTS" --gtest_filter="$RACY"
  fi
  CUR_NAME=$tool
  log=$LOGS/$tool.log
  san=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1 | sed 's/^=* *//')
  counts=$(gtest_counts "$log")
  ok=0
  [[ $RC -eq 0 && $counts == *", 0 failed" && $counts != "0 passed"* ]] &&
    [[ $san == *" 0 errors"* || $san == *"(0 errors"* ]] && ok=1
  row "compute-sanitizer $tool (small shapes)" "$(verdict $ok)" "$SECS" \
    "$(figure_or_why "${san:-no sanitizer summary}; tests: $counts$( ((RC == 86)) && echo '; the sanitizer found errors')")$( ((RC == 124)) && echo "; $(gtest_progress "$log")")"
done

# ---- 11. Opt-in (DEVICE_CHECK_MPI=1; the 420 s budget leaves it out by default): rank
# invariance with 3 ranks on this GPU (entries through host memory and MPI), and the NCCL entry
# path when two or more GPUs are visible (one GPU cannot host two NCCL ranks).
if [[ ${DEVICE_CHECK_MPI:-0} != 1 ]]; then
  row "rank invariance, NCCL entries" "SKIP" 0 "not run: DEVICE_CHECK_MPI=1 adds them"
elif ! command -v mpirun >/dev/null && ! dry; then
  row "rank invariance (3 ranks)" FAIL 0 "mpirun not found"
else
  step mpi 30 env HYPIC_TEST_DEVICE=cuda OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -n 3 --oversubscribe "$BUILD/tests/hypic_mpi_tests" --gtest_filter='Distributed.*:ClusterWorld.*'
  gtest_row "rank invariance (3 ranks)" mpi allow-skips
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if [[ $NGPU -ge 2 ]]; then
    SMALL=$BUILD/device_check_small
    Q=$LOGS/nccl_queries.jsonl
    head -n 6 inputs/corpus/synthqa_queries.jsonl >"$Q"
    step nccl_model 10 "$HYPIC" model init --arch qwen3_5 --preset small --seed 1 --out "$SMALL"
    step nccl_one 40 "$HYPIC" serve --byte-tokenizer --model "$SMALL" \
      --corpus inputs/corpus/synthqa.jsonl --queries "$Q" --mode pic --device cuda --out "$LOGS/nccl_one"
    t_one=$SECS
    step nccl_two 60 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -n 2 --oversubscribe "$HYPIC" serve --byte-tokenizer --model "$SMALL" \
      --corpus inputs/corpus/synthqa.jsonl --queries "$Q" --mode pic --device cuda --ranks 2 \
      --out "$LOGS/nccl_two"
    CUR_NAME=nccl_two
    ok=0
    if [[ $RC -eq 0 ]] && grep -q '^entries: nccl' "$LOGS/nccl_two.log" &&
      python3 - "$LOGS/nccl_one/predictions.jsonl" "$LOGS/nccl_two/predictions.jsonl" <<'PY'; then
import json, sys
a, b = ([json.loads(l)["answer_tokens"] for l in open(p)] for p in sys.argv[1:3])
sys.exit(0 if a == b and a else 1)
PY
      ok=1
    fi
    row "NCCL entries (2 ranks)" "$(verdict $ok)" "$((t_one + SECS))" \
      "$(figure_or_why "entries: nccl and answers = 1 rank's? see tails/nccl_two.txt")"
  else
    row "NCCL entries (2 ranks)" SKIP 0 "needs two GPUs ($NGPU visible): one GPU cannot host two NCCL ranks"
  fi
fi

summary
exit $failed
