#!/usr/bin/env python3
"""Golden reference data for hypic's minimax architecture (MiniMax-Text-01 / M1).
Takes: about a minute on CPU (needs torch and transformers).

Builds a tiny random transformers MiniMaxForCausalLM of awkward sizes (6 heads of head_dim 20,
GQA 3:1, 5 experts top-2, lightning block_size 24 so prompts of 64 and 130 tokens cross
blocks, layer_types L A L L A, residual alpha/beta factors != 1) and writes, with the helpers
of scripts/golden/make_golden.py (same reference format, float64-twin conditioning check, near-tie
checks on greedy picks and routing):

  minimax/          config.json, model.safetensors (f32, as save_pretrained writes it:
                    block_sparse_moe.experts.<e>.w1/w2/w3 and the lightning decay buffers),
                    reference.safetensors, reference.json
  minimax_bf16/     the same weights rounded to bf16, stored as bf16; reference in f32
  minimax_sharded/  the f32 weights in 3+ shards + model.safetensors.index.json (reference
                    shared with minimax/)

Usage:  python3 scripts/golden/make_golden_minimax.py [--out DIR] [--no-verify]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
from safetensors import safe_open
from transformers import MiniMaxConfig, MiniMaxForCausalLM
from transformers.models.minimax import modeling_minimax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402

KW = dict(
    vocab_size=251,
    hidden_size=72,
    intermediate_size=44,
    num_hidden_layers=5,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=20,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    num_local_experts=5,
    num_experts_per_tok=2,
    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention"],
    block_size=24,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    linear_attn_alpha_factor=1.7,
    linear_attn_beta_factor=0.9,
    full_attn_alpha_factor=2.3,
    full_attn_beta_factor=1.1,
    mlp_alpha_factor=1.4,
    mlp_beta_factor=0.8,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)


def router_min_gap(model, ids, k):
    """Smallest k-th vs (k+1)-th routing probability gap over all tokens and layers."""
    gaps, hooks = [], []

    def hook(mod, inp, out):
        probs = torch.softmax(out[0].float(), dim=-1)
        s = probs.sort(dim=-1, descending=True).values
        gaps.append((s[:, k - 1] - s[:, k]).min().item())

    for m in model.modules():
        if isinstance(m, modeling_minimax.MiniMaxTopKRouter):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    return min(gaps)


mg.router_min_gap = router_min_gap  # compute_reference / choose_prompts look it up here


class NoCounter:  # no Gated DeltaNet helpers to count in this model
    def take(self):
        return {}


def fill(model, seed, hidden):
    """fill_params, then MiniMax's plain RMSNorm weights around 1 (the final norm's gain ~0.5
    keeps the logits moderate) and a router at half scale (peaked but without near-ties)."""
    mg.fill_params(model, seed=seed, hidden=hidden)
    with torch.no_grad():
        for n, p in model.named_parameters():
            g = mg._gen(n + "/minimax", seed)
            if n == "model.norm.weight":
                p.copy_(torch.randn(p.shape, generator=g) * 0.15 + 0.5)
            elif n.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + 1.0)
            elif n.endswith("block_sparse_moe.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(hidden)))


def save_config_sorted(d):
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    json.dump(dict(sorted(c.items())), open(cpath, "w"), indent=2)
    return c


def build(out, do_verify):
    counter = NoCounter()
    cfg = MiniMaxConfig(**KW)
    cfg._attn_implementation = mg.ATTN_IMPL
    cfg._experts_implementation = "eager"
    k = cfg.num_experts_per_tok
    torch.manual_seed(0)
    model = MiniMaxForCausalLM(cfg).eval()
    rounded = MiniMaxForCausalLM(cfg).eval()
    for i in range(mg.WEIGHT_SEED_TRIES):
        wseed = 61 + 1000 * i
        fill(model, wseed, cfg.hidden_size)
        rounded.load_state_dict(
            {n: (v.to(torch.bfloat16).float() if n in dict(model.named_parameters()) else v)
             for n, v in model.state_dict().items()})
        pseed, prompts = mg.choose_prompts([model, rounded], cfg.vocab_size, 505, is_moe=True, k=k)
        if pseed is not None:
            break
    else:
        raise RuntimeError("minimax: no weight/prompt seed passes the near-tie and conditioning checks")

    d = os.path.join(out, "minimax")
    mg.clean_dir(d)
    model.save_pretrained(d, safe_serialization=True)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert "model.layers.0.block_sparse_moe.experts.0.w1.weight" in names, names[:8]
    assert "model.layers.0.self_attn.slope_rate" in names  # buffers hypic derives and skips
    save_config_sorted(d)
    tensors, info = mg.compute_reference(model, prompts, counter, is_moe=True, k=k)
    info = {"weight_seed": wseed, "prompt_seed": pseed, "model": "minimax", "class": "MiniMaxForCausalLM",
            "checkpoint": "model.safetensors (f32, as save_pretrained writes it)", "dtype": "float32",
            "reference_attn_implementation": mg.ATTN_IMPL, "versions": mg.versions(), **info}
    mg.write_reference(d, tensors, info, "minimax")
    mg.tidy(d)
    if do_verify:
        cname, err = mg.verify(d, MiniMaxForCausalLM, tensors, prompts, ref_model=model)
        print(f"  verified minimax reload ({cname}): max |dlogits| = {err:.2e}")

    db = os.path.join(out, "minimax_bf16")
    mg.clean_dir(db)
    bf = MiniMaxForCausalLM(cfg).eval()
    bf.load_state_dict(rounded.state_dict())
    bf = bf.to(torch.bfloat16)
    bf.save_pretrained(db, safe_serialization=True)
    c = save_config_sorted(db)
    assert c["dtype"] == "bfloat16", c["dtype"]
    btensors, binfo = mg.compute_reference(rounded, prompts, counter, is_moe=True, k=k)
    binfo = {"model": "minimax_bf16", "class": "MiniMaxForCausalLM", "checkpoint": "model.safetensors (bfloat16)",
             "dtype": "bfloat16 storage; reference computed in float32 from the bf16 values upcast",
             "reference_attn_implementation": mg.ATTN_IMPL, "versions": mg.versions(), "prompt_seed": pseed,
             **binfo}
    mg.write_reference(db, btensors, binfo, "minimax_bf16")
    mg.tidy(db)

    ds = os.path.join(out, "minimax_sharded")
    mg.clean_dir(ds)
    sd_bytes = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    model.save_pretrained(ds, safe_serialization=True, max_shard_size=int(sd_bytes * 0.4))
    files = sorted(os.listdir(ds))
    shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
    assert len(shards) >= 3 and "model.safetensors.index.json" in files, files
    save_config_sorted(ds)
    with open(os.path.join(ds, "reference.json"), "w") as f:
        json.dump({"model": "minimax_sharded", "reference": "../minimax/reference.safetensors",
                   "shards": len(shards)}, f, indent=1)
        f.write("\n")
    mg.tidy(ds)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(mg.REPO, "tests", "data", "golden"))
    ap.add_argument("--no-verify", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    build(a.out, not a.no_verify)


if __name__ == "__main__":
    main()
