#!/usr/bin/env python3
"""Two runs' answers to one held-out set, question by question.
Takes: seconds.

    python3 scripts/train/compare_predictions.py HELD_OUT.jsonl A/full/SET.jsonl B/full/SET.jsonl

The first file is the held-out set (`_id`, and `kind` in the synthetic sets), the others
`hypic eval`'s per-example outputs of two runs on it (`_id`, `score`, and `em` on question
sets). Where there is `em`, prints each run's exact matches in all and per kind, the questions
B answers and A does not (gained) and the reverse (lost), and the sign test on those:
(gained - lost) / sqrt(gained + lost) standard deviations. Always prints both runs' mean
score (F1, or ROUGE-L on summaries; x100) and B - A with a 95 % bootstrap interval over the
examples (2000 resamples, fixed seed; `hypic eval` draws its own, so the last digit of its
interval may differ), then how many predictions differ, in how many of those B scores higher
or lower, and the median word at which they part. A and B may be two modes of one run (full,
pic) or two models. Both runs must cover the same examples. Standard library only.
"""
import collections
import json
import math
import random
import statistics
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
    if all("em" in a[q] and "em" in b[q] for q in a):
        exact_matches(gold, a, b)
    delta_interval(a, b)


def exact_matches(gold, a, b):
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


def delta_interval(a, b, resamples=2000, seed=20261206):
    ids = sorted(a)
    deltas = [100 * (b[q]["score"] - a[q]["score"]) for q in ids]
    n = len(deltas)
    rng = random.Random(seed)
    means = sorted(sum(deltas[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo, hi = means[int(0.025 * (resamples - 1))], means[int(0.975 * (resamples - 1))]
    mean_a = 100 * sum(a[q]["score"] for q in ids) / n
    mean_b = 100 * sum(b[q]["score"] for q in ids) / n
    print(f"\nmean score over {n}: A {mean_a:.2f}, B {mean_b:.2f}; "
          f"B - A {sum(deltas) / n:+.2f} [{lo:+.2f}, {hi:+.2f}] (95 % bootstrap)")
    parts = []  # the 1-based word at which two different predictions part
    for q in ids:
        wa, wb = a[q]["pred"].split(), b[q]["pred"].split()
        if wa != wb:
            parts.append(1 + next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y),
                                  min(len(wa), len(wb))))
    higher = sum(d > 0 for d in deltas)
    lower = sum(d < 0 for d in deltas)
    line = (f"predictions that differ: {len(parts)} of {n}; "
            f"B scores higher in {higher}, lower in {lower}")
    if parts:
        line += f"; they part at word {statistics.median(parts):g} (median)"
    print(line)


if __name__ == "__main__":
    main()
