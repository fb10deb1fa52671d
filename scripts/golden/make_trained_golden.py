#!/usr/bin/env python3
"""Golden data for the embedded trained model (tests/unit/trained_model_test.cpp).
Takes: under a minute (needs torch and transformers).

Loads inputs/models/qwen3_5-synthqa with Hugging Face transformers (Qwen3_5ForCausalLM,
float32, eager attention) and its tokenizer with `tokenizers`, builds the prompts of the
first examples of inputs/datasets/synthqa.jsonl exactly as `hypic eval` does (template from
inputs/datasets/templates.json; prefix, each passage and the question suffix tokenized
separately) and records per prompt:

  ids_<i>            int32 [T]        the prompt's token ids
  logits_<i>         float32 [R, V]   plain forward, the last R = min(T, 32) positions
  greedy_<i>         int32 [8]        greedy continuation (cached decode, no early stop)
  decode_logits_<i>  float32 [8, V]   the logits that picked each greedy token

into tests/data/golden_trained/reference.safetensors, and the texts, ids, the decoded
answers and the gold answers into reference.json.

Needs: pip install torch transformers tokenizers safetensors.
"""
import argparse
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def prompt_pieces(example, template):
    """LongBench context -> the pieces hypic tokenizes (docs/datasets.md, split 'passages')."""
    parts = re.split(r"(?m)^Passage \d+:\n", example["context"])
    passages = [p[:-1] if p.endswith("\n") else p for p in parts if p.strip()]
    return ([template["prefix"]] +
            [template["segment"].replace("{text}", p) for p in passages] +
            [template["suffix"].replace("{input}", example["input"])])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "inputs/models/qwen3_5-synthqa"))
    ap.add_argument("--data", default=str(ROOT / "inputs/datasets/synthqa.jsonl"))
    ap.add_argument("--out", default=str(ROOT / "tests/data/golden_trained"))
    ap.add_argument("--examples", type=int, default=4)
    args = ap.parse_args()

    import safetensors
    import tokenizers
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import Qwen3_5ForCausalLM

    torch.set_num_threads(2)
    template = json.loads((ROOT / "inputs/datasets/templates.json").read_text())["synthqa"]
    tok = Tokenizer.from_file(str(pathlib.Path(args.model) / "tokenizer.json"))
    model = Qwen3_5ForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tensors, cases = {}, []
    with open(args.data) as f:
        examples = [json.loads(line) for _, line in zip(range(args.examples), f)]
    for i, ex in enumerate(examples):
        pieces = prompt_pieces(ex, template)
        piece_ids = [tok.encode(p, add_special_tokens=False).ids for p in pieces]
        ids = [t for p in piece_ids for t in p]
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(input_ids=x).logits[0]
            gen = model.generate(x, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True,
                                 eos_token_id=None, pad_token_id=0)
        greedy = gen.sequences[0, len(ids):].tolist()
        decode_logits = torch.stack([l[0] for l in gen.logits])
        tensors[f"ids_{i}"] = torch.tensor(ids, dtype=torch.int32)
        tensors[f"logits_{i}"] = logits[-32:].float().contiguous()
        tensors[f"greedy_{i}"] = torch.tensor(greedy, dtype=torch.int32)
        tensors[f"decode_logits_{i}"] = decode_logits.float().contiguous()
        answer = greedy[:greedy.index(0)] if 0 in greedy else greedy
        top2 = torch.topk(decode_logits, 2, dim=-1).values
        cases.append({"id": ex["_id"], "pieces": pieces, "piece_ids": piece_ids,
                      "greedy": greedy, "answer_text": tok.decode(answer),
                      "gold": ex["answers"], "logits_abs_max": round(logits.abs().max().item(), 3),
                      "min_greedy_margin": round((top2[:, 0] - top2[:, 1]).min().item(), 4)})
    save_file(tensors, str(out / "reference.safetensors"))
    info = {"model": "inputs/models/qwen3_5-synthqa", "data": "inputs/datasets/synthqa.jsonl",
            "attn_implementation": "eager", "dtype": "float32",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__,
                         "safetensors": safetensors.__version__},
            "cases": cases}
    (out / "reference.json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    for c in cases:
        print(f"{c['id']}: {len(sum(c['piece_ids'], []))} tokens, answer {c['answer_text']!r}, "
              f"gold {c['gold']}, |logits| max {c['logits_abs_max']}, margin "
              f"{c['min_greedy_margin']}")


if __name__ == "__main__":
    main()
