#!/usr/bin/env python3
"""Writes the demo's corpus and query batch (inputs/corpus/): short invented passages about
fictional places, and queries that each draw several passages in shuffled order, as a RAG
prompt does. Deterministic (seeded); standard library only."""
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
rng = random.Random(2026)

towns = ["Arlen", "Brisk", "Calder", "Dunmore", "Elsby", "Fenwick", "Garrow", "Hollin",
         "Ivers", "Jessop", "Kelby", "Lorne", "Marrow", "Nettle", "Orrin", "Pellow",
         "Quarry", "Rushby", "Selwyn", "Tarn", "Ulver", "Vance", "Wrexley", "Yarrow"]
crafts = ["glass", "rope", "cheese", "clocks", "paper", "bells", "lanterns", "wool"]
rivers = ["the Amber", "the Slate", "the Willow", "the Crane", "the Moss", "the Pike"]

corpus = []
for i, town in enumerate(towns):
    craft, river = rng.choice(crafts), rng.choice(rivers)
    year, people = rng.randint(1200, 1890), rng.randint(800, 90000)
    text = (f"{town} is a town on {river}. It was founded in {year} and is known for its "
            f"{craft}. About {people} people live there, and its market opens every "
            f"{rng.choice(['Monday', 'Wednesday', 'Friday', 'Saturday'])}. "
            f"The old bridge of {town} was rebuilt after the flood of {year + rng.randint(20, 300)}.")
    corpus.append({"id": f"town-{i:02d}", "text": text, "craft": craft, "year": year})

queries = []
for q in range(8):
    picked = rng.sample(corpus, 6)
    target = rng.choice(picked)
    rng.shuffle(picked)
    queries.append({
        "id": f"q{q}",
        "prefix": "Answer the question using the passages below.\n",
        "segments": [p["id"] for p in picked],
        "question": f"\nQuestion: What is {target['text'].split()[0]} known for?\nAnswer:",
        "max_new_tokens": 8,
        "answers": [target["craft"]],
    })

out = ROOT / "inputs" / "corpus"
out.mkdir(parents=True, exist_ok=True)
with open(out / "towns.jsonl", "w") as f:
    for doc in corpus:
        f.write(json.dumps({"id": doc["id"], "text": doc["text"]}) + "\n")
with open(out / "queries.jsonl", "w") as f:
    for query in queries:
        f.write(json.dumps(query) + "\n")
print(f"wrote {len(corpus)} passages and {len(queries)} queries to {out}")
