#!/usr/bin/env python3
"""Golden values for hypic's answer metrics (tests/unit/metrics_test.cpp).
Takes: seconds (needs rouge-score).

Exact match and F1 use the official SQuAD v1.1 answer normalisation, written out below
from its definition (lower-case, drop string.punctuation, drop the words a/an/the, collapse
whitespace; F1 over the bag of tokens, 0 when nothing is shared). ROUGE-L comes from the
`rouge-score` package itself (rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)).

Writes tests/data/metrics/golden.json. Needs: pip install rouge-score
"""
import collections
import json
import pathlib
import re
import string

import rouge_score
from rouge_score import rouge_scorer

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "metrics" / "golden.json"


def normalize_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction, gold):
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction, gold):
    p = normalize_answer(prediction).split()
    g = normalize_answer(gold).split()
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = 1.0 * same / len(p)
    recall = 1.0 * same / len(g)
    return (2 * precision * recall) / (precision + recall)


# (prediction, gold answers): invented for this project, with the edge cases that matter.
CASES = [
    ("Paris", ["Paris"]),
    ("paris.", ["Paris"]),
    ("The Eiffel Tower", ["Eiffel Tower"]),
    ("an apple a day", ["apple day"]),
    ("A theory of the anagram", ["theory anagram"]),
    ("", ["Paris"]),
    ("", [""]),
    ("Paris", [""]),
    ("...!!!", ["Paris"]),
    ("...!!!", ["?"]),
    ("the the the", ["the"]),
    ("London London London", ["London"]),
    ("London", ["London London London"]),
    ("yes yes no", ["no yes"]),
    ("Marie Curie and Pierre Curie", ["Marie Curie", "Pierre Curie", "the Curies"]),
    ("It was 1,234 kilometres away.", ["1234 km", "1,234 kilometres"]),
    ("  lots\tof \n whitespace  ", ["lots of whitespace"]),
    ("Café au lait", ["café au lait"]),
    ("CAFÉ AU LAIT", ["Café au lait"]),
    ("cafe\u0301", ["café"]),
    ("Zoë Saldaña", ["Zoe Saldana"]),
    ("東京", ["東京"]),
    ("東京 tower", ["東京タワー"]),
    ("Straße", ["STRASSE"]),
    ("İstanbul", ["istanbul"]),
    ("ΟΔΟΣ", ["οδος"]),
    ("ΟΔΟΣ ΣΑΣ", ["οδός σας"]),
    ("\u212A\u212Bm", ["kåm"]),
    ("théa a thé", ["théa"]),
    ("aé an éa", ["a"]),
    ("rock’n’roll — “quoted”", ["rock n roll quoted"]),
    ("semi;colon,comma", ["semicolon comma"]),
    ("under_score", ["under score", "underscore"]),
    ("nbsp\u00a0here\u3000and\u2003there", ["nbsp here and there"]),
    ("control\x1fseparator", ["control separator"]),
    ("The answer is: Barack Obama, the 44th president.", ["Barack Obama"]),
    ("Obama", ["Barack Obama", "President Obama"]),
    ("New York City", ["New York", "NYC"]),
    ("a", ["a"]),
    ("an", ["the"]),
    ("the cat sat on the mat", ["the cat is on the mat"]),
    ("the cat sat on the mat the cat sat", ["cat mat"]),
    ("Police said on Tuesday that the bridge will reopen next week after repairs to its "
     "steel cables, which were damaged in a storm.",
     ["The bridge, damaged by a storm, reopens next week once its steel cables are "
      "repaired, police said Tuesday.",
      "Repairs to storm-damaged cables will keep the bridge closed until next week."]),
    ("Revenue rose 12% to $4.5bn in 2023; profit fell 3%.",
     ["In 2023 revenue rose 12 percent to 4.5 billion dollars while profit fell 3 percent."]),
    ("x " * 40, ["x y " * 30]),
]


def main():
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    cases = []
    for prediction, golds in CASES:
        rouge = [scorer.score(g, prediction)["rougeL"] for g in golds]
        cases.append({
            "prediction": prediction,
            "answers": golds,
            "normalized_prediction": normalize_answer(prediction),
            "rouge_tokens_prediction": rouge_score.tokenize.tokenize(prediction, None),
            "exact_match": max(exact_match(prediction, g) for g in golds),
            "f1": max(f1(prediction, g) for g in golds),
            "rouge_l": [{"precision": r.precision, "recall": r.recall, "fmeasure": r.fmeasure}
                        for r in rouge],
            "rouge_l_max": max(r.fmeasure for r in rouge),
        })
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"generator": "scripts/golden/make_metrics_golden.py", "cases": cases},
                              ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print("wrote %s (%d cases)" % (OUT.relative_to(ROOT), len(cases)))


if __name__ == "__main__":
    main()
