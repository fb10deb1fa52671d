#!/usr/bin/env python3
"""Trains hypic's embedded default model: a small Qwen3.5-architecture hybrid that answers
questions over several shuffled passages.
Takes: 55 minutes on 2 cores for the short-task model; --task long runs end at --minutes or --steps; --data-only 10 s (needs only tokenizers).

What it does, in order (all seeded; see --help for the knobs):

1. Builds the synthetic multi-document QA task ("synthqa"). Vocabulary pools (invented
   first names, surnames, towns and company names; real jobs and products) are fixed by
   --seed. A *passage* is a person ("Tarik Velmo\nTarik Velmo was born in Orsk. Tarik
   Velmo was born in 1843. Tarik Velmo worked as a baker. Tarik Velmo worked at Quenby
   Mills.") or a company ("Quenby Mills\nQuenby Mills is based in Dravo. Quenby Mills was
   founded in 1902. Quenby Mills makes rope."). A *prompt* is 3-6 passages in random
   order, then a question whose answer is a short span of one passage; about one question
   in six needs two passages (the town of the company a person worked at).
2. Trains a byte-level BPE tokenizer of the Qwen2/Qwen3 kind (NFC, Qwen's Split pattern +
   ByteLevel, <|endoftext|> = id 0 = end of answer) on generated text.
3. Trains Qwen3_5ForCausalLM from transformers (Gated DeltaNet and gated full attention in
   the 3:1 pattern), in two stages:
   - copying: batches of random token blocks repeated 2-3 times, until the loss on the
     repeats is below 1 nat (a few hundred steps). The QA task alone leaves a model of this
     size on a plateau (answers guessed from their type, EM ~0) for longer than an hour:
     measured, see the model card;
   - QA: freshly generated prompts, each tokenized piece by piece exactly as `hypic eval`
     and `hypic serve` do (prefix, each passage, question suffix separately), followed by
     more questions on other facts of the same passages until the row holds --row-tokens
     tokens (more answers per prompt token, and rows of nearly equal length, so little
     padding; the first question is exactly the evaluation format), 2-4 passages for the
     first quarter of the stage, then 3-6; a tenth of each batch stays copying rows. Loss: mean
     over answer tokens (and their end token) + --lm-weight x mean over the other tokens.
   The run ends after --steps or --minutes, whichever comes first; the learning rate
   follows that progress (5 % warm-up, cosine to 5 %).
4. Writes the model folder (config.json, model.safetensors in float32, tokenizer.json,
   training.json with the log) and the held-out data, drawn from worlds with other seeds:
     inputs/datasets/synthqa.jsonl        test set, LongBench JSONL (hypic eval)
     inputs/datasets/synthqa_dev.jsonl    dev set (monitored during training)
     inputs/corpus/synthqa.jsonl          the test world's passages, {"id","text"} (warmup)
     inputs/corpus/synthqa_queries.jsonl  test queries in `hypic serve`'s format

--task long (scripts/train/synth_long.py) is the long-prompt variant: questions over 16-32 passages
(4-8k tokens) with evidence spread over passages far apart and passages that refer to other
passages' entities, plus a multi-document summary task (synthsum, ROUGE-L). It starts from
the embedded model (--init-from), follows the curriculum LONG_PLAN (printed by --plan) and
writes synthqa_long{,_dev}.jsonl and synthsum{,_dev}.jsonl under --data-dir/datasets. The
short task's defaults, data and files are unchanged by it.

Needs: pip install torch transformers tokenizers safetensors. CPU only; 55 minutes with two
threads on the 2-core dev VM with the defaults (it prints its speed). Data only: --data-only.
"""
import argparse
import copy
import json
import math
import pathlib
import random
import re
import resource
import statistics
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The prompt pieces. templates.json's "synthqa" entry holds the same strings; the check in
# write_datasets() refuses to run when they differ.
PREFIX = "Read the passages, then answer the question.\n\n"
SEGMENT = "{text}\n"
SUFFIX = "\nQuestion: {input}\nAnswer:"
EOS = "<|endoftext|>"
SPECIAL = [EOS, "<|im_start|>", "<|im_end|>"]

JOBS = ["baker", "miller", "teacher", "nurse", "painter", "sailor", "farmer", "weaver",
        "doctor", "clerk", "tailor", "smith", "potter", "mason", "carpenter", "brewer",
        "printer", "chemist", "pilot", "engineer", "architect", "judge", "butcher", "fisher",
        "singer", "poet", "lawyer", "banker", "cook", "gardener"]
PRODUCTS = ["rope", "glass", "paper", "soap", "cheese", "bicycles", "lamps", "clocks",
            "boots", "wool", "bricks", "ink", "candles", "barrels", "nails", "sails",
            "tiles", "maps", "pianos", "radios"]
COMPANY_KINDS = ["Mills", "Works", "Labs", "Foods", "Freight", "Textiles", "Motors", "Press"]
ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr",
          "gr", "kr", "tr", "st", "th", "sh", "ch", "h", "j", "w"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"]
CODAS = ["", "", "", "n", "r", "l", "s", "k", "m", "th", "nd", "rk"]
TOWN_ENDS = ["", "", "holm", "ford", "vik", "dal", "burg", "ton"]
QUESTION_KINDS = ["born_where", "born_when", "job", "employer", "company_where",
                  "company_when", "product", "two_hop"]


def word(rng, syllables):
    s = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
                for _ in range(syllables))
    return s[0].upper() + s[1:]


def unique_words(rng, n, make):
    out, seen = [], set()
    while len(out) < n:
        w = make()
        if w not in seen and 3 <= len(w) <= 11:
            seen.add(w)
            out.append(w)
    return out


class Pools:
    """The fixed vocabulary of the task (names, towns, companies), drawn once from --seed."""

    def __init__(self, seed):
        rng = random.Random(seed * 7919 + 1)
        self.first = unique_words(rng, 120, lambda: word(rng, 2))
        self.last = unique_words(rng, 120, lambda: word(rng, rng.choice([2, 3])))
        self.towns = unique_words(rng, 80, lambda: word(rng, rng.choice([1, 2])) +
                                  rng.choice(TOWN_ENDS))
        stems = unique_words(rng, 60, lambda: word(rng, 2))
        self.companies = [f"{s} {rng.choice(COMPANY_KINDS)}" for s in stems]


class World:
    """Persons and companies with random facts. Every name is unique within a world."""

    def __init__(self, pools, rng, n_persons, n_companies):
        self.companies = []
        for name in rng.sample(pools.companies, n_companies):
            self.companies.append({"kind": "company", "name": name,
                                   "town": rng.choice(pools.towns),
                                   "year": rng.randint(1800, 1999),
                                   "product": rng.choice(PRODUCTS)})
        names = set()
        self.persons = []
        while len(self.persons) < n_persons:
            name = f"{rng.choice(pools.first)} {rng.choice(pools.last)}"
            if name in names:
                continue
            names.add(name)
            self.persons.append({"kind": "person", "name": name,
                                 "he": rng.choice(["He", "She"]),
                                 "town": rng.choice(pools.towns),
                                 "year": rng.randint(1800, 1999),
                                 "job": rng.choice(JOBS),
                                 "company": rng.choice(self.companies)["name"]})
        self.by_name = {e["name"]: e for e in self.persons + self.companies}


STYLE = "repeat"  # set from --style in main()


