"""The long synthetic tasks of `scripts/train/train_tiny.py --task long` (docs/datasets.md):
Takes: nothing to run alone: a module of train_tiny.py (drawing the sets takes seconds).

- synthqa_long: questions over 16-32 passages (about 4-8k tokens). Passages are long (the
  facts are scattered among 10-18 sentences about other entities of the world), refer to
  entities introduced in other passages (employer, mentor, founder, people met), and a
  person may have a continuation passage right after their own that names them only by
  pronoun ("Later years\nShe moved to Dravo in 1890. ..."). Cross-passage kinds place their
  evidence far apart (first third / last third of the prompt) or, for `moved_to`, rely on
  the pronoun passage following its person, so the state carried across a segment boundary
  matters.
- synthsum: a multi-document summary (MultiNews / GovReport style) over the same kind of
  prompt: one sentence per passage, in prompt order, each naming a fact of that passage;
  scored with ROUGE-L.

Only the standard library here; the world's vocabulary (Pools) and JOBS/PRODUCTS come from
train_tiny.py. Everything is drawn from the `random.Random` passed in, so a seed fixes it.
"""
import random
import re

SUM_PREFIX = "Read the passages, then summarize them.\n\n"
SUM_SUFFIX = "\nSummary:"
# With train_tiny.py --summary-headers: before each passage, as a segment of its own.
SUM_HEADER = "Passage {index}:\n"

SINGLE_KINDS = ["born_where", "born_when", "job", "employer", "company_where", "company_when",
                "product"]
CROSS_KINDS = ["two_hop", "mentor_born", "founder_job", "moved_to"]
# The probability that a person drawn to fill a prompt has its pronoun note after it (the
# held-out sets'; train_tiny.py --note-share changes it for training prompts).
NOTE_SHARE = 0.25
LONG_KINDS = SINGLE_KINDS + CROSS_KINDS

# Question wording per kind ({} is the subject's name). `mentor` and `founder` ask a chain's
# first step on its own; the employer step is `employer`.
QUESTIONS = {"born_where": "Where was {} born?", "born_when": "In which year was {} born?",
             "job": "What was {}'s job?", "employer": "Which company did {} work at?",
             "company_where": "Where is {} based?",
             "company_when": "In which year was {} founded?", "product": "What does {} make?",
             "two_hop": "Where is the company that {} worked at based?",
             "mentor_born": "Where was the mentor of {} born?",
             "founder_job": "What was the job of the founder of {}?",
             "moved_to": "Where did {} move to?", "mentor": "Who was the mentor of {}?",
             "founder": "Who founded {}?"}
# The passage sentences a two-passage question chains, per kind: the first step's up to its
# bridge ({} the subject), the second step's ({name} the bridge). The passages and the
# answers of the styles "sentences" and "evidence" are written from these.
STEP_WORDS = {"two_hop": "{} worked at", "mentor_born": "{} studied under",
              "founder_job": "{} was founded by"}
FACT_WORDS = {"two_hop": "{name} is based in {town}", "mentor_born": "{name} was born in {town}",
              "founder_job": "{name} worked as a {job}"}
# A two-passage question's first step asked on its own (a kind of QUESTIONS), and its second
# step as the style "asked" words it after the first: "Who was the mentor of X, and where
# was that person born?".
FIRST_STEP = {"two_hop": "employer", "mentor_born": "mentor", "founder_job": "founder"}
# The kinds whose first step is asked only as a chain's step (`--sub-questions`): the
# employer step is the one-passage kind `employer`.
SUB_STEPS = ("mentor_born", "founder_job")
SECOND_ASKED = {"two_hop": "where is it based?", "mentor_born": "where was that person born?",
                "founder_job": "what was that person's job?"}
ASKED_QUESTIONS = {k: QUESTIONS[FIRST_STEP[k]].rstrip("?") + ", and " + SECOND_ASKED[k]
                   for k in FIRST_STEP}
# The style "tail": one question that ends with its first step's relation and subject, in
# nearly the words that ask the step on its own ("... who was the mentor of X?").
TAIL_QUESTIONS = {"two_hop": "Where is the company based that {} worked at?",
                  "mentor_born": "Where was the person born who was the mentor of {}?",
                  "founder_job": "What was the job of the person who founded {}?"}


