#!/usr/bin/env python3
"""Where the wrong answers to a chain's first step come from (train_tiny.py --sub-questions).
Takes: seconds.

    python3 scripts/train/first_step_errors.py DATA/synthqa_long_sub.jsonl RUN/full/synthqa_long.jsonl

The first file is the held-out set (`input`, `context`, `answers`), the second `hypic eval`'s
per-example output for it (`_id`, `pred`, `em`). Each wrong answer to "Who was the mentor of
X?" or "Who founded C?" is counted as one of: the person the same relation names for another
subject of the prompt (`Z studied under P.`, `D was founded by P.`), another name the prompt
has, or a name that is not in the prompt. Standard library only.
"""
import collections
import json
import sys

from synth_long import FIRST_STEP, QUESTIONS, STEP_WORDS, SUB_STEPS

# A first-step question's opening -> the relation its passage sentence states ("studied under ").
RELATION = {QUESTIONS[FIRST_STEP[kind]].split("{}")[0]: STEP_WORDS[kind].format("").strip() + " "
            for kind in SUB_STEPS}


def paired_rows(usage):
    """(held-out row, prediction row) for each line of the predictions file, from the two
    paths on the command line; one line and exit 1 for a prediction the set does not hold."""
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {usage} HELD_OUT.jsonl PREDICTIONS.jsonl")
    gold = {}
    with open(sys.argv[1]) as f:
        for line in f:
            row = json.loads(line)
            gold[row["_id"]] = row
    with open(sys.argv[2]) as f:
        for line in f:
            row = json.loads(line)
            g = gold.get(row["_id"])
            if g is None:
                raise SystemExit(f"{row['_id']} is not in {sys.argv[1]}")
            yield g, row


def main():
    counts = collections.Counter()
    for g, row in paired_rows("first_step_errors.py"):
        ask = next((a for a in RELATION if g["input"].startswith(a)), None)
        if ask is None:
            raise SystemExit(f"{row['_id']}: not a first-step question: {g['input']!r}")
        if row["em"] >= 1:
            counts["right"] += 1
            continue
        pred = row["pred"].strip()
        if pred and RELATION[ask] + pred in g["context"]:
            counts["wrong: the same relation, another subject"] += 1
        elif pred and pred in g["context"]:
            counts["wrong: another name in the prompt"] += 1
        else:
            counts["wrong: not in the prompt"] += 1
    total = sum(counts.values())
    for what, n in counts.most_common():
        print(f"{n:4d} / {total}  {what}")


if __name__ == "__main__":
    main()
