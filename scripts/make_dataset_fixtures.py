#!/usr/bin/env python3
"""Small dataset fixtures written for hypic (all passages are invented), in the formats
hypic reads: LongBench JSONL (hotpotqa, 2wikimqa, musique, multi_news, triviaqa, gov_report)
and original HotpotQA JSON.

Writes tests/data/datasets/* (fixtures, a malformed file, expected.json with the prompts
LongBench itself would build, from LongBench's prompt format written out independently
below) and the samples under inputs/datasets/.
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "data" / "datasets"
INPUTS = ROOT / "inputs" / "datasets"

QA_PROMPT = ("Answer the question based on the given passages. Only give me the answer and do "
             "not output any other words.\n\nThe following are given passages.\n{context}\n\n"
             "Answer the question based on the given passages. Only give me the answer and do "
             "not output any other words.\n\nQuestion: {input}\nAnswer:")
LONGBENCH_PROMPTS = {
    "hotpotqa": QA_PROMPT,
    "2wikimqa": QA_PROMPT,
    "musique": QA_PROMPT,
    "multi_news": ("You are given several news passages. Write a one-page summary of all news. "
                   "\n\nNews:\n{context}\n\nNow, write a one-page summary of all the news.\n\n"
                   "Summary:"),
    "gov_report": ("You are given a report by a government agency. Write a one-page summary of "
                   "the report.\n\nReport:\n{context}\n\nNow, write a one-page summary of the "
                   "report.\n\nSummary:"),
    "triviaqa": ("Answer the question based on the given passage. Only give me the answer and do "
                 "not output any other words. The following are some examples.\n\n{context}\n\n"
                 "{input}"),
}

# Invented encyclopedia: (title, text).
WIKI = {
    "Varnholm": "Varnholm is a harbour town on the island of Esker. It was founded in 1622 by "
                "salt traders and is known for its copper-roofed lighthouse.",
    "Esker Lighthouse": "The Esker Lighthouse stands at the mouth of Varnholm harbour. Its lamp "
                        "was designed by the engineer Ilse Maren in 1871.",
    "Ilse Maren": "Ilse Maren (1840–1912) was an engineer born in Tolvik. She also designed "
                  "the Tolvik swing bridge and taught at the Northern Polytechnic.",
    "Tolvik": "Tolvik is a river city on the Lenne, famous for its 1889 swing bridge and a "
              "winter market held every December.",
    "Northern Polytechnic": "The Northern Polytechnic is a technical university founded in 1850 "
                            "in Brask. Its motto is \"Measure twice\".",
    "Brask": "Brask is the capital of the Northern Province, with a population of about "
             "410,000. The city's café culture dates from the 1700s.",
    "Otto Fennel": "Otto Fennel (born 1961) is a composer whose opera \"The Salt Road\" premiered "
                   "in Varnholm in 1994.",
    "The Salt Road": "\"The Salt Road\" is an opera in three acts by Otto Fennel about the "
                     "founding of Varnholm. It runs for 2 hours 40 minutes.",
    "Kessa River": "The Kessa River rises in the Grey Hills and flows 212 km to the sea near "
                   "Brask.\nIts delta is a bird reserve.",
    "Grey Hills": "The Grey Hills are a low range whose highest point, Mount Orr, reaches "
                  "1,134 m. Tin was mined there until 1930.",
}


def passages_context(titles):
    return "".join("Passage %d:\n%s\n%s\n" % (i + 1, t, WIKI[t]) for i, t in enumerate(titles))[:-1]


QA_SETS = {
    "hotpotqa": [
        ("hp-001", "Who designed the lamp of the lighthouse in the town founded by salt traders?",
         ["Ilse Maren"], ["Varnholm", "Brask", "Esker Lighthouse", "Tolvik"]),
        ("hp-002", "In which city was the university where the Tolvik bridge's engineer taught?",
         ["Brask"], ["Ilse Maren", "Kessa River", "Northern Polytechnic", "Grey Hills"]),
        ("hp-003", "How long does the opera about Varnholm's founding run?",
         ["2 hours 40 minutes", "two hours forty minutes"],
         ["Otto Fennel", "The Salt Road", "Varnholm"]),
    ],
    "2wikimqa": [
        ("2w-001", "Which was founded first, Varnholm or the Northern Polytechnic?", ["Varnholm"],
         ["Northern Polytechnic", "Varnholm", "Brask"]),
        ("2w-002", "Where was the designer of the Esker Lighthouse lamp born?", ["Tolvik"],
         ["Esker Lighthouse", "Tolvik", "Ilse Maren"]),
    ],
    "musique": [
        ("mu-001", "How high is the highest point of the range where the Kessa River rises?",
         ["1,134 m", "1134 metres"], ["Grey Hills", "Kessa River", "Brask", "Tolvik"]),
        ("mu-002", "What is the motto of the university in the city at the Kessa's mouth?",
         ["Measure twice"], ["Kessa River", "Northern Polytechnic", "Otto Fennel"]),
    ],
}

NEWS = [
    ("Tolvik's swing bridge will close for six weeks from March while engineers replace its "
     "gears, the city council said on Monday.\n\nThe 1889 bridge carries 9,000 cyclists a day.",
     "A temporary ferry will run between the two banks of the Lenne during the closure, "
     "operators confirmed. Tickets will be free for residents.",
     "Business owners near the bridge worry about the winter market: \"December is half our "
     "year,\" one café owner said."),
    ("The Northern Polytechnic has opened a lab for tidal energy in Brask, funded by a "
     "12-million grant.",
     "Students will test turbines in the Kessa delta, though the bird reserve limits where "
     "machines may be placed."),
]
NEWS_SUMMARIES = [
    "Tolvik's 1889 swing bridge closes for six weeks from March for gear repairs; a free ferry "
    "for residents will cross the Lenne, and nearby businesses fear for the December market.",
    "A tidal-energy lab funded by a 12-million grant opens at the Northern Polytechnic in Brask, "
    "with turbine tests in the Kessa delta limited by its bird reserve.",
]

REPORT = "\n".join([
    "Harbour Safety Review, Esker District",
    "Summary of findings",
    "The review examined 14 incidents in Varnholm harbour between 2019 and 2023. Most "
    "involved small craft entering the harbour at night when the lighthouse was under repair.",
    "Recommendations",
    "1. Install a backup lamp on the north pier.",
    "2. Publish repair schedules to mariners at least 30 days in advance.",
    "3. Fund a second pilot boat; the current one is 38 years old.",
    "Costs",
    "The three measures together are estimated at 2.4 million over five years. " * 3,
    "Conclusion",
    "The district should adopt all three recommendations before the next winter season.",
])

TRIVIA_EXAMPLES = [
    ("Passage: The Esker Lighthouse stands at the mouth of Varnholm harbour.\n"
     "Question: Where does the Esker Lighthouse stand?\nAnswer: At the mouth of Varnholm harbour"),
    ("Passage: Mount Orr reaches 1,134 m.\nQuestion: How high is Mount Orr?\nAnswer: 1,134 m"),
    ("Passage: Brask is the capital of the Northern Province.\n"
     "Question: What is the capital of the Northern Province?\nAnswer: Brask"),
]


def longbench_row(_id, dataset, question, context, answers):
    return {"input": question, "context": context, "answers": answers,
            "length": len(context.split()), "dataset": dataset, "language": "en",
            "all_classes": None, "_id": _id}


def main():
    TESTS.mkdir(parents=True, exist_ok=True)
    INPUTS.mkdir(parents=True, exist_ok=True)
    files, expected = {}, {}

    for dataset, items in QA_SETS.items():
        rows = []
        for _id, q, answers, titles in items:
            ctx = passages_context(titles)
            rows.append(longbench_row(_id, dataset, q, ctx, answers))
            expected[_id] = {"segments": ["%s\n%s" % (t, WIKI[t]) for t in titles],
                             "prompt": LONGBENCH_PROMPTS[dataset].format(context=ctx, input=q)}
        files[dataset] = rows

    news_rows = []
    for i, (docs, summary) in enumerate(zip(NEWS, NEWS_SUMMARIES)):
        if i == 0:  # LongBench style: "Passage N:" markers
            ctx = "".join("Passage %d:\n%s\n" % (k + 1, d) for k, d in enumerate(docs))[:-1]
            exact = True
        else:  # original Multi-News separator
            ctx = " ||||| ".join(docs)
            exact = False
        _id = "mn-%03d" % (i + 1)
        news_rows.append(longbench_row(_id, "multi_news", "", ctx, [summary]))
        expected[_id] = {"segments": list(docs), "prompt_exact": exact,
                         "prompt": LONGBENCH_PROMPTS["multi_news"].format(context=ctx, input="")}
    files["multi_news"] = news_rows

    files["gov_report"] = [longbench_row("gr-001", "gov_report", "", REPORT,
                                         ["The review of 14 harbour incidents recommends a "
                                          "backup lamp, earlier repair notices and a second "
                                          "pilot boat, costing 2.4 million over five years."])]
    expected["gr-001"] = {"prompt": LONGBENCH_PROMPTS["gov_report"].format(context=REPORT,
                                                                           input=""),
                          "max_segment_bytes": 300}

    trivia_ctx = "\n\n".join(TRIVIA_EXAMPLES)
    trivia_q = ("Passage: Tin was mined in the Grey Hills until 1930.\n"
                "Question: Until when was tin mined in the Grey Hills?\nAnswer:")
    files["triviaqa"] = [longbench_row("tq-001", "triviaqa", trivia_q, trivia_ctx,
                                       ["1930", "until 1930"])]
    expected["tq-001"] = {"segments": [e + "\n" for e in TRIVIA_EXAMPLES[:-1]]
                          + [TRIVIA_EXAMPLES[-1]],
                          "prompt": LONGBENCH_PROMPTS["triviaqa"].format(context=trivia_ctx,
                                                                         input=trivia_q)}

    for dataset, rows in files.items():
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (TESTS / (dataset + ".jsonl")).write_text(text, encoding="utf-8")
        if dataset in ("hotpotqa", "multi_news", "gov_report", "triviaqa"):
            (INPUTS / (dataset + ".jsonl")).write_text(text, encoding="utf-8")

    # Original HotpotQA JSON (dev-set layout; the first sentence has no leading space).
    hotpot = [
        {"_id": "5a8b57f25542995d1e6f1371", "question": "Who designed the lamp of the Esker "
         "Lighthouse?", "answer": "Ilse Maren", "type": "bridge", "level": "easy",
         "supporting_facts": [["Esker Lighthouse", 1]],
         "context": [["Esker Lighthouse", ["The Esker Lighthouse stands at the mouth of "
                                           "Varnholm harbour.", " Its lamp was designed by the "
                                           "engineer Ilse Maren in 1871."]],
                     ["Tolvik", ["Tolvik is a river city on the Lenne.", " It holds a winter "
                                 "market every December."]]]},
        {"_id": "5a8c7595554299585d9e36b6", "question": "Is Brask older than the Northern "
         "Polytechnic?", "answer": "yes", "type": "comparison", "level": "medium",
         "supporting_facts": [["Brask", 1], ["Northern Polytechnic", 0]],
         "context": [["Northern Polytechnic", ["The Northern Polytechnic was founded in 1850."]],
                     ["Brask", ["Brask is the capital of the Northern Province.",
                                " Its café culture dates from the 1700s."]],
                     ["Grey Hills", ["The Grey Hills are a low range."]]]},
    ]
    text = json.dumps(hotpot, ensure_ascii=False, indent=1) + "\n"
    (TESTS / "hotpotqa_original.json").write_text(text, encoding="utf-8")
    (INPUTS / "hotpotqa_dev_sample.json").write_text(text, encoding="utf-8")
    expected["5a8b57f25542995d1e6f1371"] = {"segments": [
        "Esker Lighthouse\nThe Esker Lighthouse stands at the mouth of Varnholm harbour. Its "
        "lamp was designed by the engineer Ilse Maren in 1871.",
        "Tolvik\nTolvik is a river city on the Lenne. It holds a winter market every December."]}

    good = json.dumps(files["hotpotqa"][0], ensure_ascii=False)
    (TESTS / "malformed.jsonl").write_text("\n".join([
        good,
        "",
        '{"input": "cut off", "context": "Passage 1:\\nx", ',
        good.replace('"hp-001"', '"hp-001b"'),
        '{"input": "no context here", "answers": ["x"], "_id": "bad-2"}',
        '{"input": "answers wrong", "context": "c", "answers": [1, 2], "_id": "bad-3"}',
        good.replace('"hp-001"', '"hp-001c"'),
    ]) + "\n", encoding="utf-8")

    (TESTS / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1)
                                         + "\n", encoding="utf-8")
    print("wrote fixtures to %s and %s" % (TESTS.relative_to(ROOT), INPUTS.relative_to(ROOT)))


if __name__ == "__main__":
    main()