class LongWorld:
    """Persons (with a mentor and a move, told in a pronoun-only continuation passage) and
    companies (with a founder). Names are unique within a world."""

    def __init__(self, pools, rng, n_persons, n_companies, jobs, products):
        self.products = products
        self.towns = pools.towns
        self.companies = []
        for name in rng.sample(pools.companies, n_companies):
            self.companies.append({"kind": "company", "name": name,
                                   "town": rng.choice(pools.towns),
                                   "year": rng.randint(1800, 1999),
                                   "product": rng.choice(products)})
        names, self.persons = set(), []
        while len(self.persons) < n_persons:
            name = f"{rng.choice(pools.first)} {rng.choice(pools.last)}"
            if name in names:
                continue
            names.add(name)
            self.persons.append({"kind": "person", "name": name,
                                 "he": rng.choice(["He", "She"]),
                                 "town": rng.choice(pools.towns),
                                 "year": rng.randint(1800, 1999),
                                 "job": rng.choice(jobs),
                                 "company": rng.choice(self.companies)["name"],
                                 "moved_town": rng.choice(pools.towns),
                                 "moved_year": rng.randint(1800, 1999)})
        for p in self.persons:
            p["mentor"] = rng.choice([q for q in self.persons if q is not p])["name"]
        for c in self.companies:
            c["founder"] = rng.choice(self.persons)["name"]
        self.by_name = {e["name"]: e for e in self.persons + self.companies}
        # Fixed wording per entity: the same passage text wherever it appears (so it is one
        # store entry), drawn once here.
        for e in self.persons + self.companies:
            e["text"] = self._passage(e, rng)
        for p in self.persons:
            p["note"] = {"kind": "note", "name": p["name"] + " (later years)", "of": p,
                         "text": self._note(p, rng)}

    def _filler(self, rng, subj, company_subject=False):
        other = rng.choice(self.persons)["name"]
        comp = rng.choice(self.companies)["name"]
        town, year, prod = rng.choice(self.towns), rng.randint(1800, 1999), rng.choice(
            self.products)
        if company_subject:
            return rng.choice([f"{subj} sold {prod} to {comp}.",
                               f"{subj} opened a shop in {town} in {year}.",
                               f"{subj} hired {other}.",
                               f"{subj} bought {prod} from {comp}."])
        return rng.choice([f"{subj} visited {town} in {year}.", f"{subj} met {other} in {town}.",
                           f"{subj} bought {prod} from {comp}.",
                           f"{subj} wrote a letter to {other}.", f"{subj} liked {prod}."])

    def _passage(self, e, rng):
        n = e["name"]
        if e["kind"] == "person":
            core = [FACT_WORDS["mentor_born"].format(**e) + ".", f"{n} was born in {e['year']}.",
                    FACT_WORDS["founder_job"].format(**e) + ".",
                    f"{STEP_WORDS['two_hop'].format(n)} {e['company']}.",
                    f"{STEP_WORDS['mentor_born'].format(n)} {e['mentor']}."]
        else:
            core = [FACT_WORDS["two_hop"].format(**e) + ".", f"{n} was founded in {e['year']}.",
                    f"{n} makes {e['product']}.",
                    f"{STEP_WORDS['founder_job'].format(n)} {e['founder']}."]
        fill = [self._filler(rng, n, e["kind"] == "company") for _ in range(rng.randint(12, 22))]
        # The facts keep their order but are scattered among the other sentences.
        slots = sorted(rng.sample(range(len(core) + len(fill)), len(core)))
        body, ci, fi = [], 0, 0
        for i in range(len(core) + len(fill)):
            if ci < len(core) and i == slots[ci]:
                body.append(core[ci])
                ci += 1
            else:
                body.append(fill[fi])
                fi += 1
        return f"{n}\n" + " ".join(body)

    def _note(self, p, rng):
        he = p["he"]
        fill = [self._filler(rng, he) for _ in range(rng.randint(6, 10))]
        fill.insert(rng.randint(0, len(fill)), f"{he} moved to {p['moved_town']} in "
                    f"{p['moved_year']}.")
        return "Later years\n" + " ".join(fill)


ANSWER_STYLES = ("final", "chain", "sentences", "evidence", "asked", "tail")


