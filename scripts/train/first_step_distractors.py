#!/usr/bin/env python3
"""Does a model bind a relation to its subject? Prompts with K distractors each.
Takes: minutes (one hypic eval per K).

    python3 scripts/train/first_step_distractors.py DATA/synthqa_long_sub.jsonl OUT [--k 1,3,7,15]

From held-out questions that read one relation of one subject ("Who was the mentor of X?",
"Who founded C?", written by `train_tiny.py --task long --data-only --sub-questions`; "Which
company did X work at?", the `employer` kind of synthqa_long.jsonl; other questions are left
out), writes per relation (mentor, founder, employer) and K two files of LongBench-format
questions whose prompt is the answering passage and K other passages of the same prompt, in
their order:

- OUT/<relation>/K<K>_same.jsonl: the K others state the same relation about other subjects
  (`Z studied under P.`, `D was founded by P.`, `Z worked at D.`): a model that reads the
  relation but not the subject answers about 1 in K + 1 of these;
- OUT/<relation>/K<K>_other.jsonl: the K others do not state it (companies for a question
  about a person, persons for a founder question): only the answering passage has it;

and OUT/<relation>/K0.jsonl, the answering passage alone, and OUT/<relation>/whole.jsonl, the
questions as they were (the whole prompt). A question is left out of a file when its prompt
has fewer than K such passages (the counts are printed). Score each file with `hypic eval
--dataset synthqa_long --input FILE --modes full`: its EM is the table's cell. Standard
library only.
"""
import argparse
import collections
import json
import pathlib
import random
import re

# question pattern (its subject the group) -> (name, the words after the subject that answer it)
RELATION = {r"Who was the mentor of (.+)\?": ("mentor", "studied under "),
            r"Who founded (.+)\?": ("founder", "was founded by "),
            r"Which company did (.+) work at\?": ("employer", "worked at ")}


def passages(context):
    """The passages of a LongBench-format context ("Passage N:\\n" before each)."""
    return [p.rstrip("\n") for p in re.split(r"Passage \d+:\n", context)[1:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("held_out")
    ap.add_argument("out")
    ap.add_argument("--k", default="1,3,7,15", help="distractor counts, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.held_out)]
    rng = random.Random(args.seed)
    ks = [int(x) for x in args.k.split(",")]
    variants = [(k, sort) for k in ks for sort in ("same", "other")]
    files = collections.defaultdict(list)  # (relation name, file name) -> questions
    skipped = 0
    for row in rows:
        match = [(m.group(1), name, r) for q, (name, r) in RELATION.items()
                 if (m := re.fullmatch(q, row["input"]))]
        if not match:
            skipped += 1
            continue
        subject, name, relation = match[0]
        ps = passages(row["context"])
        mine = [i for i, p in enumerate(ps) if p.split("\n")[0] == subject]
        if not mine:
            raise SystemExit(f"{row['_id']}: no passage titled {subject!r}")
        me = mine[0]
        # Titled passages only: a person's "Later years" note names nobody.
        titled = [i for i, p in enumerate(ps) if i != me and not p.startswith("Later years")]
        pools = {"same": [i for i in titled if relation in ps[i]],
                 "other": [i for i in titled if relation not in ps[i]]}

        def write(stem, keep):
            ctx = "".join(f"Passage {j + 1}:\n{ps[i]}\n" for j, i in enumerate(sorted(keep)))
            files[name, stem].append(dict(row, context=ctx, _id=f"{row['_id']}-{stem}"))

        files[name, "whole"].append(row)
        write("K0", [me])
        for k, sort in variants:
            if len(pools[sort]) >= k:
                write(f"K{k}_{sort}", rng.sample(pools[sort], k) + [me])
    for (name, stem), items in sorted(files.items()):
        path = pathlib.Path(args.out) / name / f"{stem}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in items)
        print(f"{path}: {len(items)} questions")
    print(f"{skipped} questions of other kinds left out")


if __name__ == "__main__":
    main()
