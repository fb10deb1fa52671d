#!/usr/bin/env bash
# Interactive allocation for hypic: salloc, then either an interactive shell
# inside the allocation or one command run across its ranks.
#
#   bash jobs/slurm/interactive.sh                      # shell in a 2-task allocation
#   NTASKS=4 bash jobs/slurm/interactive.sh             # shell in a 4-task allocation
#   NTASKS=2 bash jobs/slurm/interactive.sh -- info     # srun --mpi=pmix -n 2 hypic info
#   bash jobs/slurm/interactive.sh -- chat --model M --store S   # a query session
#   bash jobs/slurm/interactive.sh -- serve --model M --queries Q --out O
#
# hypic chat, serve and eval use every task: rank 0 reads the commands (stdin goes
# to it) and composes, ranks 1 … NTASKS-1 compute cold segments as scatter workers.
# The default of 2 tasks gives one worker; answers do not depend on NTASKS.
#
# With no arguments: salloc -n NTASKS -t TIME, and in it an interactive shell
# (HYPIC_SHELL, default $SHELL) with HYPIC_BIN, MODEL, CORPUS, STORE, QUERIES,
# HYPIC_SRUN_MPI exported and a helper `hrun ARGS` = srun --mpi=$HYPIC_SRUN_MPI
# -n $NTASKS $HYPIC_BIN ARGS (or mpirun with HYPIC_LAUNCHER=mpirun). Leaving the
# shell releases the allocation.
# With "-- ARGS": runs `hypic ARGS` on NTASKS ranks in the allocation and exits
# with its status (salloc releases the allocation).
#
# Environment (defaults in brackets):
#   NTASKS      tasks (MPI ranks) to allocate: 1 composer + NTASKS-1 workers [2]
#   TIME        salloc --time [00:30:00]
#   PARTITION   salloc --partition [the cluster's default]
#   SALLOC_ARGS extra salloc arguments, e.g. "--cpus-per-task=2"
#   HYPIC_BIN, MODEL, CORPUS, QUERIES, STORE, JUNCTION   as in common.sh
#   HYPIC_LAUNCHER srun | mpirun [srun];  HYPIC_SRUN_MPI  srun MPI plugin [pmix]
#   HYPIC_SHELL shell to start [$SHELL, else bash]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NTASKS=${NTASKS:-2} # before common.sh, whose default is the allocation's (1 outside one)
# shellcheck source=jobs/slurm/common.sh
source "$HERE/common.sh"
TIME=${TIME:-00:30:00}

salloc_args=(-n "$NTASKS" -t "$TIME" -J hypic-interactive)
[[ -n "${PARTITION:-}" ]] && salloc_args+=(-p "$PARTITION")
# shellcheck disable=SC2206
salloc_args+=(${SALLOC_ARGS:-})
export HYPIC_ROOT HYPIC_BIN MODEL CORPUS QUERIES STORE JUNCTION NTASKS HYPIC_LAUNCHER HYPIC_SRUN_MPI

if [[ "${1:-}" == -- ]]; then
  shift
  (($#)) || hypic_die "nothing after '--': give hypic arguments, e.g. -- info"
  hypic_check_bin
  # salloc runs the command on the submit host with the allocation's
  # environment; hypic_launch starts the ranks inside it.
  # shellcheck disable=SC2016  # expanded by the inner bash
  exec salloc "${salloc_args[@]}" bash -c 'source "$1"; shift; hypic_launch "$@"' bash "$HERE/common.sh" "$@"
fi
(($# == 0)) || hypic_die "usage: $0 [-- HYPIC_ARGS...]"

rc=$(mktemp)
cat >"$rc" <<EOF
[[ -f ~/.bashrc ]] && source ~/.bashrc
source "$HERE/common.sh"
hrun() { hypic_launch "\$@"; }
PS1="[hypic \$SLURM_JOB_ID x\$SLURM_NTASKS] \\w\\\$ "
echo "hypic interactive allocation \$SLURM_JOB_ID (\$SLURM_NTASKS task(s)); try: hrun info; exit releases it"
EOF
shell=${HYPIC_SHELL:-${SHELL:-bash}}
status=0
if [[ "$(basename "$shell")" == bash ]]; then
  salloc "${salloc_args[@]}" "$shell" --rcfile "$rc" -i || status=$?
else
  salloc "${salloc_args[@]}" "$shell" || status=$?
fi
rm -f "$rc"
exit $status
