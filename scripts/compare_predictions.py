#!/usr/bin/env python3
"""Two runs' answers to one held-out set, question by question.

    python3 scripts/compare_predictions.py HELD_OUT.jsonl A/full/SET.jsonl B/full/SET.jsonl

The first file is the held-out set (`_id`, and `kind` in the synthetic sets), the others
`hypic eval`'s per-example outputs of two runs on it (`_id`, `em`). Prints each run's exact
matches in all and per kind, the questions B answers and A does not (gained) and the reverse
(lost), and the sign test on those: (gained - lost) / sqrt(gained + lost) standard
deviations. Both runs must cover the same questions. Standard library only.
"""
import collections
import json
import math
import sys


def read(path):
    with open(path) as f:
        return {row["_id"]: row for row in map(json.loads, f)}


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: compare_predictions.py HELD_OUT.jsonl A.jsonl B.jsonl")
    gold, a, b = (read(p) for p in sys.argv[1:])
    if set(a) != set(b):
        raise SystemExit(f"{sys.argv[2]} and {sys.argv[3]} answer different questions")
    missing = set(a) - set(gold)
    if missing:
        raise SystemExit(f"{sorted(missing)[0]} is not in {sys.argv[1]}")
    kinds = collections.defaultdict(lambda: [0, 0, 0])
    gained = lost = 0
    for qid in a:
        right_a, right_b = a[qid]["em"] > 0, b[qid]["em"] > 0
        tally = kinds[gold[qid].get("kind", "-")]
        tally[0] += right_a
        tally[1] += right_b
        tally[2] += 1
        gained += right_b and not right_a
        lost += right_a and not right_b
    print("| kind | questions | A | B |\n|---|---:|---:|---:|")
    for kind, (na, nb, n) in sorted(kinds.items()):
        print(f"| {kind} | {n} | {na} | {nb} |")
    total = [sum(t[i] for t in kinds.values()) for i in range(3)]
    print(f"| all | {total[2]} | {total[0]} ({100 * total[0] / total[2]:.1f} %) | "
          f"{total[1]} ({100 * total[1] / total[2]:.1f} %) |")
    z = (gained - lost) / math.sqrt(gained + lost) if gained + lost else 0.0
    print(f"\nB against A: {gained} gained, {lost} lost; sign test {z:+.2f} standard deviations")


if __name__ == "__main__":
    main()