def passage_text(e):
    """Title line, then the facts (no trailing newline: the template adds it).

    Styles: "distinct" names the subject in every sentence and gives every fact its own
    relation words ("X's birth year is 1843"), so each fact is a few tokens after its
    subject and no two facts share a cue; "repeat" names the subject in every sentence but
    reuses cues ("was born in" for town and year); "prose" uses pronouns and longer
    sentences. The shipped model uses "repeat"; the other two are for experiments (only
    "distinct" was tried, briefly, with an older recipe: a faster start, then the same dev
    EM)."""
    n = e["name"]
    if STYLE == "prose":
        if e["kind"] == "person":
            body = (f"{n} was born in {e['town']} in {e['year']}. {e['he']} worked as a "
                    f"{e['job']} at {e['company']}.")
        else:
            body = (f"{n} is based in {e['town']}. It was founded in {e['year']} and "
                    f"makes {e['product']}.")
    elif STYLE == "repeat":
        if e["kind"] == "person":
            body = (f"{n} was born in {e['town']}. {n} was born in {e['year']}. {n} worked as "
                    f"a {e['job']}. {n} worked at {e['company']}.")
        else:
            body = (f"{n} is based in {e['town']}. {n} was founded in {e['year']}. {n} makes "
                    f"{e['product']}.")
    elif e["kind"] == "person":
        body = (f"{n} was born in {e['town']}. {n}'s birth year is {e['year']}. {n}'s job is "
                f"{e['job']}. {n}'s employer is {e['company']}.")
    else:
        body = (f"{n} is based in {e['town']}. {n}'s founding year is {e['year']}. {n}'s "
                f"product is {e['product']}.")
    return f"{n}\n{body}"


def question(e, kind, world):
    """(question, answer, the entities whose passages are needed)."""
    if kind == "born_where":
        return f"Where was {e['name']} born?", e["town"], [e]
    if kind == "born_when":
        return f"In which year was {e['name']} born?", str(e["year"]), [e]
    if kind == "job":
        return f"What was {e['name']}'s job?", e["job"], [e]
    if kind == "employer":
        return f"Which company did {e['name']} work at?", e["company"], [e]
    if kind == "company_where":
        return f"Where is {e['name']} based?", e["town"], [e]
    if kind == "company_when":
        return f"In which year was {e['name']} founded?", str(e["year"]), [e]
    if kind == "product":
        return f"What does {e['name']} make?", e["product"], [e]
    c = world.by_name[e["company"]]
    return (f"Where is the company that {e['name']} worked at based?", c["town"], [e, c])


def draw_query(world, rng, passages=(3, 6)):
    """One prompt: question kind, needed passages, distractors (passages = (fewest, most)
    in all), shuffled."""
    kind = rng.choices(QUESTION_KINDS, weights=[1, 1, 1, 1, 1, 1, 1, 1.4])[0]
    if kind in ("company_where", "company_when", "product"):
        target = rng.choice(world.companies)
    else:
        target = rng.choice(world.persons)
    q, a, needed = question(target, kind, world)
    n = max(len(needed), rng.randint(passages[0], passages[1]))
    chosen = {e["name"] for e in needed}
    entities = list(needed)
    while len(entities) < n:
        pool = world.persons if rng.random() < 0.6 else world.companies
        e = rng.choice(pool)
        if e["name"] not in chosen:
            chosen.add(e["name"])
            entities.append(e)
    rng.shuffle(entities)
    return {"kind": kind, "question": q, "answer": a, "entities": entities}


def training_example(pools, rng, passages=(3, 6), followups=7, distinct=False):
    """A fresh small world per example, so facts cannot be memorised, only read. Up to
    `followups` more questions on the same passages follow the first (each after the
    previous answer's end token): more answer tokens per prompt token; the first question is
    exactly the eval format. With `distinct`, the follow-ups are that many different facts
    of the prompt's passages (no question is asked twice in a row, so none can be answered
    by copying an earlier answer to the same question); otherwise 0..`followups` random
    ones, repeats allowed."""
    world = World(pools, rng, n_persons=6, n_companies=5)
    ex = draw_query(world, rng, passages)
    ex["more"] = []
    names = {e["name"] for e in ex["entities"]}

    def kinds_of(e):
        if e["kind"] == "company":
            return ["company_where", "company_when", "product"]
        return ["born_where", "born_when", "job", "employer"] + (
            ["two_hop"] * 2 if e["company"] in names else [])

    if distinct:
        pairs = [(e, k) for e in ex["entities"] for k in dict.fromkeys(kinds_of(e))]
        rng.shuffle(pairs)
        for e, k in pairs:
            q, a, _ = question(e, k, world)
            if q != ex["question"] and len(ex["more"]) < followups:
                ex["more"].append((q, a))
        return ex
    for _ in range(rng.randint(0, followups)):
        e = rng.choice(ex["entities"])
        q, a, _ = question(e, rng.choice(kinds_of(e)), world)
        ex["more"].append((q, a))
    return ex


def pieces(ex):
    return ([PREFIX] + [SEGMENT.format(text=passage_text(e)) for e in ex["entities"]] +
            [SUFFIX.format(input=ex["question"])])


# ---------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer(pools, seed, vocab_size):
    from qwen_bpe import train_qwen_bpe

    rng = random.Random(seed + 17)
    texts = []
    for _ in range(3000):
        ex = training_example(pools, rng)
        texts.append("".join(pieces(ex)) + " " + ex["answer"])
    # Every pool word once more, so rare names still get whole-word tokens.
    texts += [" ".join(pools.first + pools.last + pools.towns + pools.companies)]
    return train_qwen_bpe(texts, vocab_size, SPECIAL, min_frequency=2)


def encode_example(tok, ex):
    """(prompt ids, answer ids + end token, [(follow-up question ids, answer ids + end)])."""
    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    ids = [t for p in pieces(ex) for t in enc(p)]
    more = [(enc(SUFFIX.format(input=q)), enc(" " + a) + [0]) for q, a in ex.get("more", [])]
    return ids, enc(" " + ex["answer"]) + [0], more


# ---------------------------------------------------------------------------------------
# held-out data


def write_datasets(pools, tok, args):
    """The test world (seed+101) and the dev world (seed+202); never seen in training."""
    templates = json.loads((ROOT / "inputs/datasets/templates.json").read_text())
    t = templates.get("synthqa")
    if not t or (t["prefix"], t["segment"], t["suffix"]) != (PREFIX, SEGMENT, SUFFIX):
        raise SystemExit("inputs/datasets/templates.json's synthqa entry does not match "
                         "the prompt pieces in scripts/train/train_tiny.py")
    sets = {}
    for name, offset, n in (("synthqa", 101, args.test_queries), ("synthqa_dev", 202, 200)):
        rng = random.Random(args.seed + offset)
        world = World(pools, rng, n_persons=150, n_companies=50)
        ids = {e["name"]: f"{'p' if e['kind'] == 'person' else 'c'}{i:03d}"
               for i, e in enumerate(world.persons + world.companies)}
        queries = [draw_query(world, rng) for _ in range(n)]
        sets[name] = (world, ids, queries)
        with open(ROOT / f"inputs/datasets/{name}.jsonl", "w") as f:
            for i, q in enumerate(queries):
                context = "\n".join(f"Passage {k + 1}:\n{passage_text(e)}"
                                    for k, e in enumerate(q["entities"]))
                line = {"input": q["question"], "context": context, "answers": [q["answer"]],
                        "length": len(context.split()), "dataset": "synthqa",
                        "language": "en", "all_classes": None, "_id": f"{name}-{i:04d}",
                        "kind": q["kind"]}
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    world, ids, queries = sets["synthqa"]
    (ROOT / "inputs/corpus").mkdir(exist_ok=True)
    with open(ROOT / "inputs/corpus/synthqa.jsonl", "w") as f:
        for e in world.persons + world.companies:
            f.write(json.dumps({"id": ids[e["name"]],
                                "text": SEGMENT.format(text=passage_text(e))}) + "\n")
    with open(ROOT / "inputs/corpus/synthqa_queries.jsonl", "w") as f:
        for i, q in enumerate(queries):
            f.write(json.dumps({"id": f"q{i:04d}", "prefix": PREFIX,
                                "segments": [ids[e["name"]] for e in q["entities"]],
                                "question": SUFFIX.format(input=q["question"]),
                                "max_new_tokens": 8, "answers": [q["answer"]]}) + "\n")
    return [encode_example(tok, q) + (q["kind"],) for q in sets["synthqa_dev"][2]]


