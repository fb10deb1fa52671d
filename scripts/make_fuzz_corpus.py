#!/usr/bin/env python3
"""Writes the seed corpus of the libFuzzer targets (tests/fuzz/corpus/<target>/) from the
files under tests/data and inputs/: small valid inputs, so that a seconds-long run starts
from the formats' real structure. Only the Python standard library; the output is committed.
Run from anywhere: python3 scripts/make_fuzz_corpus.py"""
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def data(*parts):
    return os.path.join(ROOT, *parts)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return header, raw[8 + n :]


def pack_safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes); laid out in order."""
    header, blob = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob


def smallest(path, count):
    header, blob = read_safetensors(path)
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    items.sort(key=lambda kv: (kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0], kv[0]))
    out = []
    for name, v in items[:count]:
        b, e = v["data_offsets"]
        out.append((name, v["dtype"], v["shape"], blob[b:e]))
    return out


def safetensors_seeds():
    write("fuzz_safetensors", "f32_small.safetensors",
          pack_safetensors(smallest(data("tests/data/golden/qwen3_5/model.safetensors"), 4),
                           {"format": "pt"}))
    write("fuzz_safetensors", "bf16_small.safetensors",
          pack_safetensors(smallest(data("tests/data/golden/qwen3_5_bf16/model.safetensors"), 3)))
    ref = smallest(data("tests/data/golden/qwen3_5/reference.safetensors"), 3)
    write("fuzz_safetensors", "reference_small.safetensors", pack_safetensors(ref))
    write("fuzz_safetensors", "empty_header.safetensors", pack_safetensors([]))


def config_seeds():
    for model in ("qwen3_5", "qwen3_next", "qwen3_5_sharded"):
        with open(data("tests/data/golden", model, "config.json"), "rb") as f:
            write("fuzz_config", model + ".json", f.read())


def tokenizer_seeds():
    with open(data("tests/data/tokenizer/tokenizer.json")) as f:
        tok = json.load(f)
    # A cut-down vocabulary keeps each run fast: the 256 byte tokens and the first merges
    # whose parts and result are kept.
    vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < 400}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    small = dict(tok)
    small["model"] = dict(tok["model"], vocab=vocab, merges=merges)
    text = json.dumps(small, ensure_ascii=False).encode()
    with open(data("tests/data/tokenizer/golden.json")) as f:
        golden = json.load(f)
    samples = [c["text"] for c in golden.get("cases", golden if isinstance(golden, list) else [])
               if isinstance(c, dict) and "text" in c]
    samples = samples[:3] or ["Hello world"]
    for i, s in enumerate(samples):
        write("fuzz_tokenizer", "small_%d.bin" % i, text + b"\0" + s.encode()[:300])
    write("fuzz_tokenizer", "special.bin",
          text + b"\0<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|endoftext|>")


def dataset_seeds():
    rules = {"hotpotqa": 0, "gov_report": 3, "multi_news": 1, "triviaqa": 2, "malformed": 0x84}
    for name, rule in rules.items():
        with open(data("tests/data/datasets", name + ".jsonl"), "rb") as f:
            lines = f.read().split(b"\n")[:2]
        write("fuzz_datasets", name + ".bin", bytes([rule]) + b"\n".join(lines)[:3000])
    with open(data("tests/data/datasets/hotpotqa_original.json")) as f:
        records = json.load(f)
    write("fuzz_datasets", "hotpotqa_original.bin",
          bytes([0]) + json.dumps(records[:1], ensure_ascii=False).encode()[:3000])


def pic_input_seeds():
    with open(data("inputs/corpus/synthqa.jsonl")) as f:
        corpus = [json.loads(line) for line in f if line.strip()][:3]
    for d in corpus:
        d["text"] = d["text"][:12]
    corpus.append({"id": "t0", "tokens": [11, 12, 13]})
    queries = [
        {"id": "q0", "prefix": "Read:", "segments": [corpus[0]["id"], corpus[1]["id"]],
         "question": "Who?", "max_new_tokens": 4, "answers": ["x"]},
        {"id": 7, "prefix": [11, 12], "segments": [{"text": "abc"}, {"tokens": [20, 21]}, "t0"],
         "question_tokens": [30, 31], "answers": "y"},
    ]
    text = "\n".join(json.dumps(d) for d in corpus) + "\n\0" + \
        "\n".join(json.dumps(q) for q in queries) + "\n"
    write("fuzz_pic_inputs", "synthqa.bin", text)
    write("fuzz_pic_inputs", "no_corpus.bin", "\0" + json.dumps(queries[1]) + "\n")


def entry_message(segment, key, n_tokens, arrays):
    out = struct.pack("<IIq", 0x45505948, 1, segment)
    out += struct.pack("<I", len(key)) + key.encode() + struct.pack("<qI", n_tokens, len(arrays))
    for name, shape, values in arrays:
        out += struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<q", d) for d in shape) + struct.pack("<Q", len(values))
        out += b"".join(struct.pack("<f", v) for v in values)
    return out


def message_seeds():
    key = "0123456789abcdef0123456789abcdef"
    arrays = [("attn/3/K", [1, 2, 2], [0.5, -1.0, 2.0, 0.25]), ("attn/3/V", [1, 2, 2], [1, 2, 3, 4]),
              ("linear/0/S", [2, 1], [3.0, -3.0]), ("linear/0/T", [0, 4], [])]
    write("fuzz_entry_message", "entry.bin", b"\0" + entry_message(4, key, 2, arrays))
    write("fuzz_entry_message", "entry_empty.bin", b"\0" + entry_message(0, "", 0, []))
    task = struct.pack("<II", 0x43505948, 1) + struct.pack("<q", 3) + struct.pack("<I", 32) + \
        key.encode() + struct.pack("<Q", 3) + struct.pack("<iii", 5, 6, 7) + struct.pack("<i", 2)
    write("fuzz_entry_message", "task.bin", b"\1" + task)
    write("fuzz_entry_message", "shutdown.bin", b"\1" + struct.pack("<II", 0x43505948, 2))
    what = b"store write failed"
    failure = struct.pack("<Iiq", 0x46505948, 2, 7) + struct.pack("<I", 32) + key.encode() + \
        struct.pack("<I", len(what)) + what
    write("fuzz_entry_message", "failure.bin", b"\2" + failure)


def store_entry_seed(kind, names, rows, n_tokens, payload_offset, payload):
    out = struct.pack("<BBBqQ", kind, len(names), len(rows), n_tokens, payload_offset)
    for n in names:
        out += struct.pack("<B", len(n)) + n.encode()
    for name_id, shape, offset in rows:
        dims = list(shape) + [0] * (6 - len(shape))
        out += struct.pack("<II6qQ", name_id, len(shape), *dims, offset)
    return out + payload


def store_entry_seeds():
    names = ["attn/3/K", "attn/3/V", "linear/0/S"]
    f32 = b"".join(struct.pack("<f", v) for v in range(10))
    rows = [(0, [1, 2, 2], 100), (1, [1, 2, 2], 104), (2, [2, 1], 108)]
    write("fuzz_store_entry", "f32.bin", store_entry_seed(0, names, rows, 2, 100, f32))
    bf16 = b"".join(struct.pack("<H", 0x3f80 + i) for i in range(10))
    write("fuzz_store_entry", "bf16.bin", store_entry_seed(1, names, rows, 2, 100, bf16))
    write("fuzz_store_entry", "f16_empty_array.bin",
          store_entry_seed(2, ["linear/0/T"], [(0, [4, 0, 8], 0)], 0, 0, b""))


if __name__ == "__main__":
    safetensors_seeds()
    config_seeds()
    tokenizer_seeds()
    dataset_seeds()
    pic_input_seeds()
    message_seeds()
    store_entry_seeds()
    for target in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, target))
        size = sum(os.path.getsize(os.path.join(OUT, target, f)) for f in files)
        print("%-20s %2d files, %6d bytes" % (target, len(files), size))
