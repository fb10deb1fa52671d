#!/usr/bin/env python3
"""Golden data for hypic's tokenizer (tests/unit/tokenizer_test.cpp).
Takes: seconds (needs tokenizers).

Trains a small byte-level BPE tokenizer of the Qwen2/Qwen3 kind with the Hugging Face
`tokenizers` package (NFC normalizer, Qwen2's Split pattern + ByteLevel pre-tokenizer,
ByteLevel decoder, <|endoftext|> <|im_start|> <|im_end|> special tokens and non-special
<think> </think>) on a corpus generated here, then records the reference ids and decodes of
a text set that exercises English, CJK, emoji, accents (composed and decomposed), long
numbers, whitespace runs, tabs, newlines, contractions and special tokens.

Writes tests/data/tokenizer/tokenizer.json and tests/data/tokenizer/golden.json.
Needs: pip install tokenizers (0.23 used for the committed files).
"""
import json
import pathlib
import random
import sys

import tokenizers
from tokenizers import AddedToken, Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "train"))  # qwen_bpe.py, shared with train_tiny.py
from qwen_bpe import train_qwen_bpe  # noqa: E402
OUT = ROOT / "tests" / "data" / "tokenizer"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2000

# A corpus written for this project: sentences about caches, clusters and travel, with
# numbers, code and several scripts, recombined at random (fixed seed).
SUBJECTS = ["The cluster", "A segment store", "Our scheduler", "The linear layer", "Each rank",
            "The junction window", "A hybrid model", "The router", "This benchmark", "Maria",
            "The ferry to Skye", "Old Tom's bakery", "The night train", "A quiet library"]
VERBS = ["caches", "recomputes", "streams", "composes", "rotates", "schedules", "stores",
         "prefills", "decodes", "warms", "measures", "reorders", "bakes", "carries", "opens"]
OBJECTS = ["every document", "the transition operator", "forty segments", "the question",
           "a long prompt", "position-independent states", "the attention keys",
           "fresh bread at dawn", "passengers and bicycles", "rare maps of the coast",
           "the prefix cache", "ten thousand tokens", "each retrieved passage"]
TAILS = ["before noon.", "in parallel.", "without a single miss!", "on four GPUs.",
         "while the queue drains.", "at 3.14 GHz.", "since 1987.", "and it's fast.",
         "but they're careful.", "so we'll see.", "because I'm sure.", "(mostly).",
         "- twice a day;", "as the docs say: \"always\".", "then stops..."]
FREE_TEXT = [
    "Caching is easy; invalidation is hard. We've learned that the hard way, haven't we?",
    "Position-independent caching lets a prompt reuse segments in any order.",
    "The café on Rue Mouffetard serves crème brûlée, piña colada and a naïve soufflé.",
    "Zoë and Chloé met Björn in Ærøskøbing; Ångström units measure façades?",
    "Español: ¿Dónde está la estación? Português: ação, coração, não. Français: où, déjà.",
    "Deutsch: Größe, Straße, Übermäßig schön. Čeština: příliš žluťoučký kůň úpěl.",
    "Ελληνικά: Καλημέρα κόσμε, η ΟΔΟΣ είναι μακριά. Русский: Привет, мир! Как дела?",
    "日本語の文章も少し含めます。東京は大きな都市です。キャッシュは速い。",
    "中文：位置无关缓存可以重复使用文档片段。我们在集群上进行批量预填充。",
    "한국어 문장도 있습니다. 캐시는 빠릅니다. 서울은 큰 도시입니다.",
    "العربية: مرحبا بالعالم. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก",
    "Emoji: 🚀 launch, 🧠 model, 🔥 hot path, 👩‍💻 coder, 🇫🇷 flag, ❤️ heart, 👍🏽 thumbs.",
    "def encode(text):\n    return [vocab[t] for t in split(text)]\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += x[i] * y[i];\n}\n",
    "{\"id\": 42, \"tokens\": [151643, 151644, 151645], \"ok\": true}",
    "Numbers: 0, 7, 42, 1999, 2024-05-17, 3.14159, 6.022e23, 1,000,000 and 123456789012.",
    "Phone +44 20 7946 0958; invoice #A-0012/24; 99.5% of 1200 requests took < 35 ms.",
    "Line one\nLine two\n\nParagraph two starts here.\r\nWindows line ending.\r\n",
    "    Indented with four spaces\n\tIndented with a tab\n        Deeper still",
    "SHOUTING IS NOT POLITE, BUT IT'S COMMON; WE'RE TOLD THEY'VE STOPPED.",
    "I'd say you'll find it's what we've wanted: they'd agree, she'll see, he's right.",
]