# ---------------------------------------------------------------------------------------
# model and training


def make_config(vocab_size, eos, layers=8, hidden=128):
    from transformers import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * (layers // 4),
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25},
        tie_word_embeddings=True, eos_token_id=eos, pad_token_id=eos, bos_token_id=None,
        rms_norm_eps=1e-6, initializer_range=0.02)


def induction_row(rng, vocab):
    """Random tokens repeated 2-3 times: only copying predicts the repeats. A share of such
    rows in every batch makes the model learn to copy (induction heads) within minutes,
    which the QA task alone teaches far more slowly."""
    n = rng.randint(8, 24)
    block = [rng.randrange(len(SPECIAL), vocab) for _ in range(n)]
    return block * rng.randint(2, 3), None, n


def fit_row(example, row_tokens):
    """Keeps the follow-ups of an encoded example that fit in `row_tokens` tokens (the prompt
    and first answer always stay), so the rows of a batch come out about equally long."""
    p, a, more = example
    n, kept = len(p) + len(a), []
    for q, qa in more:
        if n + len(q) + len(qa) > row_tokens:
            break
        n += len(q) + len(qa)
        kept.append((q, qa))
    return p, a, kept


def batch_tensors(examples):
    """Right-padded ids and per-position loss weights: w_ans where the next token is an
    answer token (or its end token), w_lm where it is any other real token."""
    import torch

    seqs, ans_mask = [], []
    for p, a, more, *_ in examples:
        if a is None:  # an induction row: no answer; LM loss on the repeats only (2 = ignore)
            n = more  # the length of the first copy, which nothing predicts
            seqs.append(list(p))
            ans_mask.append([2] * n + [0] * (len(p) - n))
            continue
        seq, mask = list(p) + list(a), [0] * len(p) + [1] * len(a)
        for q, qa in more:
            seq += q + qa
            mask += [0] * len(q) + [1] * len(qa)
        seqs.append(seq)
        ans_mask.append(mask)
    n = max(len(s) for s in seqs)
    ids = torch.zeros(len(examples), n, dtype=torch.long)
    w_ans = torch.zeros(len(examples), n)
    w_lm = torch.zeros(len(examples), n)
    for b, (seq, mask) in enumerate(zip(seqs, ans_mask)):
        ids[b, :len(seq)] = torch.tensor(seq)
        # position t predicts token t+1
        m = torch.tensor(mask[1:])
        w_ans[b, :len(seq) - 1] = (m == 1).float()
        w_lm[b, :len(seq) - 1] = (m == 0).float()
    return ids, w_ans, w_lm


def peak_gib():
    """This process's peak resident memory so far, in GiB (Linux gives ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def losses(model, ids, w_ans, w_lm, spans=None, junction=0, distill=0.0, teacher=None,
           parts=None, kv_gap=False):
    """Mean loss over answer tokens, over the other tokens, and per row whether every answer
    token is the argmax. spans: per row None (computed in full) or the segments' token
    ranges, for a row computed as hypic's pic mode with junction width `junction` would
    (pic_sim.py). distill: in such a row, each answer token's loss is (1 - distill) x its
    cross-entropy + distill x KL(full || pic), full being `teacher`'s full-recompute
    distribution at that token (default: this model's; no gradient through it); the other
    tokens keep their cross-entropy; a list gives each row its own weight. parts: a dict that
    receives "answer_ce", the answer tokens' mean cross-entropy before any mixing (with
    distill=1 the first value returned is then the KL alone, and both come from one pass),
    and with kv_gap "kv_gap": the mean over the pic rows of pic_sim's kv_gap (the first
    attention layer's keys and values of the cached tokens, pic's against full recompute's),
    a tensor with its gradient (0 when no pic row has a cached token; absent when no row is
    pic)."""
    import torch
    import torch.nn.functional as F

    if spans is None or all(s is None for s in spans):
        logits = model(input_ids=ids).logits
    else:
        from pic_sim import pic_logits

        full = [b for b, s in enumerate(spans) if s is None]
        rows = [None] * len(spans)
        if full:
            for b, row in zip(full, model(input_ids=ids[full]).logits):
                rows[b] = row
        gaps = []
        for b, s in enumerate(spans):
            if s is not None:
                gap = {} if kv_gap else None
                rows[b] = pic_logits(model, ids[b:b + 1], s, junction, kv_gap=gap)[0]
                if gap:
                    gaps.append(gap["kv_gap"])
        logits = torch.stack(rows)
        if kv_gap and parts is not None:
            parts["kv_gap"] = torch.stack(gaps).mean() if gaps else torch.zeros(())
    logits = logits[:, :-1]
    target = ids[:, 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                         reduction="none").view_as(target)
    if parts is not None:
        parts["answer_ce"] = ((ce * w_ans[:, :-1]).sum() / w_ans[:, :-1].sum()).item()
    row_distill = list(distill) if isinstance(distill, (list, tuple)) else [distill] * len(ids)
    if spans is not None and any(s is not None and d > 0 for s, d in zip(spans, row_distill)):
        per_row = []
        for b, s in enumerate(spans):
            distill = row_distill[b]
            if s is None or distill == 0:
                per_row.append(ce[b])
                continue
            with torch.no_grad():
                full = (model if teacher is None else teacher)(input_ids=ids[b:b + 1])
                full = full.logits[0, :-1].log_softmax(-1)
            kl = (full.exp() * (full - logits[b].log_softmax(-1))).sum(-1)
            per_row.append(torch.where(w_ans[b, :-1] > 0,
                                       (1 - distill) * ce[b] + distill * kl, ce[b]))
        ce = torch.stack(per_row)
    wa, wl = w_ans[:, :-1], w_lm[:, :-1]
    ans = (ce * wa).sum() / wa.sum()
    lm = (ce * wl).sum() / wl.sum()
    correct = ((logits.argmax(-1) == target) | (wa == 0)).all(dim=1)
    return ans, lm, correct


def evaluate(model, data, batch=50):
    """Exact match of greedy decoding = every answer token (and the end token) is the argmax."""
    import torch

    model.eval()
    hits, per_kind = 0, {}
    with torch.no_grad():
        for i in range(0, len(data), batch):
            chunk = data[i:i + batch]
            _, _, ok = losses(model, *batch_tensors(chunk))
            for (_, _, _, kind, *_), good in zip(chunk, ok.tolist()):
                hits += good
                k = per_kind.setdefault(kind, [0, 0])
                k[0] += good
                k[1] += 1
    model.train()
    return hits / len(data), {k: round(v[0] / v[1], 3) for k, v in sorted(per_kind.items())}


def export(model, out, info):
    """config.json, model.safetensors (float32, tied lm_head left out) and training.json."""
    import torch
    from safetensors.torch import save_file

    model.config.architectures = ["Qwen3_5ForCausalLM"]
    model.config.save_pretrained(out)
    state = {k: v.detach().contiguous().to(torch.float32)
             for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")


# ---------------------------------------------------------------------------------------
# --task long: 16-32 passages and summaries (scripts/train/synth_long.py)

# The 90-minute plan of --task long (two threads on the 2-core VM): after warm-starting from
# the embedded short-task model (it already reads passages and copies, so no copying stage),
# the prompt length grows in three stages; each stage keeps about the same tokens per step
# (rows x prompt length), and a share of every batch is summary rows. The learning rate
# follows progress = max(steps / --steps, minutes / --minutes) as in the short task.
#   (progress until, passages (fewest, most), rows per batch, summary share)
LONG_PLAN = [
    (0.15, (4, 8), 8, 0.25),
    (0.45, (8, 16), 4, 0.25),
    (1.00, (16, 32), 2, 0.25),
]
LONG_MAX_POSITIONS = 10240  # 8k-token prompts plus a 320-token summary, with a margin


def grow_for_long_prompts(model, extra_attention_layers, slow_heads):
    """Two changes to the warm-started model for 16-32 passages, both neutral or nearly so at
    the start. (1) Appends full-attention layers, each a copy of the last one with its two
    output projections zeroed, so the logits are unchanged at step 0: a second attention layer
    is what a two-passage question needs (the first finds the bridge entity, the second the
    fact about it). (2) Slows the decay of `slow_heads` value heads per Gated DeltaNet layer:
    the embedded model forgets within a few tokens (A = exp(A_log) of 0.5-14), so no state
    crosses a passage boundary and pic-addition could never differ from pic. The slowest heads
    get A = 0.003 (about 0.45 left after 200 tokens), so a passage that only says "She" can
    know from the state who she is."""
    import copy
    import torch

    layers = model.model.layers
    with torch.no_grad():
        for _ in range(extra_attention_layers):
            new = copy.deepcopy(layers[-1])
            new.self_attn.o_proj.weight.zero_()
            new.mlp.down_proj.weight.zero_()
            idx = len(layers)
            for m in new.modules():
                if hasattr(m, "layer_idx"):
                    m.layer_idx = idx
            layers.append(new)
            model.config.layer_types = list(model.config.layer_types) + ["full_attention"]
            model.config.num_hidden_layers = len(layers)
        for layer in layers:
            attn = getattr(layer, "linear_attn", None)
            if attn is None or slow_heads <= 0:
                continue
            slowest = torch.argsort(attn.A_log)[:slow_heads]  # the slowest heads move least
            attn.A_log[slowest] = math.log(0.003)
    print(f"model for long prompts: layers {model.config.layer_types}, "
          f"{slow_heads} slow head(s) per linear layer", flush=True)


def long_stage(progress):
    for until, passages, rows, share in LONG_PLAN:
        if progress < until:
            return passages, rows, share
    return LONG_PLAN[-1][1:]


def sum_header(args):
    """The summary prompts' per-passage header ('' without --summary-headers)."""
    import synth_long as sl

    return sl.SUM_HEADER if args.summary_headers else ""


