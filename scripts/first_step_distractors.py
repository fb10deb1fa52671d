#!/usr/bin/env python3
"""Does a model bind a relation to its subject? Prompts with K distractors each.

    python3 scripts/first_step_distractors.py DATA/synthqa_long_sub.jsonl OUT [--k 1,3,7,15]

From held-out questions that read one relation of one subject ("Who was the mentor of X?",
"Who founded C?", written by `train_tiny.py --task long --data-only --sub-questions`; "Which
company did X work at?", the `employer` kind of synthqa_long.jsonl; other questions are left
out), writes for each K two files of LongBench-format questions whose prompt is the answering
passage and K other passages of the same prompt, in their order:

- OUT/K<K>_same.jsonl: the K others state the same relation about other subjects
  (`Z studied under P.`, `D was founded by P.`, `Z worked at D.`): a model that reads the
  relation but not the subject answers about 1 in K + 1 of these;
- OUT/K<K>_other.jsonl: the K others do not state it (companies for a question about a
  person, persons for a founder question): only the answering passage has the relation.

and OUT/K0.jsonl, the answering passage alone. A question is left out of a file when its
prompt has fewer than K such passages (the counts are printed). Score each file with
`hypic eval --dataset synthqa_long --input FILE --modes full`. Standard library only.
"""
import argparse
import json
import pathlib
import random
import re

# question pattern (its subject the group) -> the sentence that answers it, after the subject
RELATION = {r"Who was the mentor of (.+)\?": "studied under ",
            r"Who founded (.+)\?": "was founded by ",
            r"Which company did (.+) work at\?": "worked at "}


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
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in open(args.held_out)]
    rng = random.Random(args.seed)
    files = {"K0.jsonl": []}
    for k in (int(x) for x in args.k.split(",")):
        files[f"K{k}_same.jsonl"] = []
        files[f"K{k}_other.jsonl"] = []
    skipped = 0
    for row in rows:
        match = [(re.fullmatch(q, row["input"]), r) for q, r in RELATION.items()]
        match = [(m.group(1), r) for m, r in match if m]
        if not match:
            skipped += 1
            continue
        subject, relation = match[0]
        ps = passages(row["context"])
        mine = [i for i, p in enumerate(ps) if p.split("\n")[0] == subject]
        if not mine:
            raise SystemExit(f"{row['_id']}: no passage titled {subject!r}")
        me = mine[0]
        # Titled passages only: a person's "Later years" note names nobody.
        titled = [i for i, p in enumerate(ps) if i != me and not p.startswith("Later years")]
        pools = {"same": [i for i in titled if relation in ps[i]],
                 "other": [i for i in titled if relation not in ps[i]]}

        def write(name, keep):
            ctx = "".join(f"Passage {j + 1}:\n{ps[i]}\n" for j, i in enumerate(sorted(keep)))
            files[name].append(dict(row, context=ctx, _id=f"{row['_id']}-{name[:-6]}"))

        write("K0.jsonl", [me])
        for name in files:
            m = re.fullmatch(r"K(\d+)_(same|other)\.jsonl", name)
            if m and len(pools[m.group(2)]) >= int(m.group(1)):
                write(name, rng.sample(pools[m.group(2)], int(m.group(1))) + [me])
    for name, items in files.items():
        with open(out / name, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in items)
        print(f"{out / name}: {len(items)} questions")
    print(f"{skipped} questions of other kinds left out")


if __name__ == "__main__":
    main()