def long_question(e, kind, world, answers="final"):
    """(question, answer, the passages needed in reading order). `answers` words a question
    whose evidence is in two named passages (two_hop, mentor_born, founder_job), or its
    answer:
    - "final": the fact alone ("Dravo"; the long model's runs 1-6);
    - "chain" (runs 7-11 of the long model): the bridge entity first, then the
      fact about it ("Brell Works, based in Dravo"), so the model reads one passage per
      step of its answer;
    - "sentences": the two sentences of the passages that hold the steps, word for word
      ("Tarik Velmo worked at Brell Works. Brell Works is based in Dravo.");
    - "evidence": the first step's sentence, then the chain's second step ("Tarik Velmo
      worked at Brell Works, based in Dravo").
    - "asked": the answers of "chain", with a question that asks both steps, the first in
      the words that ask it on its own ("Which company did Tarik Velmo work at, and where
      is it based?"; ASKED_QUESTIONS).
    - "tail" (the committed long model and demo set, since run 12): the answers of
      "chain", with a question that ends with the first step's relation and subject
      ("Where is the company based that Tarik Velmo worked at?"; TAIL_QUESTIONS).
    In "sentences" and "evidence" the bridge is the word that follows its subject and
    relation in its passage, those words written just before it, as after a question that
    asks the step on its own. With every style but "final", exact match needs both steps
    right. moved_to (the pronoun note) keeps the fact alone in every style. `mentor` and
    `founder` ask a chain's first step on its own (training follow-ups and
    synthqa_long_sub.jsonl only; the employer step is `employer`)."""
    if answers not in ANSWER_STYLES:
        raise ValueError(f"answers must be one of {ANSWER_STYLES}, not {answers!r}")
    if answers in ("sentences", "evidence") and kind in STEP_WORDS:
        question, chained, needed = long_question(e, kind, world, "chain")
        bridge = needed[1]["name"]
        step = STEP_WORDS[kind].format(e["name"]) + " " + bridge
        if answers == "evidence":
            return question, step + chained[len(bridge):], needed
        return question, f"{step}. {FACT_WORDS[kind].format(**needed[1])}.", needed
    reworded = {"asked": ASKED_QUESTIONS, "tail": TAIL_QUESTIONS}.get(answers, {})
    if kind in reworded:
        _, chained, needed = long_question(e, kind, world, "chain")
        return reworded[kind].format(e["name"]), chained, needed
    chain = answers in ("chain", "asked", "tail")
    question = QUESTIONS[kind].format(e["name"])
    if kind == "mentor":
        return question, e["mentor"], [e]
    if kind == "founder":
        return question, e["founder"], [e]
    if kind in SINGLE_KINDS:
        field = {"born_where": "town", "born_when": "year", "job": "job", "employer": "company",
                 "company_where": "town", "company_when": "year", "product": "product"}[kind]
        return question, str(e.get(field)), [e]
    if kind == "two_hop":
        c = world.by_name[e["company"]]
        return question, f"{c['name']}, based in {c['town']}" if chain else c["town"], [e, c]
    if kind == "mentor_born":
        m = world.by_name[e["mentor"]]
        return question, f"{m['name']}, born in {m['town']}" if chain else m["town"], [e, m]
    if kind == "founder_job":
        f = world.by_name[e["founder"]]
        return question, f"{f['name']}, a {f['job']}" if chain else f["job"], [e, f]
    return question, e["moved_town"], [e, e["note"]]


_FIRST_STEP_ALONE = re.compile("|".join(
    re.escape(QUESTIONS[FIRST_STEP[k]]).replace(re.escape("{}"), "[^,]+") for k in SUB_STEPS))


def is_first_step(question):
    """Whether a question asks a chain's first step on its own (kinds `mentor`, `founder`),
    not inside a question of the style "asked"."""
    return _FIRST_STEP_ALONE.fullmatch(question) is not None


def kinds_for(e, sub=False):
    """The question kinds about `e`; with `sub`, also its chain-first-step kind (`mentor` for
    a person, `founder` for a company)."""
    if e["kind"] == "company":
        return ["company_where", "company_when", "product", "founder_job"] + (
            ["founder"] if sub else [])
    if e["kind"] == "person":
        return ["born_where", "born_when", "job", "employer", "two_hop", "mentor_born",
                "moved_to"] + (["mentor"] if sub else [])
    return []