SYLLABLES = ["ka", "lo", "mi", "ter", "vel", "sun", "dra", "pol", "qui", "zen", "bar", "cor",
             "ish", "ment", "ing", "tion", "al", "ex", "pre", "stor", "age", "clu", "ster",
             "rou", "ter", "seg", "me", "nt", "wa", "rm", "dec", "ode", "fil", "lum", "nor",
             "ath", "ui", "que", "ble", "ful", "ness", "ward", "ly", "ism", "ent", "ous"]


def made_up_word(rng):
    word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
    return word.capitalize() if rng.random() < 0.2 else word


def corpus(seed=1234, n=6000):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.3:
            lines.append(" ".join(made_up_word(rng) for _ in range(rng.randint(4, 12))) + ".")
        elif kind < 0.7:
            lines.append(" ".join([rng.choice(SUBJECTS), rng.choice(VERBS),
                                   rng.choice(OBJECTS), rng.choice(TAILS)]))
        elif kind < 0.85:
            lines.append(rng.choice(FREE_TEXT))
        else:
            a, b = rng.randrange(10**9), rng.randrange(1000)
            lines.append(f"Run {b}: {a} tokens in {rng.uniform(0, 100):.2f} s, rank {b % 8}.")
    return lines


TEXTS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "position-independent caching for hybrid models",
    "it's they're we've I'm you'll he'd don't",
    "IT'S THEY'RE WE'VE I'M YOU'LL HE'D DON'T",
    "It'S mixed'Re case'Ve",
    "'s at the start and the end's",
    "12345678901234567890",
    "Pi is 3.14159265358979 and e is 2.718281828.",
    "2024-05-17T12:34:56Z, $1,234.56, 50%",
    "一二三四五六七八九十",
    "中文：位置无关缓存可以重复使用文档片段。",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 문장도 있습니다.",
    "Mixed 中文 and English 混合 text.",
    "Emoji 🚀🧠🔥 in a row",
    "👩‍💻 and 🇫🇷 and 👍🏽 and ❤️",
    "café naïve crème brûlée",
    "cafe\u0301 nai\u0308ve cre\u0300me bru\u0302le\u0301e",
    "A\u030A and \u212B and \u00C5",
    "q\u0307\u0323 and q\u0323\u0307",
    "\u1100\u1161\u11A8 decomposed Hangul",
    "Ελληνικά: η ΟΔΟΣ είναι μακριά.",
    "Привет, мир!",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "two  spaces,   three,    four",
    "trailing spaces   ",
    "   leading spaces",
    "tab\tseparated\tvalues\t\tdouble",
    "line one\nline two",
    "para one\n\n\npara two",
    "windows\r\nline\r\n\r\nendings",
    "mixed \n \n\t\n  whitespace\n",
    "\n\n\n",
    "     ",
    "no\u00a0break\u3000ideographic\u2003em",
    "nel\u0085here and mongolian\u180eseparator and zero\u200bwidth",
    "<|im_start|>user\nWhat is PIC?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "almost special <|im_sta and <|im_end| and <|endoftext",
    "<think>reasoning here</think>answer",
    "code: def f(x):\n    return x ** 2  # square\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "URL https://example.org/path?q=1&r=two#frag",
    "!!!??? ... --- *** ###",
    "a",
    " ",
    "\u00e9",
    "\U0001F600",
]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tok = train_qwen_bpe(corpus(), VOCAB_SIZE, SPECIAL, min_frequency=1)
    # As in Qwen's tokenizer.json: <think> is not special.
    tok.add_tokens([AddedToken("<think>", normalized=False, special=False),
                    AddedToken("</think>", normalized=False, special=False)])
    path = OUT / "tokenizer.json"
    tok.save(str(path))
    tok = Tokenizer.from_file(str(path))

    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({
            "text": text,
            "ids": ids,
            "ids_special_as_text": plain,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    # Decoding id sequences that cut multi-byte characters (U+FFFD replacement).
    byte_ids = {}
    alphabet = bytes_to_unicode()
    for b in range(256):
        byte_ids[b] = tok.token_to_id(alphabet[b])
    raw_sequences = [b"\xe4", b"\xe4\xb8", b"\xe4\xb8\xad", b"a\xf0\x9f\x9a", b"\xff\xfe",
                     b"\xc3\xa9\xc3", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80", b"ok\x80ok"]
    decode_cases = []
    for raw in raw_sequences:
        ids = [byte_ids[b] for b in raw]
        decode_cases.append({"ids": ids, "decoded": tok.decode(ids),
                             "python_replace": raw.decode("utf-8", "replace")})
    golden = {
        "generator": "scripts/golden/make_tokenizer_golden.py",
        "tokenizers_version": tokenizers.__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "cases": cases,
        "decode_cases": decode_cases,
    }
    (OUT / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n",
                                     encoding="utf-8")
    print("wrote %s (%d texts, vocab %d)" % (OUT.relative_to(ROOT), len(cases),
                                             golden["vocab_size"]))


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (as the ByteLevel pre-tokenizer uses)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


if __name__ == "__main__":
    main()
