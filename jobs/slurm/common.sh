# shellcheck shell=bash
# Shared by the hypic Slurm job scripts (sourced, not run). Sets the defaults of
# the documented environment variables and defines the launch helpers.
#
# Variables (each job script's header lists the ones it uses):
#   HYPIC_ROOT      repository root (default: found from the submitted script's
#                   path, else $SLURM_SUBMIT_DIR)
#   HYPIC_BIN       hypic binary (default $HYPIC_ROOT/build/src/hypic)
#   MODEL           model folder (default $HYPIC_ROOT/inputs/models/qwen3_5-synthqa)
#   CORPUS          corpus JSONL {"id", "text" | "tokens"} (default $HYPIC_ROOT/inputs/corpus/synthqa.jsonl)
#   QUERIES         queries JSONL (default $HYPIC_ROOT/inputs/corpus/synthqa_queries.jsonl)
#   STORE           segment store (default $HYPIC_ROOT/outputs/store/warmup.h5)
#   JUNCTION        junction window, tokens or a share in (0,1] (default 8)
#   NTASKS          MPI ranks per hypic run (default $SLURM_NTASKS, else 1)
#   THREADS         threads per rank for kernels and BLAS (default $SLURM_CPUS_PER_TASK, i.e.
#                   sbatch -c N / --cpus-per-task, else 1): srun --cpus-per-task and hypic --threads
#   HYPIC_LAUNCHER  srun (default) | mpirun: how ranks start inside the allocation
#   HYPIC_SRUN_MPI  srun MPI plugin (default pmix; see docs/slurm.md for pmi2)
#   HYPIC_ARGS      extra arguments appended to the hypic subcommand

hypic_die() { echo "hypic-job: ERROR: $*" >&2; exit 2; }
hypic_log() { echo "hypic-job: $*"; }

HYPIC_ROOT=${HYPIC_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
HYPIC_BIN=${HYPIC_BIN:-$HYPIC_ROOT/build/src/hypic}
MODEL=${MODEL:-$HYPIC_ROOT/inputs/models/qwen3_5-synthqa}
CORPUS=${CORPUS:-$HYPIC_ROOT/inputs/corpus/synthqa.jsonl}
QUERIES=${QUERIES:-$HYPIC_ROOT/inputs/corpus/synthqa_queries.jsonl}
STORE=${STORE:-$HYPIC_ROOT/outputs/store/warmup.h5}
JUNCTION=${JUNCTION:-8}
NTASKS=${NTASKS:-${SLURM_NTASKS:-1}}
THREADS=${THREADS:-${SLURM_CPUS_PER_TASK:-1}}
HYPIC_LAUNCHER=${HYPIC_LAUNCHER:-srun}
HYPIC_SRUN_MPI=${HYPIC_SRUN_MPI:-pmix}
HYPIC_ARGS=${HYPIC_ARGS:-}
# Open MPI refuses to start as root unless told; test clusters often run as root.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

hypic_need_file() { # hypic_need_file WHAT PATH
  [[ -e "$2" ]] || hypic_die "$1 '$2' does not exist (set ${1} to override)"
}

hypic_check_bin() {
  [[ -x "$HYPIC_BIN" ]] || hypic_die "HYPIC_BIN '$HYPIC_BIN' is not an executable; build with scripts/build.sh or set HYPIC_BIN"
}

# hypic_has_option SUBCOMMAND OPTION: the binary's SUBCOMMAND accepts OPTION.
hypic_has_option() {
  "$HYPIC_BIN" "$1" --help 2>/dev/null | grep -qE -- "(^|[ ,])$2([ =,]|$)"
}

# hypic_rank_args SUBCOMMAND: the rank-count arguments for a run of NTASKS ranks.
# Until `hypic SUBCOMMAND` distributes work across ranks (it then takes
# --ranks N, docs/cluster.md), N ranks would each do the whole job alone, so
# refuse NTASKS > 1 loudly instead of writing one store N times over.
hypic_rank_args() {
  if hypic_has_option "$1" --ranks; then
    echo "--ranks $NTASKS"
  elif ((NTASKS > 1)); then
    hypic_die "NTASKS=$NTASKS but this 'hypic $1' runs single-process (no --ranks option yet); use NTASKS=1"
  fi
}

# hypic_launch ARGS...: start NTASKS ranks of "$HYPIC_BIN" ARGS inside the allocation.
hypic_launch() {
  case "$HYPIC_LAUNCHER" in
    srun)
      hypic_log "+ srun --mpi=$HYPIC_SRUN_MPI -n $NTASKS -c $THREADS $HYPIC_BIN --threads $THREADS $*"
      srun --mpi="$HYPIC_SRUN_MPI" -n "$NTASKS" --cpus-per-task="$THREADS" --kill-on-bad-exit=1 \
        "$HYPIC_BIN" --threads "$THREADS" "$@"
      ;;
    mpirun)
      hypic_log "+ mpirun -n $NTASKS $HYPIC_BIN --threads $THREADS $*"
      mpirun -n "$NTASKS" "$HYPIC_BIN" --threads "$THREADS" "$@"
      ;;
    *) hypic_die "HYPIC_LAUNCHER must be srun or mpirun, not '$HYPIC_LAUNCHER'" ;;
  esac
}

hypic_job_banner() { # hypic_job_banner NAME: what runs where, for the job log
  hypic_log "$1: job ${SLURM_JOB_ID:-none}${SLURM_ARRAY_TASK_ID:+ (array task $SLURM_ARRAY_TASK_ID)} on ${SLURMD_NODENAME:-$(hostname)}, $(date -Is)"
  hypic_log "  HYPIC_BIN=$HYPIC_BIN NTASKS=$NTASKS THREADS=$THREADS HYPIC_LAUNCHER=$HYPIC_LAUNCHER HYPIC_SRUN_MPI=$HYPIC_SRUN_MPI"
}
