#!/usr/bin/env python3
"""The bridge of two-step answers (train_tiny.py --answers other than final), per kind.
Takes: seconds.

    python3 scripts/train/chain_bridges.py DATA/synthqa_long.jsonl RUN/full/synthqa_long.jsonl

The first file is a held-out set written with `--answers chain`, `tail` or `asked`
(`answers` such as "Kora Vell, born in Dravo"), `sentences` ("Tam Oro studied under Kora
Vell. Kora Vell was born in Dravo.") or `evidence` ("Tam Oro studied under Kora Vell, born
in Dravo"), the second `hypic eval`'s per-example output for it (`_id`, `pred`, `em`). For
two_hop, mentor_born and founder_job it counts the answers whose bridge is the reference's,
the answers right in both steps, and where a wrong bridge comes from: an entity that heads a
passage of the prompt (a line of the context that is the name alone) or another name; then,
over the whole file, the answers whose fact is right whatever their bridge (the other kinds:
exact match), which is how answers of the fact alone are scored (per kind: "fact right").
The bridge is the text before the first ", " of the answer's first line (chain, tail,
asked), or what follows the step's relation ("studied under", "worked at", "was founded by")
in its first sentence (sentences, evidence; an answer without that sentence counts as
other). For those two styles, "subject wrong" counts the answers that do not begin with the
question's subject and the step's relation, as the reference does. For moved_to it counts
the wrong answers that name the town of another pronoun note of the prompt ("She moved to
Dravo in 1890."), and the chance level of naming any note's town (the mean of 1 / notes).
Standard library only.
"""
import collections
import re
import statistics

from first_step_errors import paired_rows
from synth_long import STEP_WORDS

KINDS = ("founder_job", "mentor_born", "two_hop")
# The first step's relation as its passage words it (" studied under ").
RELATION = {k: STEP_WORDS[k].format("") + " " for k in KINDS}


# The town of a pronoun note's move ("She moved to Dravo in 1890.").
NOTE_MOVE = re.compile(r"\b(?:He|She) moved to ([^.]+?) in \d+\.")
# The fact a two-step answer ends with: after "born in", "based in", ", a" or "worked as a".
FACT = re.compile(r"(?:born in|based in|, a|worked as a) ([^.,]+)\.?$")


def norm(text):
    return " ".join(text.lower().split())


def fact(text):
    """The last fact a two-step answer states ('' if none)."""
    m = FACT.search(text.strip().split("\n")[0].strip())
    return norm(m.group(1)) if m else ""


def bridge(text, kind, restates):
    """The bridge an answer names ('' where a restating answer lacks the step's sentence)."""
    line = text.strip().split("\n")[0]
    if not restates:
        return norm(line.split(", ")[0])
    first = line.split(". ")[0]
    if RELATION[kind] not in first:
        return ""
    return norm(first.split(RELATION[kind], 1)[1].rstrip("."))


def main():
    counts = collections.defaultdict(collections.Counter)
    moved, notes = collections.Counter(), []
    fact_right = total = 0
    for g, row in paired_rows("chain_bridges.py"):
        kind = g.get("kind")
        total += 1
        if kind == "moved_to":
            towns = [norm(t) for t in NOTE_MOVE.findall(g["context"])]
            moved["questions"] += 1
            moved["right"] += row["em"] >= 1
            moved["another note"] += row["em"] < 1 and norm(row["pred"].rstrip(". ")) in towns
            moved["chance"] += 1 / max(len(towns), 1)
            notes.append(len(towns))
        if kind not in KINDS:
            fact_right += row["em"] >= 1
            continue
        ref = g["answers"][0]
        restates = RELATION[kind] in ref
        if not restates and ", " not in ref:
            raise SystemExit(f"{row['_id']}: not a chain, sentences or evidence answer: {ref!r}")
        c = counts[kind]
        c["questions"] += 1
        c["both right"] += row["em"] >= 1
        c["fact right"] += fact(row["pred"]) == fact(ref)
        if restates:
            c["restating"] += 1
            subject = ref.split(RELATION[kind], 1)[0]
            c["subject wrong"] += not row["pred"].strip().startswith(subject + RELATION[kind])
        named = bridge(row["pred"], kind, restates)
        if named == bridge(ref, kind, restates):
            c["bridge right"] += 1
        elif named and named in {norm(t) for t in g["context"].split("\n")}:
            c["wrong: heads a passage"] += 1
        else:
            c["wrong: other"] += 1
    cols = ["questions", "bridge right", "both right", "wrong: heads a passage", "wrong: other",
            "fact right"]
    if any(c["restating"] for c in counts.values()):
        cols.append("subject wrong")
    print("| kind | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for kind in KINDS:
        if counts[kind]["questions"]:
            print(f"| {kind} | " + " | ".join(str(counts[kind][k]) for k in cols) + " |")
    if moved["questions"]:
        n = moved["questions"]
        print(f"\nmoved_to: {moved['right']} / {n} right; {moved['another note']} of the "
              f"{n - moved['right']} wrong name the town of another pronoun note; any note's "
              f"town is right in {100 * moved['chance'] / n:.1f} % on average (chance; "
              f"{statistics.median(notes):g} notes per prompt at the median)")
    fact_right += sum(c["fact right"] for c in counts.values())
    print(f"\nthe fact right, whatever the bridge (exact match as if the answers were the fact "
          f"alone): {fact_right} / {total} ({100 * fact_right / max(total, 1):.1f} %)")


if __name__ == "__main__":
    main()