def _arrange(needed, others, rng, far):
    """Prompt order: `others` shuffled; two needed passages go to the first and the last
    third when `far` (a person's note always right after the person)."""
    order = list(others)
    rng.shuffle(order)
    if not needed:
        pass
    elif len(needed) == 1:
        order.insert(rng.randint(0, len(order)), needed[0])
    elif needed[1]["kind"] == "note":
        i = rng.randint(0, len(order))
        order[i:i] = needed
    else:
        a, b = needed
        if rng.random() < 0.5:
            a, b = b, a
        n = len(order) + 2
        if far:
            i = rng.randint(0, max(0, n // 3 - 1))
            order.insert(i, a)
            j = rng.randint(min(len(order), 2 * n // 3), len(order))
            order.insert(j, b)
        else:
            order.insert(rng.randint(0, len(order)), a)
            order.insert(rng.randint(0, len(order)), b)
    # Notes of persons in the prompt follow them (a dangling note would name nobody).
    out = []
    for e in order:
        if e["kind"] == "note":
            continue
        out.append(e)
        if e["kind"] == "person" and (e.get("_with_note") or any(
                x["kind"] == "note" and x["of"] is e for x in needed)):
            out.append(e["note"])
    return out


def draw_long_prompt(world, rng, passages=(16, 32), kind=None, answers="final",
                     note_share=NOTE_SHARE):
    """A question over `passages` passages (fewest, most; person notes count); each person
    drawn to fill the prompt has a pronoun note after it with probability `note_share`."""
    if kind is None:
        kind = rng.choices(LONG_KINDS, weights=[1] * len(SINGLE_KINDS) +
                           [1.5] * len(CROSS_KINDS))[0]
    if kind in ("company_where", "company_when", "product", "founder_job"):
        target = rng.choice(world.companies)
    else:
        target = rng.choice(world.persons)
    q, a, needed = long_question(target, kind, world, answers)
    entities = _fill(world, rng, needed, rng.randint(*passages), note_share)
    order = _arrange(needed, [e for e in entities if e not in needed], rng,
                     far=rng.random() < 0.8)
    return {"kind": kind, "question": q, "answer": a, "entities": order, "needed": needed}


def _fill(world, rng, needed, n, note_share=NOTE_SHARE):
    chosen = {id(e) for e in needed}
    for e in world.persons:
        e["_with_note"] = False
    count = len(needed)
    out = list(needed)
    while count < n:
        pool = world.persons if rng.random() < 0.6 else world.companies
        e = rng.choice(pool)
        if id(e) in chosen:
            continue
        chosen.add(id(e))
        out.append(e)
        count += 1
        if e["kind"] == "person" and count < n and rng.random() < note_share:
            e["_with_note"] = True
            count += 1
    for e in needed:
        if e["kind"] == "person" and not any(x["kind"] == "note" for x in needed) and \
                rng.random() < note_share and count < n:
            e["_with_note"] = True
            count += 1
    return out


def summary_of(entities):
    """The reference summary: one sentence per passage, in prompt order."""
    out = []
    for e in entities:
        if e["kind"] == "person":
            out.append(f"{e['name']} worked as a {e['job']}.")
        elif e["kind"] == "company":
            out.append(f"{e['name']} makes {e['product']}.")
        else:
            out.append(f"{e['of']['he']} moved to {e['of']['moved_town']}.")
    return " ".join(out)


def draw_summary_prompt(world, rng, passages=(16, 32), note_share=NOTE_SHARE):
    entities = _fill(world, rng, [], rng.randint(*passages), note_share)
    order = _arrange([], entities, rng, far=False)
    return {"kind": "summary", "question": "", "answer": summary_of(order), "entities": order}


def followups(ex, world, rng, most, answers="final", cross_share=None, sub=False,
              sub_share=None):
    """Distinct further questions on the prompt's passages (never the first question). With
    `cross_share`, up to that share of them are of the CROSS_KINDS (as many as the prompt
    has), the rest one-passage ones; without it, a uniform draw over all of them. With
    `sub`, the one-passage ones include the chains' first steps (`kinds_for`); `sub_share`
    sets aside up to that share of all of them for those first steps."""
    names = {e["name"] for e in ex["entities"]}
    pairs = []
    for e in ex["entities"]:
        for k in kinds_for(e, sub):
            q, a, needed = long_question(e, k, world, answers)
            if q != ex["question"] and all(n["name"] in names for n in needed):
                pairs.append((q, a, k))
    rng.shuffle(pairs)
    first = []
    if sub and sub_share is not None:
        steps = [p for p in pairs if p[2] in ("mentor", "founder")]
        first = steps[:round(most * sub_share)]
        pairs = [p for p in pairs if p not in first]
        most -= len(first)
    if cross_share is None:
        if not first:
            return [(q, a) for q, a, _ in pairs[:most]]
        out = [(q, a) for q, a, _ in first + pairs[:most]]
        rng.shuffle(out)
        return out
    cross = [(q, a) for q, a, k in pairs if k in CROSS_KINDS]
    single = [(q, a) for q, a, k in pairs if k not in CROSS_KINDS]
    n_cross = min(len(cross), round(most * cross_share))
    out = [(q, a) for q, a, _ in first] + cross[:n_cross] + single[:most - n_cross]
    rng.shuffle(out)
    return out


def training_world(pools, rng, jobs, products):
    """A fresh world per training prompt, big enough for 32 passages: facts can only be read."""
    return LongWorld(pools, rng, n_persons=36, n_companies=14, jobs=jobs, products=products)
