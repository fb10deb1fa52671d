#!/usr/bin/env python3
"""Golden ids for hypic's tiktoken tokenizer (Kimi-Linear's tiktoken.model format).
Takes: seconds (needs tiktoken).

Kimi's real tiktoken.model (163,584 ranks) is not available offline, so this script trains a
small SYNTHETIC rank file with tiktoken's own educational trainer on a generated corpus
(English, code, CJK, kana, Hangul, Cyrillic, Greek, emoji), writes it in the published layout
(one "base64(bytes) rank" line per token) next to a tokenizer_config.json naming some of the
258 special ids the way Kimi's does, and records what the `tiktoken` library (with Kimi's
published split pattern from tokenization_kimi.py, and its special ids n .. n+257) gives for
texts of our own: ids with special tokens allowed ("all") and with them encoded as text
(disallowed_special=()), and the decoded text.

Output: tests/data/tokenizer/kimi/{tiktoken.model, tokenizer_config.json, golden.json}
Usage:  python3 scripts/golden/make_tiktoken_golden.py [--out DIR]
"""

import argparse
import base64
import json
import os
import random

import tiktoken
from tiktoken._educational import bpe_train

# Kimi-Linear's pattern, verbatim from tokenization_kimi.py (Rust regex syntax: [X&&[^Y]]).
KIMI_PAT = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
# The trainer runs Python's `regex` module, which reads && literally; it splits with the same
# pattern minus the Han exclusion (only the training pieces differ, not what is tested).
TRAIN_PAT = (
    r"""[\p{Han}]+|[^\r\n\p{L}\p{N}]?\p{L}+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
N_RESERVED = 256 + 2
# Names for some special ids (offset from the first special id), as Kimi's config names them.
SPECIAL_NAMES = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                 6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
                 17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]"}

WORDS = ("the quick brown fox jumps over the lazy dog while tokenizers split text into pieces "
         "and merge frequent byte pairs into tokens HelloWorld JSONParser getHTTPResponseCode "
         "don't I'm we're they've she'll it'd DON'T WE'RE naïve café résumé Ελληνικά Кириллица").split()
CJK = ["今天天气很好", "我们一起学习", "机器学习模型", "こんにちは世界", "カタカナ", "한국어 텍스트", "東京大学"]
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
        "if x != None and y >= 10:", "const auto& [k, v] = *it;", "std::vector<int> ids{1, 2, 3};"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️"]


def corpus(seed=7, n=2500):
    rng = random.Random(seed)
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.55:
            parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + rng.choice([".", ",", "!", "?", "\n"]))
        elif r < 0.75:
            parts.append(rng.choice(CJK) + rng.choice(["。", "，", "\n", ""]))
        elif r < 0.9:
            parts.append(rng.choice(CODE))
        else:
            parts.append(str(rng.randint(0, 10**rng.randint(1, 9))) + rng.choice(EMOJI) + " ")
    return " ".join(parts)


TEXTS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "HelloWorld JSONParser getHTTPResponseCode",
    "don't DON'T we're WE'RE it'd I'M",
    "今天天气很好，我们一起学习。",
    "机器学习模型 and English mixed 中文English混合",
    "こんにちは世界 カタカナ ひらがな",
    "한국어 텍스트입니다",
    "naïve café résumé — naïve café (decomposed)",
    "Ελληνικά Кириллица العربية हिन्दी",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇯🇵 heart ❤️",
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "numbers 1234567890 3.14159 -42 1,000,000",
    "spaces:     five, tabs:\t\t\ttwo, newlines:\n\n\nthree",
    "trailing spaces   \n   leading spaces",
    "windows\r\nline\r\nendings\r\n",
    "nbsp\u00a0here ideographic\u3000space",
    "[BOS]Hello<|im_end|> world[EOS]",
    "<|im_user|>user<|im_middle|>Hi there<|im_end|><|im_assistant|>assistant<|im_middle|>",
    "<|reserved_token_999999|> is not special; <|im_end| is incomplete",
    "a" * 40 + " " + "ab" * 25,
    "       ",
    "\n",
]


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--out", default=os.path.join(here, "tests", "data", "tokenizer", "kimi"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ranks = bpe_train(corpus(), 256 + 700, TRAIN_PAT, visualise=None)
    n = len(ranks)
    assert sorted(ranks.values()) == list(range(n))
    with open(os.path.join(a.out, "tiktoken.model"), "w") as f:
        for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {r}\n")
    added = {str(n + off): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": True} for off, name in SPECIAL_NAMES.items()}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added, "bos_token": "[BOS]", "eos_token": "[EOS]",
                   "tokenizer_class": "TikTokenTokenizer"}, f, indent=1)
        f.write("\n")
    specials = {SPECIAL_NAMES.get(i - n, f"<|reserved_token_{i}|>"): i for i in range(n, n + N_RESERVED)}
    enc = tiktoken.Encoding(name="kimi-synthetic", pat_str=KIMI_PAT, mergeable_ranks=ranks,
                            special_tokens=specials)
    cases = []
    for t in TEXTS:
        ids = enc.encode(t, allowed_special="all")
        as_text = enc.encode(t, disallowed_special=())
        cases.append({"text": t, "ids": ids, "ids_special_as_text": as_text,
                      "decoded": enc.decode(ids)})
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump({"generator": "scripts/golden/make_tiktoken_golden.py", "tiktoken_version": tiktoken.__version__,
                   "ranks": n, "special_ids": [n, n + N_RESERVED - 1], "synthetic": True,
                   "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{n} ranks, {len(cases)} cases -> {a.out}")


if __name__ == "__main__":
    main()
