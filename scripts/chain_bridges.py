#!/usr/bin/env python3
"""The bridge of chain answers (train_tiny.py --answers chain), per two-passage kind.

    python3 scripts/chain_bridges.py DATA/synthqa_long.jsonl RUN/full/synthqa_long.jsonl

The first file is a held-out set written with `--answers chain` (`answers` such as
"Kora Vell, born in Dravo"), the second `hypic eval`'s per-example output for it (`_id`,
`pred`, `em`). For two_hop, mentor_born and founder_job it counts the answers whose bridge
(the text before the first ", " of the answer's first line) is the reference's, the answers
right in both steps, and where a wrong bridge comes from: an entity that heads a passage of
the prompt (a line of the context that is the name alone) or another name. Standard library
only.
"""
import collections

from first_step_errors import paired_rows

KINDS = ("founder_job", "mentor_born", "two_hop")


def norm(text):
    return " ".join(text.lower().split())


def main():
    counts = collections.defaultdict(collections.Counter)
    for g, row in paired_rows("chain_bridges.py"):
        kind = g.get("kind")
        if kind not in KINDS:
            continue
        if ", " not in g["answers"][0]:
            raise SystemExit(f"{row['_id']}: not a chain answer: {g['answers'][0]!r}")
        c = counts[kind]
        c["questions"] += 1
        c["both right"] += row["em"] >= 1
        bridge = norm(row["pred"].strip().split("\n")[0].split(", ")[0])
        if bridge == norm(g["answers"][0].split(", ")[0]):
            c["bridge right"] += 1
        elif bridge in {norm(t) for t in g["context"].split("\n")}:
            c["wrong: heads a passage"] += 1
        else:
            c["wrong: other"] += 1
    cols = ["questions", "bridge right", "both right", "wrong: heads a passage", "wrong: other"]
    print("| kind | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for kind in KINDS:
        if counts[kind]["questions"]:
            print(f"| {kind} | " + " | ".join(str(counts[kind][k]) for k in cols) + " |")


if __name__ == "__main__":
    main()
