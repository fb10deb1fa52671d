#!/usr/bin/env python3
"""Golden reference data for kimi_linear (Kimi-Linear: KDA + MLA + grouped sigmoid MoE).
Takes: about a minute on CPU (needs torch and transformers).

Writes tests/data/golden/kimi_linear{,_bf16,_sharded,_q_lora}/ with a tiny random
KimiLinearForCausalLM of awkward sizes (transformers 5.24's models/kimi_linear), its
reference logits, greedy continuations and per-layer hidden states, exactly in the format of
scripts/golden/make_golden.py (whose helpers it uses: prompt choice against near-ties, the float64
twin that bounds transformers' own f32 round-off, the reload check).

    python3 scripts/golden/make_golden_kimi.py [--out DIR] [--no-verify]

Weights (seeded, every tensor by name): plain RMSNorm gains ~1 (final norm ~0.5), fan-in
scaled projections, A_log = log(U(0.02, 1.5)) per head, dt_bias N(0, 0.5), router
N(0, 2/sqrt(hidden)), e_score_correction_bias N(0, 0.1) (a buffer). As for Gated DeltaNet
(make_golden.condition_linear_attention), each KDA layer's k_proj rows and k_conv1d taps are
correlated (0.8) with q's and b_proj is scaled by 0.5, so no head's output is a near-cancelling
sum that o_norm would amplify.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402
import transformers  # noqa: E402
from transformers import KimiLinearConfig, KimiLinearForCausalLM  # noqa: E402
from transformers.models.kimi_linear import modeling_kimi_linear as mk  # noqa: E402

KIMI_KW = dict(
    vocab_size=211,
    hidden_size=40,
    intermediate_size=52,
    moe_intermediate_size=12,
    num_hidden_layers=5,
    num_attention_heads=3,
    num_key_value_heads=3,
    kv_lora_rank=10,
    q_lora_rank=None,
    qk_rope_head_dim=6,
    qk_nope_head_dim=8,
    v_head_dim=14,  # != qk_nope_head_dim: a mix-up of the two shows
    n_group=2,
    topk_group=1,
    num_experts_per_tok=2,
    num_local_experts=6,
    n_shared_experts=1,
    routed_scaling_factor=2.446,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    pad_token_id=None,
    bos_token_id=1,
    eos_token_id=2,
    first_k_dense_replace=1,  # layer 0 dense, the rest MoE (as published)
    # KDA layers 1, 2, 4 and MLA layers 3, 5 (1-based, the published form)
    linear_attn_config={
        "head_dim": 12,
        "num_heads": 3,
        "short_conv_kernel_size": 4,
        "full_attn_layers": [3, 5],
        "kda_layers": [1, 2, 4],
    },
)


def fill_kimi(model, seed, hidden):
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = mg._gen(name, seed)
            shp = p.shape

            def normal(std, mean=0.0):
                return torch.randn(shp, generator=g, dtype=torch.float32) * std + mean

            if name.endswith("A_log"):
                u = torch.rand(shp, generator=g, dtype=torch.float32)
                v = math.log(0.02) + u * (math.log(1.5) - math.log(0.02))
            elif name.endswith("dt_bias"):
                v = normal(0.5)
            elif name == "model.norm.weight":
                v = normal(0.15, 0.5)  # final norm gain ~0.5 keeps the logits moderate
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                v = normal(0.2, 1.0)  # plain RMSNorm gains (input/post, o_norm, kv_a/q_a)
            elif name.endswith("conv1d.weight"):
                v = normal(0.5)
            elif name.endswith("embed_tokens.weight") or name.endswith("lm_head.weight"):
                v = normal(2.5 / math.sqrt(hidden))
            elif name.endswith("gate.weight") and p.dim() == 2 and "experts" not in name:
                v = normal(2.0 / math.sqrt(hidden))  # the router
            elif p.dim() >= 2:
                v = normal(1.0 / math.sqrt(shp[-1]))
            else:
                raise RuntimeError(f"unhandled parameter {name} {tuple(shp)}")
            p.copy_(v.to(p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=mg._gen(name, seed)) * 0.1)
        a, r = mg.QK_CORRELATION, math.sqrt(1.0 - mg.QK_CORRELATION**2)
        for mod in model.modules():
            if isinstance(mod, mk.KimiLinearDeltaAttention):
                mod.k_proj.weight.copy_(a * mod.q_proj.weight + r * mod.k_proj.weight)
                P = mod.qkv_dim
                w = mod.conv1d.weight  # [3P, 1, K]: q | k | v channels
                w[P : 2 * P].copy_(a * w[:P] + r * w[P : 2 * P])
                mod.b_proj.weight.mul_(mg.BETA_ROW_SCALE)


def router_min_gap(model, ids, k):
    """Smallest selection gap of the grouped sigmoid router over all tokens and MoE layers:
    between the kept and the first dropped group score, and between the k-th and (k+1)-th
    expert score (p + bias) inside the kept groups."""
    gaps, hooks = [], []

    def hook(mod, inp, out):
        x = inp[0].reshape(-1, mod.hidden_dim).float()
        s = torch.sigmoid(x @ mod.weight.float().t()) + mod.e_score_correction_bias
        G = mod.num_group
        grp = s.view(-1, G, mod.num_experts // G).topk(2, dim=-1)[0].sum(-1)
        if mod.topk_group < G:
            gs = grp.sort(dim=-1, descending=True).values
            gaps.append((gs[:, mod.topk_group - 1] - gs[:, mod.topk_group]).min().item())
        keep = torch.zeros_like(grp).scatter_(1, grp.topk(mod.topk_group, dim=-1)[1], 1)
        mask = keep.unsqueeze(-1).expand(-1, G, mod.num_experts // G).reshape(-1, mod.num_experts)
        ss = s.masked_fill(~mask.bool(), float("-inf")).sort(dim=-1, descending=True).values
        gaps.append((ss[:, k - 1] - ss[:, k]).min().item())

    for m in model.modules():
        if isinstance(m, mk.KimiLinearTopkRouter):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def save_config_sorted(d):
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    json.dump(dict(sorted(c.items())), open(p, "w"), indent=2)


def build_kimi(out, counter, do_verify):
    d = os.path.join(out, "kimi_linear")
    mg.clean_dir(d)
    torch.manual_seed(0)
    cfg = KimiLinearConfig(**KIMI_KW)
    cfg._attn_implementation = mg.ATTN_IMPL
    cfg._experts_implementation = "eager"
    k = cfg.num_experts_per_tok
    model = KimiLinearForCausalLM(cfg).eval()
    rounded = KimiLinearForCausalLM(cfg).eval()
    for i in range(mg.WEIGHT_SEED_TRIES):
        wseed = 53 + 1000 * i
        fill_kimi(model, wseed, cfg.hidden_size)
        rounded.load_state_dict({n: v.to(torch.bfloat16).float() for n, v in model.state_dict().items()})
        pseed, prompts = mg.choose_prompts([model, rounded], cfg.vocab_size, 505, is_moe=True, k=k)
        if pseed is not None:
            break
    else:
        raise RuntimeError("kimi_linear: no weight/prompt seed passes the near-tie and conditioning checks")
    model.save_pretrained(d, safe_serialization=True)
    save_config_sorted(d)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        names = list(f.keys())
    # transformers saves the published checkpoint's names (its conversion mapping reversed)
    for n in ("model.layers.0.self_attn.q_conv1d.weight", "model.layers.1.block_sparse_moe.experts.0.w1.weight",
              "model.layers.2.self_attn.kv_a_proj_with_mqa.weight"):
        assert n in names, (n, names[:12])

    tensors, info = mg.compute_reference(model, prompts, counter, is_moe=True, k=k)
    info = {
        "weight_seed": wseed,
        "prompt_seed": pseed,
        "model": "kimi_linear",
        "class": "KimiLinearForCausalLM",
        "checkpoint": "model.safetensors (published tensor names, experts one by one)",
        "dtype": "float32",
        "reference_attn_implementation": mg.ATTN_IMPL,
        "versions": mg.versions(),
        **info,
    }
    mg.write_reference(d, tensors, info, "kimi_linear")
    if do_verify:
        cname, err = mg.verify(d, KimiLinearForCausalLM, tensors, prompts, ref_model=model)
        print(f"  verified kimi_linear reload ({cname}): max |dlogits| = {err:.2e}")

    db = os.path.join(out, "kimi_linear_bf16")
    mg.clean_dir(db)
    bf = KimiLinearForCausalLM(cfg).eval()
    bf.load_state_dict(rounded.state_dict())
    bf = bf.to(torch.bfloat16)
    bf.save_pretrained(db, safe_serialization=True)
    save_config_sorted(db)
    with safe_open(os.path.join(db, "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(n).get_dtype() for n in f.keys()}
    btensors, binfo = mg.compute_reference(rounded, prompts, counter, is_moe=True, k=k)
    binfo = {
        "model": "kimi_linear_bf16",
        "class": "KimiLinearForCausalLM",
        "checkpoint": f"model.safetensors (dtypes {sorted(dtypes)})",
        "dtype": "bfloat16 storage; reference computed in float32 from the bf16 values upcast",
        "reference_attn_implementation": mg.ATTN_IMPL,
        "versions": mg.versions(),
        "prompt_seed": pseed,
        **binfo,
    }
    mg.write_reference(db, btensors, binfo, "kimi_linear_bf16")
    if do_verify:
        cname, err = mg.verify(db, KimiLinearForCausalLM, btensors, prompts, ref_model=rounded)
        print(f"  verified kimi_linear_bf16 reload ({cname}, loaded as f32): max |dlogits| = {err:.2e}")

    ds = os.path.join(out, "kimi_linear_sharded")
    mg.clean_dir(ds)
    sd_bytes = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    model.save_pretrained(ds, safe_serialization=True, max_shard_size=int(sd_bytes * 0.4))
    save_config_sorted(ds)
    files = sorted(os.listdir(ds))
    shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
    assert len(shards) >= 2 and "model.safetensors.index.json" in files, files
    sinfo = {
        "model": "kimi_linear_sharded",
        "class": "KimiLinearForCausalLM",
        "checkpoint": "model.safetensors.index.json + " + " + ".join(shards),
        "dtype": "float32",
        "reference": "../kimi_linear/reference.safetensors (identical weights)",
        "versions": mg.versions(),
    }
    with open(os.path.join(ds, "reference.json"), "w") as f:
        json.dump(sinfo, f, indent=1)
        f.write("\n")
    if do_verify:
        cname, err = mg.verify(ds, KimiLinearForCausalLM, tensors, prompts, ref_model=model)
        print(f"  verified kimi_linear_sharded reload ({cname}): max |dlogits| = {err:.2e}")
    for x in (d, db, ds):
        mg.tidy(x)


def build_kimi_q_lora(out, counter, do_verify):
    """kimi_linear_q_lora: the same shape with a q_lora_rank (q_a_proj, q_a_layernorm,
    q_b_proj instead of q_proj; DeepSeek-style, not used by the published Kimi-Linear)."""
    d = os.path.join(out, "kimi_linear_q_lora")
    mg.clean_dir(d)
    torch.manual_seed(0)
    cfg = KimiLinearConfig(**dict(KIMI_KW, q_lora_rank=7))
    cfg._attn_implementation = mg.ATTN_IMPL
    cfg._experts_implementation = "eager"
    k = cfg.num_experts_per_tok
    model = KimiLinearForCausalLM(cfg).eval()
    for i in range(mg.WEIGHT_SEED_TRIES):
        wseed = 59 + 1000 * i
        fill_kimi(model, wseed, cfg.hidden_size)
        pseed, prompts = mg.choose_prompts([model], cfg.vocab_size, 707, is_moe=True, k=k)
        if pseed is not None:
            break
    else:
        raise RuntimeError("kimi_linear_q_lora: no weight/prompt seed passes the checks")
    model.save_pretrained(d, safe_serialization=True)
    save_config_sorted(d)
    tensors, info = mg.compute_reference(model, prompts, counter, is_moe=True, k=k)
    info = {"weight_seed": wseed, "prompt_seed": pseed, "model": "kimi_linear_q_lora",
            "class": "KimiLinearForCausalLM", "dtype": "float32", "q_lora_rank": 7,
            "reference_attn_implementation": mg.ATTN_IMPL, "versions": mg.versions(), **info}
    mg.write_reference(d, tensors, info, "kimi_linear_q_lora")
    if do_verify:
        cname, err = mg.verify(d, KimiLinearForCausalLM, tensors, prompts, ref_model=model)
        print(f"  verified kimi_linear_q_lora reload ({cname}): max |dlogits| = {err:.2e}")
    mg.tidy(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(mg.REPO, "tests", "data", "golden"))
    ap.add_argument("--no-verify", action="store_true", help="skip reloading the saved checkpoints")
    ap.add_argument("--only-q-lora", action="store_true", help="regenerate kimi_linear_q_lora only")
    args = ap.parse_args()
    t0 = time.time()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    mg.router_min_gap = router_min_gap  # compute_reference / choose_prompts call it
    counter = mg.CallCounter()
    if not args.only_q_lora:
        build_kimi(args.out, counter, not args.no_verify)
    build_kimi_q_lora(args.out, counter, not args.no_verify)
    print(f"kimi_linear golden data in {args.out}; {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
