#!/usr/bin/env bash
# Runs every command of README.md's indented code blocks, as a user would after the two set-up
# commands, in a scratch copy of the repository's tracked files whose build/src/hypic is the
# binary under test. A block right after a line `<!-- readme-test: skip: REASON -->` is left
# out (the set-up commands themselves; a block that needs a Slurm cluster or a model of the
# user's); README's long commands carry a small --limit or count, so the whole run stays near
# a minute on 2 cores. Run by ctest as `readme_commands` (docs/testing.md).
#
#   bash tests/scripts/readme_commands.sh HYPIC_BINARY [--list]
#
# --list prints the blocks and whether each is run, and runs nothing.
set -euo pipefail
BINARY=$(readlink -f "$1")
LIST=${2:-}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
README=$SRC/README.md

# Extract the blocks: one file per block, and a list "N run|skip REASON".
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hypic-readme.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 - "$README" "$WORK" <<'PY'
import pathlib, re, sys
lines = pathlib.Path(sys.argv[1]).read_text().split("\n")
work = pathlib.Path(sys.argv[2])
blocks, fenced, skip, prev_blank, cur = [], False, None, True, None
for line in lines:
    if line.startswith("```"):
        fenced = not fenced
        continue
    if fenced:
        continue
    m = re.match(r"<!-- readme-test: skip: (.*) -->", line.strip())
    if m:
        skip = m.group(1)
        continue
    if line.startswith("    ") and (cur is not None or prev_blank):
        if cur is None:
            cur = {"skip": skip, "lines": []}
            blocks.append(cur)
            skip = None
        cur["lines"].append(line[4:])
    elif line.strip():
        cur = None
        skip = None if not line.startswith("<!--") else skip
    else:
        cur = None if cur is None or not line == "" else cur
    prev_blank = not line.strip()
with open(work / "blocks.txt", "w") as index:
    for i, b in enumerate(blocks):
        (work / f"block{i}.sh").write_text("\n".join(l for l in b["lines"] if l.strip()) + "\n")
        index.write(f"{i} {'skip ' + b['skip'] if b['skip'] else 'run'}\n")
PY

if [ "$LIST" = --list ]; then
  while read -r i what; do
    echo "== block $i: $what"
    sed 's/^/    /' "$WORK/block$i.sh"
  done <"$WORK/blocks.txt"
  exit 0
fi

# The scratch checkout: tracked files only (a fresh clone has nothing else), the binary linked.
REPO=$WORK/repo
mkdir -p "$REPO/build/src"
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$SRC" && git ls-files -z --cached | xargs -0 cp --parents -t "$REPO" 2>/dev/null || true)
else
  cp -r "$SRC/inputs" "$SRC/scripts" "$SRC/jobs" "$SRC/README.md" "$REPO/"
fi
ln -s "$BINARY" "$REPO/build/src/hypic"

ran=0
while read -r i what; do
  if [ "$what" != run ]; then
    echo "readme_commands: block $i skipped (${what#skip })"
    continue
  fi
  echo "readme_commands: block $i:"
  sed 's/^/  $ /' "$WORK/block$i.sh"
  # One shell for all blocks in order would leak a failed block's state; each block runs in
  # its own shell, with the environment README's earlier blocks export kept in env.sh.
  start=$(date +%s)
  if ! (cd "$REPO" && touch "$WORK/env.sh" && . "$WORK/env.sh" &&
    bash -euo pipefail -c "$(cat "$WORK/block$i.sh"); export -p > '$WORK/env.sh'") \
    </dev/null >"$WORK/out$i.txt" 2>&1; then
    echo "readme_commands: block $i failed; its output:" >&2
    tail -n 30 "$WORK/out$i.txt" >&2
    exit 1
  fi
  echo "  ok in $(($(date +%s) - start)) s"
  ran=$((ran + 1))
done <"$WORK/blocks.txt"
# stdin is the block list: a command that read it (mpirun does) would end the loop early.
expected=$(grep -c ' run$' "$WORK/blocks.txt" || true)
[ "$ran" -gt 0 ] && [ "$ran" -eq "$expected" ] || {
  echo "readme_commands: $ran of $expected README blocks ran" >&2
  exit 1
}
echo "readme_commands: $ran blocks ran"