def long_pieces(ex, summary=False, header=""):
    """The prompt's pieces as hypic renders them: prefix, per passage its header (when the
    template has one: its own segment) and the passage, then the suffix."""
    segs = []
    for k, e in enumerate(ex["entities"]):
        if header:
            segs.append(header.format(index=k + 1))
        segs.append(SEGMENT.format(text=e["text"]))
    if summary:
        from synth_long import SUM_PREFIX, SUM_SUFFIX
        return [SUM_PREFIX] + segs + [SUM_SUFFIX]
    return [PREFIX] + segs + [SUFFIX.format(input=ex["question"])]


def encode_long(tok, ex, summary=False, more=(), header=""):
    """(prompt ids, answer ids, follow-ups, spans): spans are the passages' token ranges in
    the prompt (between the prefix and the suffix), for rows trained as pic computes them."""
    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    pieces = [enc(p) for p in long_pieces(ex, summary, header)]
    ids, spans = [], []
    for i, p in enumerate(pieces):
        if 0 < i < len(pieces) - 1:
            spans.append((len(ids), len(ids) + len(p)))
        ids += p
    follow = [(enc(SUFFIX.format(input=q)), enc(" " + a) + [0]) for q, a in more]
    return ids, enc(" " + ex["answer"]) + [0], follow, spans


def long_training_example(pools, tok, rng, passages, summary, most_followups, answers="final",
                          cross_share=None, sub=False, header="", sub_share=None, *,
                          note_share):
    import synth_long as sl

    world = sl.training_world(pools, rng, JOBS, PRODUCTS)
    if summary:
        ex = sl.draw_summary_prompt(world, rng, passages, note_share)
        return encode_long(tok, ex, summary=True, header=header)
    ex = sl.draw_long_prompt(world, rng, passages, answers=answers, note_share=note_share)
    return encode_long(tok, ex, more=sl.followups(ex, world, rng, most_followups, answers,
                                                  cross_share, sub, sub_share))


