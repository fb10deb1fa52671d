#!/usr/bin/env python3
"""Does a model read a chain's first step when its answer restates the step's subject?
Takes: minutes (needs torch and transformers).

    python3 scripts/train/forced_first_step.py MODEL DATA/synthqa_long.jsonl [--per-kind N]

DATA is a held-out set of `train_tiny.py --task long --data-only` in any `--answers` style
but final (the bridge entity must be in the answer). For the first N questions of each of
two_hop, mentor_born and founder_job it runs the model (transformers, float32, one thread)
over three prompts built as `hypic eval` builds them (templates.json's synthqa_long) and
checks whether the most likely next token is the bridge's first token:
- as held out: the question as held out in any of synth_long's wordings (the compound
  question, `--answers tail` or `asked`), the answer not begun, where answers of the
  styles chain, tail and asked begin with the bridge;
- restated: the question as held out, its answer begun with the first step's sentence up to
  the bridge ("Answer: X studied under"), as `--answers sentences|evidence` teach;
- asked alone: the same prompt asking the first step on its own ("Who was the mentor of
  X?", "Who founded C?", "Which company did X work at?").
The counts tell whether a model that finds the step when asked for it also finds it inside
the held-out question, or when the answer restates the step (the model's README, "answers
that restate the first step" and "questions that end with the first step"). Needs torch
and transformers.
"""
import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "train"))
import synth_long as sl  # noqa: E402

# The question that asks each kind's first step on its own.
ALONE = {k: sl.QUESTIONS[step] for k, step in sl.FIRST_STEP.items()}


def _pattern(wording):
    return "^" + re.escape(wording).replace(re.escape("{}"), "([^,]+)") + "$"


# The question's subject, per kind, read back from each of synth_long's wordings (the
# compound question, the style "tail"'s, and the style "asked"'s).
SUBJECT = {k: [_pattern(wording[k]) for wording in
               (sl.QUESTIONS, sl.TAIL_QUESTIONS, sl.ASKED_QUESTIONS)] for k in ALONE}


def bridge_of(answer, kind):
    """The bridge entity of a chain, sentences or evidence answer."""
    step = sl.STEP_WORDS[kind].format("").strip() + " "
    if step in answer:
        answer = answer.split(step, 1)[1]
    return re.split(r"[.,]", answer, maxsplit=1)[0].strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--per-kind", type=int, default=20)
    args = ap.parse_args()
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    t = json.loads((ROOT / "inputs/datasets/templates.json").read_text())["synthqa_long"]
    tok = Tokenizer.from_file(str(pathlib.Path(args.model) / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()

    def next_token(text):
        ids = tok.encode(text, add_special_tokens=False).ids
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, -1].argmax().item()

    rows = [json.loads(line) for line in open(args.data)]
    print("| kind | questions | as held out: bridge first | restated: bridge next | "
          "asked alone: bridge next |")
    print("|---|---:|---:|---:|---:|")
    for kind, patterns in SUBJECT.items():
        chosen = [r for r in rows if r.get("kind") == kind][:args.per_kind]
        right = [0, 0, 0]
        for r in chosen:
            m = next((m for m in (re.match(p, r["input"]) for p in patterns) if m), None)
            if m is None:
                raise SystemExit(f"{r['_id']}: not a {kind} question: {r['input']!r}")
            subject, bridge = m.group(1), bridge_of(r["answers"][0], kind)
            if bridge == r["answers"][0]:
                raise SystemExit(f"{r['_id']}: the answer names no bridge ({r['answers'][0]!r}); "
                                 "write the set with an --answers style other than final")
            passages = re.split(r"(?:^|\n)Passage \d+:\n", r["context"])[1:]
            body = t["prefix"] + "".join(t["segment"].format(text=p) for p in passages)
            want = tok.encode(" " + bridge, add_special_tokens=False).ids[0]
            held_out = body + t["suffix"].format(input=r["input"])
            restated = held_out + " " + sl.STEP_WORDS[kind].format(subject)
            alone = body + t["suffix"].format(input=ALONE[kind].format(subject))
            right[0] += next_token(held_out) == want
            right[1] += next_token(restated) == want
            right[2] += next_token(alone) == want
        print(f"| {kind} | {len(chosen)} | {right[0]} | {right[1]} | {right[2]} |", flush=True)


if __name__ == "__main__":
    main()