def write_long_jsonl(path, name, exs, summary):
    """LongBench JSONL lines (plus `kind` and `passages`) of synth_long examples."""
    with open(path, "w") as f:
        for i, q in enumerate(exs):
            context = "\n".join(f"Passage {k + 1}:\n{e['text']}"
                                for k, e in enumerate(q["entities"]))
            line = {"input": q["question"], "context": context, "answers": [q["answer"]],
                    "length": len(context.split()),
                    "dataset": "synthsum" if summary else "synthqa_long", "language": "en",
                    "all_classes": None, "_id": f"{name}-{i:04d}", "kind": q["kind"],
                    "passages": len(q["entities"])}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def write_long_datasets(pools, tok, args):
    """Test worlds seed+303 (QA) and seed+505 (summaries), dev worlds seed+404 and seed+606;
    LongBench JSONL under --data-dir/datasets. With --sub-questions, also
    synthqa_long_sub.jsonl: each mentor_born / founder_job test prompt asking the chain's
    first step alone ("Who was the mentor of X?", "Who founded C?"), and
    synthqa_long_sub_alone.jsonl: the same questions over the one passage that answers them
    (X's or C's) and nothing else. Returns the encoded dev sets."""
    import synth_long as sl

    templates = json.loads((ROOT / "inputs/datasets/templates.json").read_text())
    header = sum_header(args)
    for name, want in (("synthqa_long", (PREFIX, "", SEGMENT, SUFFIX)),
                       ("synthsum", (sl.SUM_PREFIX, header, SEGMENT, sl.SUM_SUFFIX))):
        t = templates.get(name)
        if not t or (t["prefix"], t.get("header", ""), t["segment"], t["suffix"]) != want:
            raise SystemExit(f"inputs/datasets/templates.json's {name} entry does not match "
                             "the prompt pieces in scripts/train/train_tiny.py / synth_long.py"
                             + (" (--summary-headers wants synthsum's 'header' to be "
                                f"{sl.SUM_HEADER!r})" if name == "synthsum" else ""))
    folder = pathlib.Path(args.data_dir) / "datasets"
    folder.mkdir(parents=True, exist_ok=True)
    dev = {}
    for name, offset, n, summary in (("synthqa_long", 303, args.test_queries, False),
                                     ("synthqa_long_dev", 404, args.dev_queries, False),
                                     ("synthsum", 505, args.test_summaries, True),
                                     ("synthsum_dev", 606, max(1, args.dev_queries // 4), True)):
        rng = random.Random(args.seed + offset)
        world = sl.LongWorld(pools, rng, 150, 50, JOBS, PRODUCTS)
        exs = [sl.draw_summary_prompt(world, rng) if summary else
               sl.draw_long_prompt(world, rng, answers=args.answers) for _ in range(n)]
        write_long_jsonl(folder / f"{name}.jsonl", name, exs, summary)
        if name == "synthqa_long" and args.sub_questions:
            step = {k: sl.FIRST_STEP[k] for k in sl.SUB_STEPS}
            sub, alone = [], []
            for q in exs:
                if q["kind"] in step:
                    question, answer, _ = sl.long_question(q["needed"][0], step[q["kind"]],
                                                           world)
                    sub.append(dict(q, question=question, answer=answer,
                                    kind=step[q["kind"]]))
                    alone.append(dict(sub[-1], entities=[q["needed"][0]]))
            write_long_jsonl(folder / "synthqa_long_sub.jsonl", "synthqa_long_sub", sub, False)
            write_long_jsonl(folder / "synthqa_long_sub_alone.jsonl", "synthqa_long_sub_alone",
                             alone, False)
        if name.endswith("_dev"):
            dev[name] = []
            for q in exs:
                p, a, more, spans = encode_long(tok, q, summary,
                                                header=header if summary else "")
                dev[name].append((p, a, more, q["kind"], spans))
    return dev["synthqa_long_dev"], dev["synthsum_dev"]


def print_long_plan(args, tokens_per_second=None):
    import synth_long as sl

    print("long-task plan (LONG_PLAN): progress = max(steps/--steps, minutes/--minutes)")
    start = 0.0
    for until, passages, rows, share in LONG_PLAN:
        mins = (until - start) * args.minutes
        print(f"  {start:.2f}-{until:.2f} of the run ({mins:.1f} min of {args.minutes:g}): "
              f"{passages[0]}-{passages[1]} passages, {rows} rows per step, "
              f"{share:.0%} summary rows")
        start = until
    if args.last_stage_only:
        print("  --last-stage-only: the last stage throughout")
    if args.passages:
        print(f"  --passages: {args.passages[0]}-{args.passages[1]} passages throughout"
              + (f", {args.rows} rows per step" if args.rows else ", the stage's rows per step"))
    if args.summary_share is not None:
        print(f"  --summary-share: {args.summary_share:.0%} summary rows throughout")
    print(f"  answers: {args.answers}" + ("" if args.cross_followups is None else
                                          f"; {args.cross_followups:.0%} of the follow-up "
                                          "questions cross-passage where the prompt has them") +
          ("; sub-questions among the follow-ups" if args.sub_questions else "") +
          ("" if args.sub_share is None else f" (up to {args.sub_share:.0%} of them)"))
    if args.summary_headers:
        print("  --summary-headers: summary prompts put 'Passage N:' before each passage")
    if args.note_share != sl.NOTE_SHARE:
        print(f"  --note-share: a training prompt's persons have a pronoun note after them "
              f"with probability {args.note_share:.0%} (held-out sets: {sl.NOTE_SHARE:.0%})")
    if args.pic_share > 0:
        print(f"  --pic-share: {args.pic_share:.0%} of the rows computed as pic "
              f"W={args.pic_junction} would")
        if args.pic_distill > 0:
            print(f"  --pic-distill: their answer tokens' loss {args.pic_distill:g} x "
                  f"KL(full of the --init-from model || pic) + {1 - args.pic_distill:g} x "
                  f"cross-entropy")
        if args.pic_kv_match > 0:
            print(f"  --pic-kv-match: + {args.pic_kv_match:g} x the first attention layer's "
                  f"cached keys and values, pic's against full recompute's (relative)")
    print(f"  init from {args.init_from}; lr {args.lr}, 5 % warm-up, cosine to 5 %; "
          f"threads {args.threads}; max positions {LONG_MAX_POSITIONS}")


FIRST_STEP_ROWS = 200


def first_step_share(pools, args):
    """How many of the follow-ups that QA rows at the last stage (or --passages) draw ask a
    chain's first step, with this run's --cross-followups / --sub-share, over FIRST_STEP_ROWS
    rows of its own random stream (the training stream is not touched)."""
    import synth_long as sl

    rng = random.Random(args.seed + 7)
    passages = args.passages or long_stage(1.0)[0]
    tally = {"followups": 0, "first_steps": 0, "moved_to": 0, "notes": []}
    moved_to = re.compile(re.escape(sl.QUESTIONS["moved_to"]).replace(re.escape("{}"), ".+"))
    for _ in range(FIRST_STEP_ROWS):
        world = sl.training_world(pools, rng, JOBS, PRODUCTS)
        ex = sl.draw_long_prompt(world, rng, passages, answers=args.answers,
                                 note_share=args.note_share)
        more = sl.followups(ex, world, rng, args.followups, args.answers,
                            args.cross_followups, True, args.sub_share)
        tally["followups"] += len(more)
        tally["first_steps"] += sum(sl.is_first_step(q) for q, _ in more)
        tally["moved_to"] += sum(moved_to.fullmatch(q) is not None for q, _ in more)
        tally["notes"].append(sum(e["kind"] == "note" for e in ex["entities"]))
    return tally


def kv_note(parts):
    """The step's kv_gap for the progress line, where it was computed."""
    gap = parts.get("kv_gap")
    return "" if gap is None else f", kv gap {gap.item():.4f}"


def main_long(args):
    """--task long: warm start, the LONG_PLAN curriculum, dev QA EM and summary loss."""
    # --data-only needs the tokenizers package alone (scripts/quality_table.sh makes the
    # held-out sets with it); torch and transformers are imported after the data is written.
    from tokenizers import Tokenizer

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pools = Pools(args.seed)
    if args.init_from == "none":
        raise SystemExit("--task long starts from a trained short-task model (--init-from DIR); "
                         "from scratch, train the short task first")
    init = pathlib.Path(args.init_from)
    tok = Tokenizer.from_file(str(init / "tokenizer.json"))
    tok.save(str(out / "tokenizer.json"))
    dev_qa, dev_sum = write_long_datasets(pools, tok, args)
    print(f"dev prompts: QA {sum(len(p) for p, *_ in dev_qa) / len(dev_qa):.0f} tokens, "
          f"summaries {sum(len(p) for p, *_ in dev_sum) / len(dev_sum):.0f} tokens + "
          f"{sum(len(a) for _, a, *_ in dev_sum) / len(dev_sum):.0f} answer tokens on average",
          flush=True)
    print_long_plan(args)
    if args.sub_questions:
        drawn = first_step_share(pools, args)
        print(f"  first steps among the follow-ups: {drawn['first_steps']} of "
              f"{drawn['followups']} ({drawn['first_steps'] / max(drawn['followups'], 1):.1%}) "
              f"in {FIRST_STEP_ROWS} QA rows at the last stage's passages (a separate draw)",
              flush=True)
        print(f"  pronoun notes per prompt in those rows: {statistics.median(drawn['notes']):g} "
              f"at the median; moved_to follow-ups per row: "
              f"{drawn['moved_to'] / FIRST_STEP_ROWS:.1f}", flush=True)
    if args.data_only:
        return
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    # A long-task model as --init-from continues that run: its record is kept in ours.
    earlier = None
    if (init / "training.json").exists():
        earlier = json.loads((init / "training.json").read_text())
        if earlier.get("task") != "long":
            earlier = None
    model = Qwen3_5ForCausalLM.from_pretrained(str(init), dtype=torch.float32)
    model.config.max_position_embeddings = LONG_MAX_POSITIONS
    grow_for_long_prompts(model, args.extra_attention_layers, args.slow_heads)
    n_params = sum(p.numel() for p in model.parameters())
    teacher = None
    if args.pic_distill > 0:  # what pic is pulled toward: full recompute as training starts
        teacher = copy.deepcopy(model).eval().requires_grad_(False)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))

    def lr_at(progress):
        if progress < 0.05:
            return args.lr * max(progress, 1e-3) / 0.05
        t = (progress - 0.05) / 0.95
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))

    def dev_eval():
        em, kinds = evaluate(model, dev_qa, batch=2)
        model.eval()
        with torch.no_grad():
            sl_ = [losses(model, *batch_tensors([d]))[0].item() for d in dev_sum]
        model.train()
        return em, kinds, sum(sl_) / len(sl_)

    def dev_eval_pic():
        """Dev QA EM and summary loss with every row computed as pic computes it."""
        model.eval()
        hits = 0
        w = args.pic_junction
        with torch.no_grad():
            for d in dev_qa:
                hits += bool(losses(model, *batch_tensors([d]), spans=[d[4]], junction=w)[2][0])
            # The loss and KL(full || pic) per summary token, both modes this model's (the
            # distance pic leaves), from one pic pass each
            sl_, kl_, gap_ = [], [], []
            for d in dev_sum:
                parts = {}
                kl_.append(losses(model, *batch_tensors([d]), spans=[d[4]], junction=w,
                                  distill=1.0, parts=parts, kv_gap=True)[0].item())
                sl_.append(parts["answer_ce"])
                gap_.append(parts["kv_gap"].item())
        model.train()
        return (hits / len(dev_qa), sum(sl_) / len(sl_), sum(kl_) / len(kl_),
                sum(gap_) / len(gap_))

    def report(step, minutes):
        em, kinds, sum_loss = dev_eval()
        entry = {"step": step, "dev_em": em, "dev_em_per_kind": kinds,
                 "dev_summary_loss": round(sum_loss, 4), "minutes": minutes}
        line = f"dev QA EM {em:.3f} {kinds}, dev summary loss {sum_loss:.3f}"
        if args.pic_share > 0:
            pem, psum, pkl, pgap = dev_eval_pic()
            entry.update(dev_em_pic=pem, dev_summary_loss_pic=round(psum, 4),
                         dev_summary_kl_pic=round(pkl, 4), dev_summary_kv_gap=round(pgap, 4))
            line += (f"; as pic W={args.pic_junction}: dev QA EM {pem:.3f}, "
                     f"dev summary loss {psum:.3f}, KL(full || pic) {pkl:.4f} per token, "
                     f"first attention layer's cached K,V off by {pgap:.4f} (relative, squared)")
        log.append(entry)
        return line

    rng = random.Random(args.seed + 1 if args.train_seed is None else args.train_seed)
    # Which rows are computed as pic would: its own stream, so --pic-share 0 leaves the
    # examples of a run exactly as before.
    pic_rng = random.Random((args.seed + 1 if args.train_seed is None else args.train_seed) + 99)
    header = sum_header(args)
    log, tokens, step, start = [], 0, 0, time.time()
    print(f"start: {report(0, 0.0)}", flush=True)
    start = time.time()  # the budget counts training (and the evaluations during it) only
    clock_led = 0  # steps whose learning rate the clock set: then the run is not replayable
    while True:
        by_clock = (time.time() - start) / 60 / args.minutes
        progress = max(step / args.steps, by_clock)
        if progress >= 1.0:
            break
        clock_led += lr_at(progress) != lr_at(step / args.steps)
        passages, rows, share = long_stage(1.0 if args.last_stage_only else progress)
        if args.passages:
            passages, rows = args.passages, args.rows or rows
        if args.summary_share is not None:
            share = args.summary_share
        n_sum = sum(1 for _ in range(rows) if rng.random() < share)
        examples = [long_training_example(pools, tok, rng, passages, i < n_sum, args.followups,
                                          args.answers, args.cross_followups,
                                          args.sub_questions, header, args.sub_share,
                                          note_share=args.note_share)
                    for i in range(rows)]
        ids, w_ans, w_lm = batch_tensors(examples)
        tokens += int((w_ans + w_lm).sum()) + len(examples)
        for g in opt.param_groups:
            g["lr"] = lr_at(progress)
        spans = [ex[3] if pic_rng.random() < args.pic_share else None for ex in examples]
        # Summary rows come first (i < n_sum).
        distill = [args.pic_distill if args.pic_distill_rows == "all" or i < n_sum else 0.0
                   for i in range(rows)]
        parts = {}
        ans, lm, correct = losses(model, ids, w_ans, w_lm, spans, args.pic_junction,
                                  distill, teacher, parts, kv_gap=args.pic_kv_match > 0)
        loss = ans + args.lm_weight * lm
        if "kv_gap" in parts:  # only asked for with --pic-kv-match, on steps with pic rows
            loss = loss + args.pic_kv_match * parts["kv_gap"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        el = time.time() - start
        if step % args.log_every == 0:
            print(f"step {step}: progress {progress:.3f}, {passages[0]}-{passages[1]} passages x "
                  f"{rows} ({sum(s is not None for s in spans)} as pic), {ids.shape[1]} tokens, "
                  f"answer loss {ans.item():.3f}, lm loss "
                  f"{lm.item():.3f}{kv_note(parts)}, {tokens / el:.0f} tok/s, "
                  f"{el / 60:.1f} min, peak memory {peak_gib():.1f} GiB", flush=True)
            log.append({"step": step, "answer_loss": round(ans.item(), 4),
                        "lm_loss": round(lm.item(), 4), "passages": list(passages),
                        "minutes": round(el / 60, 2)})
        if step % args.eval_every == 0:
            print(f"  {report(step, round(el / 60, 2))}", flush=True)
            export(model, out, {"partial": True, "steps_run": step, "log": log})
    print(f"final {report(step, round((time.time() - start) / 60, 2))}", flush=True)
    replayable = clock_led == 0 and step >= args.steps
    schedule = ("steps" if replayable else
                f"minutes: the clock set the learning rate of {clock_led} of {step} steps"
                + ("" if step >= args.steps else f" and ended the run before --steps "
                   f"{args.steps}"))
    print(f"schedule set by {schedule}" + ("" if replayable else
          " (not replayable bit for bit; bound a run by --steps with a --minutes it cannot "
          "reach for that)"), flush=True)
    shown = init.resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    export(model, out, {"task": "long", "seed": args.seed, "init_from": str(shown),
                        "steps_asked": args.steps, "steps_run": step,
                        "minutes_budget": args.minutes, "schedule": schedule,
                        "lr": args.lr, "threads": args.threads, "plan": LONG_PLAN,
                        "parameters": n_params,
                        "extra_attention_layers": args.extra_attention_layers,
                        "slow_heads": args.slow_heads, "pic_share": args.pic_share,
                        "pic_junction": args.pic_junction, "pic_distill": args.pic_distill,
                        "pic_distill_rows": args.pic_distill_rows,
                        "pic_kv_match": args.pic_kv_match,
                        "summary_share": args.summary_share,
                        "last_stage_only": args.last_stage_only,
                        "passages": list(args.passages) if args.passages else None,
                        "rows": args.rows,
                        "answers": args.answers, "cross_followups": args.cross_followups,
                        "sub_questions": args.sub_questions, "sub_share": args.sub_share,
                        "note_share": args.note_share,
                        "summary_headers": args.summary_headers,
                        "minutes": round((time.time() - start) / 60, 1),
                        "peak_memory_gib": round(peak_gib(), 1),
                        "train_seed": args.train_seed, "torch": torch.__version__, "log": log,
                        "continues": earlier})
    print(f"wrote {out}", flush=True)


def main():
    import synth_long as sl

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "inputs/models/qwen3_5-synthqa"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--minutes", type=float, default=55.0,
                    help="time budget; training ends at --steps or after this, whichever first")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4, help="a multiple of 4 (3 GDN : 1 attention)")
    ap.add_argument("--hidden", type=int, default=256,
                    help="hidden size (the MLP is 3x; head counts and sizes stay)")
    ap.add_argument("--lm-weight", type=float, default=1.0,
                    help="weight of the loss on non-answer tokens")
    ap.add_argument("--induction-steps", type=int, default=600,
                    help="most steps of the copying stage (stage 1)")
    ap.add_argument("--induction-share", type=float, default=0.1,
                    help="share of each batch that is induction rows (induction_row)")
    ap.add_argument("--style", choices=["distinct", "repeat", "prose"], default="repeat",
                    help="passage wording (see passage_text)")
    ap.add_argument("--followups", type=int, default=24,
                    help="most extra questions per training prompt")
    ap.add_argument("--row-tokens", type=int, default=400,
                    help="fill each training row with distinct follow-up questions up to this "
                         "many tokens (less padding, more answers per step); 0: 0..--followups "
                         "random follow-ups per row")
    ap.add_argument("--curriculum", type=float, default=0.25,
                    help="share of the run trained on --early-passages instead of 3-6")
    ap.add_argument("--early-passages", type=lambda t: tuple(int(x) for x in t.split(",")),
                    default=(2, 4), help="fewest,most passages while in the curriculum")
    ap.add_argument("--test-queries", type=int, default=600)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--data-only", action="store_true",
                    help="write the tokenizer and the held-out data, do not train")
    ap.add_argument("--task", choices=["short", "long"], default="short",
                    help="short: the embedded model's task (3-6 passages); long: 16-32 passages "
                         "and summaries (synth_long.py), see LONG_PLAN")
    ap.add_argument("--train-seed", type=int, default=None,
                    help="--task long: seed of the training-example stream (default --seed + 1); "
                    "a run continuing another gives a new one so it sees new examples, while "
                    "--seed keeps the held-out sets")
    ap.add_argument("--init-from", default=str(ROOT / "inputs/models/qwen3_5-synthqa"),
                    help="--task long: model folder to start from (its tokenizer is kept)")
    ap.add_argument("--data-dir", default=str(ROOT / "inputs"),
                    help="--task long: held-out sets go to DATA_DIR/datasets")
    ap.add_argument("--dev-queries", type=int, default=100, help="--task long: dev questions")
    ap.add_argument("--test-summaries", type=int, default=200, help="--task long")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--plan", action="store_true", help="--task long: print the plan and stop")
    ap.add_argument("--extra-attention-layers", type=int, default=1,
                    help="--task long: full-attention layers appended (zero-initialised output)")
    ap.add_argument("--slow-heads", type=int, default=1,
                    help="--task long: value heads per linear layer given a slow decay")
    ap.add_argument("--pic-share", type=float, default=0.0,
                    help="--task long: share of rows computed as hypic's pic mode computes them "
                         "(scripts/train/pic_sim.py): passages each on their own past their junction "
                         "window, linear states composed, the suffix over the spliced caches")
    ap.add_argument("--pic-junction", type=int, default=0,
                    help="--task long: the junction width W of the --pic-share rows (hypic's "
                         "--junction; 0: every passage token cached)")
    ap.add_argument("--pic-distill", type=float, default=0.0,
                    help="--task long: in the --pic-share rows, weight of KL(full || pic) in "
                         "each answer token's loss, full being the full-recompute distribution "
                         "of the --init-from model, frozen (the rest is the cross-entropy; 1: "
                         "distillation only)")
    ap.add_argument("--pic-distill-rows", choices=["all", "summaries"], default="all",
                    help="--task long: the pic rows --pic-distill applies to; summaries: the "
                         "question rows keep the plain cross-entropy (for --answers chain, "
                         "whose answers the --init-from model does not give)")
    ap.add_argument("--pic-kv-match", type=float, default=0.0, metavar="WEIGHT",
                    help="--task long: add WEIGHT x the pic rows' kv_gap to the loss (the "
                    "first attention layer's keys and values of the cached tokens, pic's "
                    "against full recompute's, relative squared difference; pic_sim.py), "
                    "pulling both toward each other")
    ap.add_argument("--summary-share", type=float, default=None,
                    help="--task long: share of summary rows (default: LONG_PLAN's)")
    ap.add_argument("--passages", type=lambda v: tuple(int(x) for x in v.split(",")),
                    default=None, metavar="LO,HI",
                    help="--task long: passages per training prompt throughout, instead of "
                         "LONG_PLAN's stages (with --rows: rows per step)")
    ap.add_argument("--rows", type=int, default=None,
                    help="--task long with --passages: rows per step (default: the stage's)")
    ap.add_argument("--last-stage-only", action="store_true",
                    help="--task long: train on LONG_PLAN's last stage throughout (fine-tuning "
                         "a long-task model)")
    ap.add_argument("--answers", choices=sl.ANSWER_STYLES,
                    default="final",
                    help="--task long: how the two-named-passage questions and their answers "
                         "are worded, in training and in the held-out sets written: final is "
                         "the fact alone; chain names the bridge entity, then the fact "
                         "(\"Brell Works, based in Dravo\"); tail (the committed long model) "
                         "is chain with questions that end with the first step's subject "
                         "(\"Where is the company based that Tarik Velmo worked at?\"); "
                         "asked is chain with questions that ask both steps (\"Which company "
                         "did Tarik Velmo work at, and where is it based?\"); sentences writes "
                         "the two passage sentences the steps read (\"Tarik Velmo worked at "
                         "Brell Works. Brell Works is based in Dravo.\"); evidence the first "
                         "of them, then the chain's second step (\"Tarik Velmo worked at Brell "
                         "Works, based in Dravo\"); see synth_long.py")
    ap.add_argument("--cross-followups", type=float, default=None,
                    help="--task long: share of each QA row's follow-up questions drawn from the "
                         "cross-passage kinds (as many as the prompt has); default: uniform")
    ap.add_argument("--summary-headers", action="store_true",
                    help="--task long: summary prompts put a header 'Passage N:' before each "
                         "passage, as its own segment (templates.json's synthsum 'header'), so "
                         "the passage order a summary follows is in the text while each "
                         "passage stays position-independent")
    ap.add_argument("--sub-questions", action="store_true",
                    help="--task long: follow-ups also ask a chain's first step on its own "
                         "(\"Who was the mentor of X?\", \"Who founded C?\"; training only)")
    ap.add_argument("--note-share", type=float, default=None,
                    help="--task long: probability that a person filling a training prompt has "
                         "a pronoun note (moved_to) after it (default and the held-out sets: "
                         "synth_long.NOTE_SHARE, 0.25)")
    ap.add_argument("--sub-share", type=float, default=None,
                    help="--task long with --sub-questions: up to this share of each QA row's "
                         "follow-ups asks a chain's first step (default: drawn among the "
                         "one-passage kinds: 12 %% of the follow-ups at --cross-followups "
                         "0.5 over 16-32 passages, 22 %% over 2-4; --data-only prints it)")
    args = ap.parse_args()
    if args.sub_share is not None and not (args.sub_questions and 0.0 <= args.sub_share <= 1.0):
        raise SystemExit("--sub-share is a share between 0 and 1 of the follow-ups, with "
                         "--sub-questions")
    if not 0.0 <= args.pic_distill <= 1.0:
        raise SystemExit("--pic-distill is a weight between 0 and 1")
    if args.note_share is None:
        import synth_long as sl

        args.note_share = sl.NOTE_SHARE
    if not 0.0 <= args.note_share <= 1.0:
        raise SystemExit("--note-share is a probability between 0 and 1")
    if args.pic_kv_match < 0:
        raise SystemExit("--pic-kv-match is a weight of 0 or more")
    if args.pic_kv_match > 0 and args.pic_share == 0:
        raise SystemExit("--pic-kv-match applies to the --pic-share rows: give --pic-share too")
    if args.pic_distill > 0 and args.pic_share == 0:
        raise SystemExit("--pic-distill applies to the --pic-share rows: give --pic-share too")
    if args.passages and not (len(args.passages) == 2
                              and 1 <= args.passages[0] <= args.passages[1]):
        raise SystemExit("--passages is LO,HI with 1 <= LO <= HI")
    if args.rows is not None and (args.passages is None or args.rows < 1):
        raise SystemExit("--rows is a positive count of rows per step, with --passages")
    if args.task == "long":
        if args.plan:
            print_long_plan(args)
            return
        return main_long(args)
    global STYLE
    STYLE = args.style

    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pools = Pools(args.seed)
    tok = train_tokenizer(pools, args.seed, args.vocab)
    tok.save(str(out / "tokenizer.json"))
    dev = write_datasets(pools, tok, args)
    print(f"tokenizer: {tok.get_vocab_size()} tokens; dev prompts "
          f"{sum(len(p) for p, *_ in dev) / len(dev):.0f} tokens on average", flush=True)
    if args.data_only:
        return

    cfg = make_config(args.vocab, 0, args.layers, args.hidden)
    model = Qwen3_5ForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))
    # Progress is the larger of steps done / --steps and minutes spent / --minutes, so the
    # run ends (with the learning rate annealed) within the time budget on a slow or busy
    # machine. A run that ends by steps is reproducible from --seed; training.json records
    # how far it got.
    def lr_at(progress):
        if progress < 0.05:
            return args.lr * max(progress, 1e-3) / 0.05
        t = (progress - 0.05) / 0.95
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))

    rng = random.Random(args.seed)
    log = []
    start = time.time()
    # Stage 1: copying. Induction rows only, until the model copies (loss on the repeats
    # below 1 nat, vs ln V ~ 7.6 when it cannot), --induction-steps or the end of --minutes
    # (then no QA step runs). Without this the QA task sits on a plateau (answers guessed by
    # type, EM ~0) for longer than the budget.
    smooth = None
    for i in range(args.induction_steps):
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, (i + 1) / 20)
        ids, w_ans, w_lm = batch_tensors([induction_row(rng, tok.get_vocab_size())
                                          for _ in range(args.batch)])
        _, lm, _ = losses(model, ids, w_ans, w_lm)
        opt.zero_grad(set_to_none=True)
        lm.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        smooth = lm.item() if smooth is None else 0.9 * smooth + 0.1 * lm.item()
        if (i + 1) % 20 == 0:
            print(f"copy step {i + 1}: loss on repeats {smooth:.3f}, "
                  f"{(time.time() - start) / 60:.1f} min", flush=True)
        if smooth < 1.0 or (time.time() - start) / 60 >= args.minutes:
            break
    log.append({"stage": "copy", "steps": i + 1, "loss_on_repeats": round(smooth, 3),
                "minutes": round((time.time() - start) / 60, 2)})

    tokens = 0
    step = 0
    while True:
        progress = max(step / args.steps, (time.time() - start) / 60 / args.minutes)
        if progress >= 1.0:
            break
        # Curriculum: 2-4 passages for the first quarter of the run, then the test range.
        passages = args.early_passages if progress < args.curriculum else (3, 6)
        n_aux = round(args.batch * args.induction_share)
        examples = [encode_example(tok, training_example(pools, rng, passages, args.followups,
                                                         args.row_tokens > 0))
                    for _ in range(args.batch - n_aux)]
        if args.row_tokens > 0:
            examples = [fit_row(ex, args.row_tokens) for ex in examples]
        examples += [induction_row(rng, tok.get_vocab_size()) for _ in range(n_aux)]
        ids, w_ans, w_lm = batch_tensors(examples)
        tokens += int((w_ans + w_lm).sum()) + len(examples)
        for g in opt.param_groups:
            g["lr"] = lr_at(progress)
        ans, lm, correct = losses(model, ids, w_ans, w_lm)
        loss = ans + args.lm_weight * lm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        done = step
        if done % 20 == 0:
            el = time.time() - start
            print(f"step {done}: progress {progress:.3f}, answer loss {ans.item():.3f}, lm loss "
                  f"{lm.item():.3f}, batch EM {correct[w_ans.sum(1) > 0].float().mean().item():.2f}, "
                  f"{tokens / el:.0f} tok/s, {el / 60:.1f} min", flush=True)
        if done % args.eval_every == 0:
            em, kinds = evaluate(model, dev)
            print(f"  dev EM {em:.3f} {kinds}", flush=True)
            log.append({"step": done, "dev_em": em, "dev_em_per_kind": kinds,
                        "answer_loss": round(ans.item(), 4), "minutes":
                        round((time.time() - start) / 60, 2)})
            export(model, out, {"partial": True, "steps_run": done, "log": log})

    em, kinds = evaluate(model, dev)
    print(f"final dev EM {em:.3f} {kinds}", flush=True)
    log.append({"step": step, "dev_em": em, "dev_em_per_kind": kinds,
                "minutes": round((time.time() - start) / 60, 2)})
    export(model, out, {"seed": args.seed, "steps_asked": args.steps, "steps_run": step,
                        "minutes_budget": args.minutes, "batch": args.batch, "lr": args.lr,
                        "threads": args.threads, "parameters": n_params,
                        "minutes": round((time.time() - start) / 60, 1),
                        "peak_memory_gib": round(peak_gib(), 1),
                        "torch": torch.__version__, "log": log})
    print(f"wrote {out}", flush=True)


if __name__ == "__main__":
    main()
