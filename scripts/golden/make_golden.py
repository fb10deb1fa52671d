#!/usr/bin/env python3
"""Generate golden reference data for hypic's forward pass.
Takes: a few minutes on CPU (needs torch and transformers; float64 checks).

Builds tiny, randomly initialised Qwen3-Next (``qwen3_next``) and Qwen3.5 text
(``qwen3_5``) models with Hugging Face transformers' own config/model classes,
saves them as safetensors checkpoints, and records transformers' logits and
greedy continuations so the C++ tests can compare against them without Python.

Output (default: tests/data/golden/ next to this repository's scripts/ folder):

  qwen3_next/          config.json (hub style: rope_theta / partial_rotary_factor /
                       full_attention_interval at top level, no layer_types),
                       model.safetensors (f32), reference.safetensors, reference.json
  qwen3_5/             config.json (flat qwen3_5_text config), model.safetensors
                       (f32, text tensors under ``model.language_model.``, tied
                       embeddings -> no lm_head.weight), reference.*
  qwen3_5_bf16/        same model, weights rounded to bf16 and stored as bf16;
                       its own reference.* computed in f32 from the rounded weights
  qwen3_5_sharded/     same weights as qwen3_5 in the full Qwen3.5 layout
                       (Qwen3_5ForConditionalGeneration: nested text_config /
                       vision_config, a tiny ``model.visual.*`` tower), split into
                       2 shards + model.safetensors.index.json; reference.json
                       points at ../qwen3_5/reference.safetensors (same logits)

reference.safetensors tensors, for every prompt length T in (1, 7, 64, 130):
  ids_<T>            int32   [T]        prompt token ids (seeded random)
  logits_<T>         float32 [T, V]     plain forward (no cache), all positions
  greedy_<T>         int32   [8]        greedy continuation via model.generate
  decode_logits_<T>  float32 [8, V]     logits that chose each greedy token
                                        (row 0 = last prefill position, rows 1..7
                                        from the cached recurrent decode path)
and  hidden_7        float32 [L+1, 7, H] embedding output then the output of
                                        every decoder layer (before final norm)
                                        for the T=7 prompt, to localise mismatches.

Transformers on CPU without flash-linear-attention / causal-conv1d uses its torch
fallbacks: torch_chunk_gated_delta_rule (chunk 64) + causal_conv1d_fn for
prefill, torch_recurrent_gated_delta_rule + causal_conv1d_update for
single-token decode. The script counts the calls and writes them to
reference.json.

Weights are well conditioned for f32 (condition_linear_attention, final-norm gain ~0.5),
and every f32 reference is checked against transformers' code run in float64 (float64_twin):
max |logits_f32 - logits_f64| <= MAX_F32_VS_F64 = 2e-5 for every prompt, else the next
prompt seed / weight seed is tried. The values are recorded in reference.json.

Deterministic (fixed seeds, CPU, float32, one torch thread: the matmul
round-off depends on the thread count, so it is pinned; files are byte-identical
across runs on the same machine type). Prompt seeds are searched (deterministically)
so that no greedy step has a top-1/top-2 logit margin below 5e-3 and no MoE
routing decision has a k-th vs (k+1)-th probability gap below 2e-4.
Runs in ~20-40 s on 2 cores (well under 2 minutes).

Generated with: Python 3.11.7, torch 2.15.0+cu132 (run on CPU), transformers
5.24.0, safetensors 0.8.0, numpy 2.4.6.  Other versions may change numerics
slightly or the checkpoint layout; the versions actually used are recorded in
every reference.json and in tests/data/golden/README.md.

Usage:  python3 scripts/golden/make_golden.py [--out DIR] [--no-verify]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import inspect
import platform
import re
import shutil
import types
import sys
import time
import zlib

import torch

import safetensors
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe
from transformers.models.qwen3_next import modeling_qwen3_next

PROMPT_LENS = (1, 7, 64, 130)
N_NEW = 8
MIN_GREEDY_MARGIN = 5e-3  # logits units
MIN_ROUTER_GAP = 2e-4  # probability units (k-th minus (k+1)-th routing prob)
MAX_F32_VS_F64 = 2e-5  # logits units: transformers' f32 logits vs the same model in float64
QK_CORRELATION = 0.8  # linear attention: k rows/conv taps = 0.8 * q's + 0.6 * fresh noise
BETA_ROW_SCALE = 0.5  # linear attention: b rows of in_proj scaled down (beta = sigmoid(b))
WEIGHT_SEED_TRIES = 8  # weight seeds tried (seed, seed + 1000, ...) before giving up
ATTN_IMPL = "eager"  # reference uses eager attention; verification reloads with the default (sdpa)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# --------------------------------------------------------------------------------------
# Configurations (tiny, awkward sizes)
# --------------------------------------------------------------------------------------

NEXT_KW = dict(
    vocab_size=163,
    hidden_size=64,
    intermediate_size=80,  # dense MLP of the mlp_only layer
    num_hidden_layers=4,  # full_attention_interval 4 -> layers 0-2 GDN, layer 3 attention
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,  # partial_rotary_factor 0.25 -> rotary dim 8
    linear_num_key_heads=2,
    linear_num_value_heads=4,  # 2 value heads per key head
    linear_key_head_dim=16,
    linear_value_head_dim=24,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[1],  # layer 1 uses the dense MLP (intermediate_size)
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 0.25},
)

Q35_TEXT_KW = dict(
    vocab_size=157,
    hidden_size=40,
    intermediate_size=72,
    num_hidden_layers=6,
    layer_types=["linear_attention", "linear_attention", "full_attention"] * 2,  # interval 3 (real models: 4)
    num_attention_heads=6,
    num_key_value_heads=2,  # 3 query heads per kv head
    head_dim=24,  # partial_rotary_factor 0.25 -> rotary dim 6
    linear_num_key_heads=2,
    linear_num_value_heads=6,  # 3 value heads per key head
    linear_key_head_dim=16,
    linear_value_head_dim=12,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,  # like the small Qwen3.5 checkpoints; no lm_head.weight saved
    max_position_embeddings=4096,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 12000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [1, 1, 1],  # sums to rotary_dim / 2 = 3
        "mrope_interleaved": True,
    },
)

Q35_VISION_KW = dict(
    depth=1,
    hidden_size=16,
    num_heads=2,
    intermediate_size=32,
    patch_size=2,
    temporal_patch_size=2,
    spatial_merge_size=2,
    in_channels=3,
    out_hidden_size=Q35_TEXT_KW["hidden_size"],
    num_position_embeddings=16,
)

Q35MOE_TEXT_KW = dict(
    vocab_size=151,
    hidden_size=48,
    num_hidden_layers=4,
    # full attention in the middle and a trailing linear layer (real models: every 4th)
    layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    num_attention_heads=4,
    num_key_value_heads=1,  # 4 query heads per kv head
    head_dim=20,  # partial_rotary_factor 0.3 -> rotary dim 6
    linear_num_key_heads=2,
    linear_num_value_heads=6,  # 3 value heads per key head
    linear_key_head_dim=12,
    linear_value_head_dim=10,
    linear_conv_kernel_dim=4,
    num_experts=5,
    num_experts_per_tok=2,
    moe_intermediate_size=20,
    shared_expert_intermediate_size=28,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,  # like the published MoE checkpoints
    max_position_embeddings=4096,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 9000.0,
        "partial_rotary_factor": 0.3,
        "mrope_section": [1, 1, 1],  # sums to rotary_dim / 2 = 3
        "mrope_interleaved": True,
    },
)

Q35MOE_VISION_KW = dict(Q35_VISION_KW, out_hidden_size=Q35MOE_TEXT_KW["hidden_size"])

# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _gen(name: str, seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))


def fill_params(model: torch.nn.Module, seed: int, hidden: int) -> None:
    """Overwrite EVERY parameter with seeded random values of a sensible scale.

    transformers' own init leaves zero-centred norms at 0, uses 0.02 std for
    matrices, etc. Here every value matters so a wrong formula shows in the
    logits. Each tensor's values depend only on (seed, parameter name).
    """
    seen = set()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            g = _gen(name, seed)
            shp = p.shape

            def normal(std, mean=0.0):
                return torch.randn(shp, generator=g, dtype=torch.float32) * std + mean

            if name.endswith("linear_attn.A_log"):
                # A = exp(A_log) in [0.02, 1.5]: per-step decay exp(g) spans ~0.05 .. 0.995
                u = torch.rand(shp, generator=g, dtype=torch.float32)
                v = math.log(0.02) + u * (math.log(1.5) - math.log(0.02))
            elif name.endswith("linear_attn.dt_bias"):
                v = normal(0.5)
            elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: plain weight (init 1)
                v = normal(0.3, 1.0)
            elif re.search(r"(^|\.)model\.(language_model\.)?norm\.weight$", name):
                # final norm, zero-centred: gain 1 + w ~ 0.5 +- 0.15 keeps the logits at
                # std ~1.3, max ~5 (absolute f32 round-off in the logits scales with them)
                v = normal(0.15, -0.5)
            elif name.endswith("norm.weight"):  # zero-centred RMSNorms: output * (1 + w)
                v = normal(0.3)
            elif name.endswith("conv1d.weight"):
                v = normal(0.5)
            elif name.endswith("embed_tokens.weight"):
                v = normal(2.5 / math.sqrt(hidden))  # also the lm_head when tied
            elif name.endswith("lm_head.weight"):
                v = normal(2.5 / math.sqrt(hidden))
            elif name.endswith("mlp.gate.weight"):  # MoE router: decisive but not degenerate
                v = normal(2.0 / math.sqrt(hidden))
            elif p.dim() >= 2:
                v = normal(1.0 / math.sqrt(shp[-1]))  # fan-in scaled (Linear, experts, vision)
            elif p.dim() == 1:  # biases (vision tower only) and anything else 1-D
                v = normal(0.1)
            else:
                raise RuntimeError(f"unhandled parameter {name} {tuple(shp)}")
            p.copy_(v.to(p.dtype))


def condition_linear_attention(model: torch.nn.Module) -> None:
    """Make the Gated DeltaNet layers numerically well conditioned (after fill_params).

    With independent random q and k projections, q_t.k_s is a random number around 0
    (16-dim unit vectors), so for some heads/tokens the delta-rule output o_t is a
    near-cancelling sum; the gated RMSNorm then rescales it to O(1) and f32 round-off in o
    shows up as ~1e-4 in the logits (transformers' own f32 and f64 logits differed by up
    to 3.5e-4). Here each k row of in_proj (and each k channel's conv taps) is
    QK_CORRELATION * the matching q row + sqrt(1 - QK_CORRELATION^2) * its own random
    values, so q_t.k_t is clearly positive and o_t has a solid own-token term, and the
    b rows (beta = sigmoid(b)) are scaled by BETA_ROW_SCALE so beta stays in ~[0.2, 0.8]
    instead of reaching ~0.03. q and k stay different (a q/k mix-up still changes the
    logits at O(0.1)). Deterministic: only recombines the seeded values.
    """
    a, r = QK_CORRELATION, math.sqrt(1.0 - QK_CORRELATION**2)
    with torch.no_grad():
        for mod in model.modules():
            if not (hasattr(mod, "A_log") and hasattr(mod, "conv1d")):
                continue
            Hk, dk, Hv = mod.num_k_heads, mod.head_k_dim, mod.num_v_heads
            G = Hv // Hk
            if hasattr(mod, "in_proj_qkvz"):  # Qwen3-Next: grouped [q | k | v | z] per key head
                W = mod.in_proj_qkvz.weight
                grp = 2 * dk + 2 * G * mod.head_v_dim
                q_rows = torch.tensor([g * grp + i for g in range(Hk) for i in range(dk)])
                k_rows = q_rows + dk
                b_rows = torch.tensor([g * 2 * G + j for g in range(Hk) for j in range(G)])  # [b | a]
                B = mod.in_proj_ba.weight
            else:  # Qwen3.5: flat [q | k | v], separate in_proj_b
                W = mod.in_proj_qkv.weight
                q_rows = torch.arange(Hk * dk)
                k_rows = q_rows + Hk * dk
                b_rows = torch.arange(Hv)
                B = mod.in_proj_b.weight
            W[k_rows] = a * W[q_rows] + r * W[k_rows]
            C = mod.conv1d.weight  # channels [q (Hk*dk) | k (Hk*dk) | v] in both models
            qc = torch.arange(Hk * dk)
            C[qc + Hk * dk] = a * C[qc] + r * C[qc + Hk * dk]
            B[b_rows] *= BETA_ROW_SCALE


class CallCounter:
    """Counts calls of the GDN / conv helper functions inside the modeling modules."""

    NAMES = (
        "torch_chunk_gated_delta_rule",
        "torch_recurrent_gated_delta_rule",
        "causal_conv1d_fn",
        "causal_conv1d_update",
    )

    def __init__(self):
        self.counts = {}
        for mod in (modeling_qwen3_next, modeling_qwen3_5, modeling_qwen3_5_moe):
            for n in self.NAMES:
                orig = getattr(mod, n)
                if getattr(orig, "_golden_wrapped", False):
                    continue

                def make(orig=orig, n=n):
                    def w(*a, **k):
                        self.counts[n] = self.counts.get(n, 0) + 1
                        return orig(*a, **k)

                    w._golden_wrapped = True
                    return w

                setattr(mod, n, make())

    def take(self):
        c, self.counts = self.counts, {}
        return c


def router_min_gap(model, ids, k):
    """Smallest gap between the k-th and (k+1)-th routing probability over all tokens/layers."""
    gaps = []
    hooks = []

    def hook(mod, inp, out):
        logits = out[0].float()
        probs = torch.softmax(logits, dim=-1)
        s = probs.sort(dim=-1, descending=True).values
        gaps.append((s[:, k - 1] - s[:, k]).min().item())

    for m in model.modules():
        if isinstance(m, (modeling_qwen3_next.Qwen3NextTopKRouter, modeling_qwen3_5_moe.Qwen3_5MoeTopKRouter)):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    return min(gaps) if gaps else None


def _f64_modeling(mod):
    """transformers' modeling module for one model family, re-executed with every float32
    upcast turned into float64.

    ``model.double()`` alone is not a float64 evaluation: the RMSNorms, the gated RMSNorm,
    the decay ``g``, the softmaxes, the rotary angles and both GDN kernels
    (torch_chunk/recurrent_gated_delta_rule) cast to float32 internally. This twin
    replaces ``torch.float32`` / ``torch.float`` / ``.float()`` in the module's source by
    their float64 counterparts, so the whole forward runs in float64.
    """
    name = mod.__name__ + "_golden_f64"
    if name in sys.modules:
        return sys.modules[name]
    src = inspect.getsource(mod)
    src, n1 = re.subn(r"torch\.float(32)?\b", "torch.float64", src)
    src, n2 = re.subn(r"\.float\(\)", ".double()", src)
    assert n1 > 0 and n2 > 0, (mod.__name__, n1, n2)
    twin = types.ModuleType(name)
    twin.__package__ = mod.__package__
    twin.__file__ = mod.__file__
    sys.modules[name] = twin
    exec(compile(src, f"{mod.__file__} (float64 twin)", "exec"), twin.__dict__)
    return twin


def float64_twin(model):
    """The same model (same weights) built from the float64 twin of its modeling module."""
    twin_mod = _f64_modeling(sys.modules[type(model).__module__])
    cfg = type(model.config).from_dict(model.config.to_dict())
    cfg._attn_implementation = ATTN_IMPL
    cfg._experts_implementation = "eager"  # grouped_mm has no float64 kernel
    m = getattr(twin_mod, type(model).__name__)(cfg).double().eval()
    missing, unexpected = m.load_state_dict({k: v.double() for k, v in model.state_dict().items()}, strict=False)
    assert not unexpected and all(k.endswith("inv_freq") for k in missing), (missing, unexpected)
    for n, b in list(m.named_parameters()) + list(m.named_buffers()):
        assert b.dtype in (torch.float64, torch.int64, torch.bool), (n, b.dtype)
    return m


def f32_vs_f64(model, twin, prompts):
    """{T: max |logits_f32 - logits_f64|} for the plain (no-cache) forward of every prompt."""
    out = {}
    for T, ids in prompts.items():
        with torch.no_grad():
            a = model(input_ids=ids, use_cache=False).logits[0].double()
            b = twin(input_ids=ids, use_cache=False).logits[0]
        out[T] = (a - b).abs().max().item()
    return out


def text_model(model):
    m = model.model
    return m.language_model if hasattr(m, "language_model") else m


def hidden_trace(model, ids):
    tm = text_model(model)
    outs = []
    hooks = [tm.embed_tokens.register_forward_hook(lambda m, i, o: outs.append(o.detach().clone()))]
    for layer in tm.layers:
        hooks.append(
            layer.register_forward_hook(
                lambda m, i, o: outs.append((o[0] if isinstance(o, tuple) else o).detach().clone())
            )
        )
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    return torch.stack([o[0] for o in outs])  # [L+1, T, H]


def make_prompts(vocab: int, seed: int):
    out = {}
    for T in PROMPT_LENS:
        g = torch.Generator().manual_seed(seed * 7919 + T)
        out[T] = torch.randint(0, vocab, (1, T), generator=g, dtype=torch.long)
    return out


def compute_reference(model, prompts, counter, is_moe=False, k=None):
    """Logits, greedy continuation and decode logits for every prompt (float32), plus how far
    they are from the same computation in float64."""
    model.eval()
    twin = float64_twin(model)
    cond, cond_dec = {}, {}
    tensors, info = {}, {"prompts": {}}
    calls = {"prefill_forward": {}, "generate": {}}
    min_margin = float("inf")
    min_gap = float("inf")
    max_decode_vs_full = 0.0
    for T, ids in prompts.items():
        counter.take()
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0].float()
        for n, c in counter.take().items():
            calls["prefill_forward"][n] = calls["prefill_forward"].get(n, 0) + c
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=N_NEW,
                do_sample=False,
                num_beams=1,
                eos_token_id=None,
                pad_token_id=0,
                use_cache=True,
                return_dict_in_generate=True,
                output_logits=True,
            )
        for n, c in counter.take().items():
            calls["generate"][n] = calls["generate"].get(n, 0) + c
        new = gen.sequences[0, T:]
        assert new.numel() == N_NEW, new
        dec = torch.stack([l[0].float() for l in gen.logits])  # [8, V]
        assert torch.equal(dec.argmax(-1), new), "generate did not pick argmax"
        # Cross-check the cached recurrent decode against a full no-cache forward
        with torch.no_grad():
            full = model(input_ids=gen.sequences[:, :-1], use_cache=False).logits[0, T - 1 :].float()
        err = (full - dec).abs().max().item()
        max_decode_vs_full = max(max_decode_vs_full, err)
        assert err < 1e-4, f"decode vs full-forward mismatch {err}"
        assert (full[0] - logits[-1]).abs().max().item() < 1e-4
        with torch.no_grad():
            f64 = twin(input_ids=ids, use_cache=False).logits[0]
            f64_dec = twin(input_ids=gen.sequences[:, :-1], use_cache=False).logits[0, T - 1 :]
        cond[str(T)] = float(f"{(logits.double() - f64).abs().max().item():.3g}")
        cond_dec[str(T)] = float(f"{(dec.double() - f64_dec).abs().max().item():.3g}")
        assert cond[str(T)] <= MAX_F32_VS_F64, ("ill-conditioned", T, cond[str(T)])
        top2 = dec.topk(2, dim=-1).values
        margin = (top2[:, 0] - top2[:, 1]).min().item()
        min_margin = min(min_margin, margin)
        if is_moe:
            min_gap = min(min_gap, router_min_gap(model, gen.sequences, k))
        tensors[f"ids_{T}"] = ids[0].to(torch.int32).contiguous()
        tensors[f"logits_{T}"] = logits.contiguous()
        tensors[f"greedy_{T}"] = new.to(torch.int32).contiguous()
        tensors[f"decode_logits_{T}"] = dec.contiguous()
        info["prompts"][str(T)] = {
            "ids": ids[0].tolist(),
            "greedy": new.tolist(),
            "logits_abs_max": round(logits.abs().max().item(), 4),
            "logits_std": round(logits.std().item(), 4),
        }
    tensors["hidden_7"] = hidden_trace(model, prompts[7]).float().contiguous()
    info["greedy_min_top1_top2_margin"] = min_margin
    info["max_abs_decode_logits_vs_full_forward"] = max_decode_vs_full
    info["f32_vs_f64_max_abs_logits"] = cond
    info["f32_vs_f64_max_abs_decode_logits"] = cond_dec
    if is_moe:
        info["router_min_gap_kth_vs_next_prob"] = min_gap
    info["gdn_function_calls"] = calls
    return tensors, info


def prompt_quality(model, prompts, is_moe=False, k=None):
    """(smallest greedy top-1/top-2 margin, smallest router k-th/(k+1)-th prob gap)."""
    margin, gap = float("inf"), float("inf")
    for T, ids in prompts.items():
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=N_NEW,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                return_dict_in_generate=True,
                output_logits=True,
            )
        dec = torch.stack([l[0].float() for l in gen.logits])
        top2 = dec.topk(2, dim=-1).values
        margin = min(margin, (top2[:, 0] - top2[:, 1]).min().item())
        if is_moe:
            gap = min(gap, router_min_gap(model, gen.sequences, k))
    return margin, gap


def choose_prompts(models, vocab, base_seed, is_moe=False, k=None, tries=30):
    """Pick the first prompt seed whose greedy choices and MoE routing are not near-ties and
    whose f32 logits are within MAX_F32_VS_F64 of the float64 ones, for every model.

    A C++ implementation differs from transformers by ~1e-5 in the logits; a
    near-tie would make the greedy tokens or the selected experts flip for
    reasons that are not bugs, and an ill-conditioned prompt would make f32 round-off
    look like a bug. Deterministic: always the same seed is chosen. Returns
    (seed, prompts), or (None, None) when no seed in range qualifies.
    """
    twins = [float64_twin(m) for m in models]
    for s in range(base_seed, base_seed + tries):
        prompts = make_prompts(vocab, s)
        ok = True
        for m, tw in zip(models, twins):
            cond = max(f32_vs_f64(m, tw, prompts).values())
            if cond > MAX_F32_VS_F64:
                ok = False
                break
            margin, gap = prompt_quality(m, prompts, is_moe, k)
            if margin < MIN_GREEDY_MARGIN or (is_moe and gap < MIN_ROUTER_GAP):
                ok = False
                break
        if ok:
            return s, prompts
    return None, None


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "flash_linear_attention_installed": importlib.util.find_spec("fla") is not None,
        "causal_conv1d_installed": importlib.util.find_spec("causal_conv1d") is not None,
    }


def write_reference(d, tensors, info, name):
    # one metadata key only: safetensors writes metadata in hash order, so more keys would make
    # the file bytes differ from run to run
    meta = {"golden": f"{name}; transformers {transformers.__version__}; torch {torch.__version__}"}
    save_file(tensors, os.path.join(d, "reference.safetensors"), metadata=meta)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def tidy(d):
    """Drop generation_config.json (not needed) and make files world-readable."""
    g = os.path.join(d, "generation_config.json")
    if os.path.exists(g):
        os.remove(g)
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)


def clean_dir(d):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)


def add_language_model_prefix(path):
    """Rename ``model.X`` -> ``model.language_model.X`` in a saved single-file checkpoint.

    A freshly built Qwen3_5ForCausalLM saves as ``model.layers...``; the real
    Qwen3.5 checkpoints (and a Qwen3_5ForCausalLM that was *loaded* from one)
    use ``model.language_model.layers...``. transformers' conversion mapping for
    qwen3_5_text strips that prefix on load, so both forms load.
    """
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    sd = load_file(path)
    out = {}
    for k, v in sd.items():
        assert k.startswith("model.") or k.startswith("lm_head."), k
        out[k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k] = v
    save_file(out, path, metadata=meta)


def states_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys(), set(sa) ^ set(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def verify(d, cls, tensors, prompts, tol=1e-4, dtype=torch.float32, ref_model=None):
    """Reload the saved checkpoint with transformers (default attention impl) and compare."""
    cfg = AutoConfig.from_pretrained(d)
    m = cls.from_pretrained(d, dtype=dtype).float().eval()
    if ref_model is not None:
        # compare only the text weights (the reference model may lack the vision tower)
        rs = {k.replace("model.language_model.", "model."): v for k, v in ref_model.state_dict().items()}
        ms = {k.replace("model.language_model.", "model."): v for k, v in m.state_dict().items()}
        for k, v in rs.items():
            assert torch.equal(v.float(), ms[k]), k
    worst = 0.0
    for T, ids in prompts.items():
        with torch.no_grad():
            lg = m(input_ids=ids, use_cache=False).logits[0].float()
        worst = max(worst, (lg - tensors[f"logits_{T}"]).abs().max().item())
        with torch.no_grad():
            gen = m.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=N_NEW,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        assert torch.equal(gen[0, T:].to(torch.int32), tensors[f"greedy_{T}"]), (d, T)
    assert worst < tol, (d, worst)
    return type(cfg).__name__, worst


def dir_size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


# --------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------


def build_next(out, counter, do_verify):
    d = os.path.join(out, "qwen3_next")
    clean_dir(d)
    torch.manual_seed(0)
    cfg = Qwen3NextConfig(**NEXT_KW)
    cfg._attn_implementation = ATTN_IMPL
    model = Qwen3NextForCausalLM(cfg).eval()
    for i in range(WEIGHT_SEED_TRIES):
        wseed = 11 + 1000 * i
        fill_params(model, seed=wseed, hidden=cfg.hidden_size)
        condition_linear_attention(model)
        pseed, prompts = choose_prompts([model], cfg.vocab_size, 101, is_moe=True, k=cfg.num_experts_per_tok)
        if pseed is not None:
            break
    else:
        raise RuntimeError("qwen3_next: no weight/prompt seed passes the near-tie and conditioning checks")
    model.save_pretrained(d, safe_serialization=True)
    # Rewrite config.json in the style of the published Qwen3-Next checkpoints:
    # rope_theta / partial_rotary_factor / full_attention_interval at top level,
    # no rope_parameters and no layer_types (transformers derives them).
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    rp = c.pop("rope_parameters")
    lt = c.pop("layer_types")
    assert lt == ["linear_attention"] * 3 + ["full_attention"]
    c["full_attention_interval"] = 4
    c["rope_theta"] = rp["rope_theta"]
    c["partial_rotary_factor"] = rp["partial_rotary_factor"]
    c["rope_scaling"] = None
    json.dump(dict(sorted(c.items())), open(cpath, "w"), indent=2)
    re = AutoConfig.from_pretrained(d)
    assert re.layer_types == lt and re.rope_parameters["rope_theta"] == rp["rope_theta"]
    assert re.rope_parameters["partial_rotary_factor"] == 0.25

    tensors, info = compute_reference(model, prompts, counter, is_moe=True, k=cfg.num_experts_per_tok)
    info = {
        "weight_seed": wseed,
        "prompt_seed": pseed,
        "model": "qwen3_next",
        "class": "Qwen3NextForCausalLM",
        "checkpoint": "model.safetensors",
        "dtype": "float32",
        "reference_attn_implementation": ATTN_IMPL,
        "versions": versions(),
        **info,
    }
    write_reference(d, tensors, info, "qwen3_next")
    if do_verify:
        cname, err = verify(d, Qwen3NextForCausalLM, tensors, prompts)
        print(f"  verified qwen3_next reload ({cname}): max |dlogits| = {err:.2e}")
    return model


def build_q35(out, counter, do_verify):
    d = os.path.join(out, "qwen3_5")
    clean_dir(d)
    torch.manual_seed(0)
    tcfg = Qwen3_5TextConfig(**Q35_TEXT_KW)
    tcfg._attn_implementation = ATTN_IMPL
    model = Qwen3_5ForCausalLM(tcfg).eval()
    rounded = Qwen3_5ForCausalLM(tcfg).eval()
    for i in range(WEIGHT_SEED_TRIES):
        wseed = 23 + 1000 * i
        fill_params(model, seed=wseed, hidden=tcfg.hidden_size)
        condition_linear_attention(model)
        # prompts must be free of near-ties (and well conditioned) for the f32 model and its
        # bf16-rounded copy
        rounded.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
        pseed, prompts = choose_prompts([model, rounded], tcfg.vocab_size, 202)
        if pseed is not None:
            break
    else:
        raise RuntimeError("qwen3_5: no weight/prompt seed passes the near-tie and conditioning checks")
    model.save_pretrained(d, safe_serialization=True)
    add_language_model_prefix(os.path.join(d, "model.safetensors"))
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    c["full_attention_interval"] = 3  # consistent with layer_types (the real configs carry both)
    json.dump(dict(sorted(c.items())), open(cpath, "w"), indent=2)

    tensors, info = compute_reference(model, prompts, counter)
    info = {
        "weight_seed": wseed,
        "prompt_seed": pseed,
        "model": "qwen3_5",
        "class": "Qwen3_5ForCausalLM",
        "checkpoint": "model.safetensors",
        "dtype": "float32",
        "reference_attn_implementation": ATTN_IMPL,
        "versions": versions(),
        **info,
    }
    write_reference(d, tensors, info, "qwen3_5")
    if do_verify:
        cname, err = verify(d, Qwen3_5ForCausalLM, tensors, prompts, ref_model=model)
        print(f"  verified qwen3_5 reload ({cname}): max |dlogits| = {err:.2e}")
    return model, prompts, tensors


def build_q35_bf16(out, counter, do_verify, model_f32, prompts):
    d = os.path.join(out, "qwen3_5_bf16")
    clean_dir(d)
    tcfg = Qwen3_5TextConfig(**Q35_TEXT_KW)
    tcfg._attn_implementation = ATTN_IMPL
    # f32 model holding the bf16-rounded weights (reference computed in f32)
    rounded = Qwen3_5ForCausalLM(tcfg).eval()
    rounded.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model_f32.state_dict().items()})
    bf = Qwen3_5ForCausalLM(tcfg).eval()
    bf.load_state_dict(rounded.state_dict())
    bf = bf.to(torch.bfloat16)
    bf.save_pretrained(d, safe_serialization=True)
    add_language_model_prefix(os.path.join(d, "model.safetensors"))
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    assert c["dtype"] == "bfloat16", c["dtype"]
    c["full_attention_interval"] = 3
    json.dump(dict(sorted(c.items())), open(cpath, "w"), indent=2)
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        for k in f.keys():
            assert f.get_slice(k).get_dtype() == "BF16", k

    tensors, info = compute_reference(rounded, prompts, counter)
    info = {
        "model": "qwen3_5_bf16",
        "class": "Qwen3_5ForCausalLM",
        "checkpoint": "model.safetensors (bfloat16 weights)",
        "dtype": "bfloat16 storage; reference computed in float32 from the bf16 values upcast",
        "reference_attn_implementation": ATTN_IMPL,
        "versions": versions(),
        "prompt_seed": json.load(open(os.path.join(out, "qwen3_5", "reference.json")))["prompt_seed"],
        **info,
    }
    write_reference(d, tensors, info, "qwen3_5_bf16")
    if do_verify:
        cname, err = verify(d, Qwen3_5ForCausalLM, tensors, prompts, dtype=torch.float32, ref_model=rounded)
        print(f"  verified qwen3_5_bf16 reload ({cname}, loaded as f32): max |dlogits| = {err:.2e}")


def build_q35_sharded(out, counter, do_verify, model_f32, prompts, tensors):
    d = os.path.join(out, "qwen3_5_sharded")
    clean_dir(d)
    torch.manual_seed(0)
    cfg = Qwen3_5Config(
        text_config=dict(Q35_TEXT_KW),
        vision_config=dict(Q35_VISION_KW),
        tie_word_embeddings=Q35_TEXT_KW["tie_word_embeddings"],
    )
    cfg._attn_implementation = ATTN_IMPL
    cfg.text_config._attn_implementation = ATTN_IMPL
    cfg.vision_config._attn_implementation = ATTN_IMPL
    vl = Qwen3_5ForConditionalGeneration(cfg).eval()
    fill_params(vl, seed=37, hidden=Q35_TEXT_KW["hidden_size"])  # vision tower gets random values too
    src = model_f32.state_dict()
    with torch.no_grad():
        for k, v in vl.state_dict().items():
            if k.startswith("model.language_model."):
                v.copy_(src["model." + k[len("model.language_model.") :]])
            elif k == "lm_head.weight":
                v.copy_(src["lm_head.weight"])
    assert vl.lm_head.weight.data_ptr() == vl.model.language_model.embed_tokens.weight.data_ptr()
    sd_bytes = sum(v.numel() * v.element_size() for v in vl.state_dict().values())
    shard = int(sd_bytes * 0.6)
    vl.save_pretrained(d, safe_serialization=True, max_shard_size=shard)
    files = sorted(os.listdir(d))
    shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
    assert len(shards) == 2 and "model.safetensors.index.json" in files, files
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    c["text_config"]["full_attention_interval"] = 3
    json.dump(c, open(cpath, "w"), indent=2)

    # Same text weights -> must reproduce qwen3_5's reference exactly (text-only input)
    counter.take()
    worst = 0.0
    for T, ids in prompts.items():
        with torch.no_grad():
            lg = vl(input_ids=ids, use_cache=False).logits[0].float()
            gen = vl.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=N_NEW,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        worst = max(worst, (lg - tensors[f"logits_{T}"]).abs().max().item())
        assert torch.equal(gen[0, T:].to(torch.int32), tensors[f"greedy_{T}"]), T
    assert worst < 1e-5, worst
    counter.take()
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    info = {
        "model": "qwen3_5_sharded",
        "class": "Qwen3_5ForConditionalGeneration",
        "checkpoint": "model.safetensors.index.json + " + " + ".join(shards),
        "dtype": "float32",
        "reference": "../qwen3_5/reference.safetensors (identical text weights; logits max diff "
        f"{worst:.1e} when run through Qwen3_5ForConditionalGeneration)",
        "ignore_prefixes": ["model.visual."],
        "n_tensors": len(idx["weight_map"]),
        "n_visual_tensors": sum(1 for k in idx["weight_map"] if k.startswith("model.visual.")),
        "versions": versions(),
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    if do_verify:
        cname, err = verify(d, Qwen3_5ForConditionalGeneration, tensors, prompts, ref_model=model_f32)
        print(f"  verified qwen3_5_sharded reload ({cname}): max |dlogits| = {err:.2e}")


def add_mtp_tensors(d, index_name, hidden, seed):
    """Add a small multi-token-prediction head (``mtp.*``) to the last shard of a sharded
    checkpoint, as the published Qwen3.5 checkpoints carry one (transformers ignores it;
    hypic must skip it too). Updates the index."""
    idx_path = os.path.join(d, index_name)
    idx = json.load(open(idx_path))
    last = sorted(set(idx["weight_map"].values()))[-1]
    path = os.path.join(d, last)
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    sd = load_file(path)
    g = _gen("mtp", seed)
    extra = {
        "mtp.fc.weight": torch.randn(hidden, 2 * hidden, generator=g),
        "mtp.norm.weight": torch.randn(hidden, generator=g),
        "mtp.layers.0.input_layernorm.weight": torch.randn(hidden, generator=g),
    }
    sd.update(extra)
    save_file(sd, path, metadata=meta)
    for k, v in extra.items():
        idx["weight_map"][k] = last
        idx["metadata"]["total_size"] += v.numel() * v.element_size()
    idx["weight_map"] = dict(sorted(idx["weight_map"].items()))
    with open(idx_path, "w") as f:
        json.dump(idx, f, indent=2)
        f.write("\n")
    return sorted(extra)


def fuse_experts(d, index_name):
    """Rewrite a sharded checkpoint's per-expert tensors (``mlp.experts.<e>.{gate,up,down}_proj
    .weight``) as the fused stacks the published Qwen3.5 MoE checkpoints hold
    (``mlp.experts.gate_up_proj`` [E, 2I, H], ``mlp.experts.down_proj`` [E, H, I]); each stack
    goes to the shard that held its expert 0. Returns the number of layers converted."""
    idx_path = os.path.join(d, index_name)
    idx = json.load(open(idx_path))
    shards = sorted(set(idx["weight_map"].values()))
    metas, tensors = {}, {}
    for sh in shards:
        with safe_open(os.path.join(d, sh), "pt") as f:
            metas[sh] = f.metadata()
        for k, v in load_file(os.path.join(d, sh)).items():
            tensors[k] = (sh, v)
    pat = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")
    groups = {}
    for k in list(tensors):
        m = pat.match(k)
        if m:
            groups.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = tensors.pop(k)
    for prefix, parts in groups.items():
        n = 1 + max(e for e, _ in parts)
        home = parts[(0, "gate")][0]
        gate_up = torch.stack([torch.cat([parts[(e, "gate")][1], parts[(e, "up")][1]], 0) for e in range(n)])
        down = torch.stack([parts[(e, "down")][1] for e in range(n)])
        tensors[prefix + ".gate_up_proj"] = (home, gate_up.contiguous())
        tensors[prefix + ".down_proj"] = (home, down.contiguous())
    weight_map = {}
    for sh in shards:
        part = {k: v for k, (s, v) in tensors.items() if s == sh}
        save_file(part, os.path.join(d, sh), metadata=metas[sh])
        weight_map.update({k: sh for k in part})
    idx["weight_map"] = dict(sorted(weight_map.items()))
    with open(idx_path, "w") as f:
        json.dump(idx, f, indent=2)
        f.write("\n")
    return len(groups)


def build_q35moe(out, counter, do_verify):
    """qwen3_5_moe (f32, text-only class, fused expert stacks under model.language_model.),
    qwen3_5_moe_bf16 (the same weights rounded to bf16) and qwen3_5_moe_sharded (the
    Qwen3_5MoeForConditionalGeneration layout with a vision tower and MTP tensors)."""
    d = os.path.join(out, "qwen3_5_moe")
    clean_dir(d)
    torch.manual_seed(0)
    tcfg = Qwen3_5MoeTextConfig(**Q35MOE_TEXT_KW)
    tcfg._attn_implementation = ATTN_IMPL
    k = tcfg.num_experts_per_tok
    model = Qwen3_5MoeForCausalLM(tcfg).eval()
    rounded = Qwen3_5MoeForCausalLM(tcfg).eval()
    for i in range(WEIGHT_SEED_TRIES):
        wseed = 31 + 1000 * i
        fill_params(model, seed=wseed, hidden=tcfg.hidden_size)
        condition_linear_attention(model)
        # A router of half fill_params' scale: with more experts per layer than qwen3_next the
        # full-scale router is so peaked that the k-th and (k+1)-th probabilities are both
        # ~0 and closer than MIN_ROUTER_GAP for almost every prompt seed.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("mlp.gate.weight"):
                    p.mul_(0.5)
        rounded.load_state_dict({n: v.to(torch.bfloat16).float() for n, v in model.state_dict().items()})
        pseed, prompts = choose_prompts([model, rounded], tcfg.vocab_size, 303, is_moe=True, k=k)
        if pseed is not None:
            break
    else:
        raise RuntimeError("qwen3_5_moe: no weight/prompt seed passes the near-tie and conditioning checks")
    model.save_pretrained(d, safe_serialization=True)
    add_language_model_prefix(os.path.join(d, "model.safetensors"))
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        names = list(f.keys())
    # transformers writes this class's experts one by one (its qwen2_moe conversion)
    assert "model.language_model.layers.0.mlp.experts.0.gate_proj.weight" in names, names[:8]
    cpath = os.path.join(d, "config.json")
    c = json.load(open(cpath))
    c["full_attention_interval"] = 3  # as the real configs, which carry both (layer_types wins)
    json.dump(dict(sorted(c.items())), open(cpath, "w"), indent=2)

    tensors, info = compute_reference(model, prompts, counter, is_moe=True, k=k)
    info = {
        "weight_seed": wseed,
        "prompt_seed": pseed,
        "model": "qwen3_5_moe",
        "class": "Qwen3_5MoeForCausalLM",
        "checkpoint": "model.safetensors (experts one by one, as save_pretrained writes them)",
        "dtype": "float32",
        "reference_attn_implementation": ATTN_IMPL,
        "versions": versions(),
        **info,
    }
    write_reference(d, tensors, info, "qwen3_5_moe")
    if do_verify:
        cname, err = verify(d, Qwen3_5MoeForCausalLM, tensors, prompts, ref_model=model)
        print(f"  verified qwen3_5_moe reload ({cname}): max |dlogits| = {err:.2e}")

    # bf16: the rounded weights stored as bf16; reference computed in f32 from them
    db = os.path.join(out, "qwen3_5_moe_bf16")
    clean_dir(db)
    bf = Qwen3_5MoeForCausalLM(tcfg).eval()
    bf.load_state_dict(rounded.state_dict())
    bf = bf.to(torch.bfloat16)
    bf.save_pretrained(db, safe_serialization=True)
    add_language_model_prefix(os.path.join(db, "model.safetensors"))
    cpath = os.path.join(db, "config.json")
    c = json.load(open(cpath))
    assert c["dtype"] == "bfloat16", c["dtype"]
    c["full_attention_interval"] = 3
    json.dump(dict(sorted(c.items())), open(cpath, "w"), indent=2)
    with safe_open(os.path.join(db, "model.safetensors"), "pt") as f:
        for n in f.keys():
            assert f.get_slice(n).get_dtype() == "BF16", n
    btensors, binfo = compute_reference(rounded, prompts, counter, is_moe=True, k=k)
    binfo = {
        "model": "qwen3_5_moe_bf16",
        "class": "Qwen3_5MoeForCausalLM",
        "checkpoint": "model.safetensors (bfloat16 weights)",
        "dtype": "bfloat16 storage; reference computed in float32 from the bf16 values upcast",
        "reference_attn_implementation": ATTN_IMPL,
        "versions": versions(),
        "prompt_seed": pseed,
        **binfo,
    }
    write_reference(db, btensors, binfo, "qwen3_5_moe_bf16")
    if do_verify:
        cname, err = verify(db, Qwen3_5MoeForCausalLM, btensors, prompts, dtype=torch.float32, ref_model=rounded)
        print(f"  verified qwen3_5_moe_bf16 reload ({cname}, loaded as f32): max |dlogits| = {err:.2e}")

    # sharded multimodal wrapper: same text weights, a tiny vision tower, MTP tensors
    ds = os.path.join(out, "qwen3_5_moe_sharded")
    clean_dir(ds)
    torch.manual_seed(0)
    cfg = Qwen3_5MoeConfig(
        text_config=dict(Q35MOE_TEXT_KW),
        vision_config=dict(Q35MOE_VISION_KW),
        tie_word_embeddings=Q35MOE_TEXT_KW["tie_word_embeddings"],
    )
    cfg._attn_implementation = ATTN_IMPL
    cfg.text_config._attn_implementation = ATTN_IMPL
    cfg.vision_config._attn_implementation = ATTN_IMPL
    vl = Qwen3_5MoeForConditionalGeneration(cfg).eval()
    fill_params(vl, seed=41, hidden=Q35MOE_TEXT_KW["hidden_size"])  # vision tower gets values too
    src = model.state_dict()
    with torch.no_grad():
        for n, v in vl.state_dict().items():
            if n.startswith("model.language_model."):
                v.copy_(src["model." + n[len("model.language_model.") :]])
            elif n == "lm_head.weight":
                v.copy_(src["lm_head.weight"])
    sd_bytes = sum(v.numel() * v.element_size() for v in vl.state_dict().values())
    vl.save_pretrained(ds, safe_serialization=True, max_shard_size=int(sd_bytes * 0.4))
    files = sorted(os.listdir(ds))
    shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
    assert len(shards) >= 3 and "model.safetensors.index.json" in files, files
    fused = fuse_experts(ds, "model.safetensors.index.json")
    mtp = add_mtp_tensors(ds, "model.safetensors.index.json", Q35MOE_TEXT_KW["hidden_size"], 43)
    cpath = os.path.join(ds, "config.json")
    c = json.load(open(cpath))
    c["text_config"]["full_attention_interval"] = 3
    c["text_config"]["mtp_num_hidden_layers"] = 1  # as published; transformers ignores it
    json.dump(c, open(cpath, "w"), indent=2)
    counter.take()
    worst = 0.0
    for T, ids in prompts.items():
        with torch.no_grad():
            lg = vl(input_ids=ids, use_cache=False).logits[0].float()
        worst = max(worst, (lg - tensors[f"logits_{T}"]).abs().max().item())
    assert worst < 1e-5, worst
    counter.take()
    idx = json.load(open(os.path.join(ds, "model.safetensors.index.json")))
    sinfo = {
        "model": "qwen3_5_moe_sharded",
        "class": "Qwen3_5MoeForConditionalGeneration",
        "checkpoint": "model.safetensors.index.json + " + " + ".join(shards),
        "dtype": "float32",
        "reference": "../qwen3_5_moe/reference.safetensors (identical text weights; logits max diff "
        f"{worst:.1e} when run through Qwen3_5MoeForConditionalGeneration)",
        "ignore_prefixes": ["model.visual.", "mtp."],
        "mtp_tensors_added": mtp,
        "experts": f"fused stacks, as the published checkpoints store them ({fused} layers converted)",
        "n_tensors": len(idx["weight_map"]),
        "n_visual_tensors": sum(1 for n in idx["weight_map"] if n.startswith("model.visual.")),
        "versions": versions(),
    }
    with open(os.path.join(ds, "reference.json"), "w") as f:
        json.dump(sinfo, f, indent=1)
        f.write("\n")
    if do_verify:
        cname, err = verify(ds, Qwen3_5MoeForConditionalGeneration, tensors, prompts, ref_model=model)
        print(f"  verified qwen3_5_moe_sharded reload ({cname}): max |dlogits| = {err:.2e}")


def write_readme(out, sizes):
    v = versions()
    lines = [
        "# Golden reference data (generated — do not edit)",
        "",
        "Produced by `scripts/golden/make_golden.py` (tiny random models, CPU, float32, seeded).",
        "The C++ tests read these files; Python is not needed at test time.",
        "Model facts: `docs/model-reference.md`.",
        "",
        "Versions used:",
        "",
        f"- Python {v['python']}",
        f"- torch {v['torch']} (CPU)",
        f"- transformers {v['transformers']}",
        f"- safetensors {v['safetensors']}",
        f"- flash-linear-attention installed: {v['flash_linear_attention_installed']}, "
        f"causal-conv1d installed: {v['causal_conv1d_installed']} "
        "(so transformers used its torch fallbacks: torch_chunk_gated_delta_rule for prefill, "
        "torch_recurrent_gated_delta_rule + causal_conv1d_update for decode)",
        "",
        "| dir | what |",
        "|---|---|",
        "| `qwen3_next/` | Qwen3NextForCausalLM, f32, 4 layers (GDN, GDN, GDN, attention), MoE everywhere except layer 1 (dense MLP, `mlp_only_layers=[1]`); config.json in published-checkpoint style (top-level `rope_theta`, `partial_rotary_factor`, `full_attention_interval`, no `layer_types`) |",
        "| `qwen3_5/` | Qwen3_5ForCausalLM (text only), f32, 6 layers with `layer_types` [lin, lin, full]×2, tied embeddings (no `lm_head.weight`); tensors under `model.language_model.`; flat config (`model_type: qwen3_5_text`) |",
        "| `qwen3_5_bf16/` | the qwen3_5 weights rounded to bf16, stored as bf16; its reference was computed in f32 from the rounded values |",
        "| `qwen3_5_moe/` | Qwen3_5MoeForCausalLM (text only), f32, 5 layers [lin, lin, full, lin, lin], 7 routed experts (top 3, renormalised) + a gated shared expert in every layer, fused expert stacks (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]) as transformers saves them, untied lm_head; tensors under `model.language_model.` |",
        "| `qwen3_5_moe_bf16/` | the qwen3_5_moe weights rounded to bf16, stored as bf16; its reference was computed in f32 from the rounded values |",
        "| `qwen3_5_moe_sharded/` | the qwen3_5_moe weights in the published layout (Qwen3_5MoeForConditionalGeneration: nested `text_config`/`vision_config`, tiny `model.visual.*` tower, plus `mtp.*` tensors), several shards + index; compare against `../qwen3_5_moe/reference.safetensors` |",
        "| `qwen3_5_sharded/` | the qwen3_5 weights in the full Qwen3.5 layout (Qwen3_5ForConditionalGeneration: nested `text_config`/`vision_config`, tiny `model.visual.*` tower to ignore), 2 shards + `model.safetensors.index.json`; compare against `../qwen3_5/reference.safetensors` |",
        "",
        "`reference.safetensors` (per model dir except `qwen3_5_sharded/`), for T in 1, 7, 64, 130:",
        "",
        "- `ids_<T>` int32 [T] — prompt token ids",
        "- `logits_<T>` float32 [T, vocab] — plain forward, no cache",
        "- `greedy_<T>` int32 [8] — greedy continuation (`model.generate`, do_sample=False, cached decode)",
        "- `decode_logits_<T>` float32 [8, vocab] — the logits that picked each greedy token "
        "(row 0 = last prompt position; rows 1..7 from single-token cached decode)",
        "- `hidden_7` float32 [layers+1, 7, hidden] — embedding output, then each decoder layer's output "
        "(before the final norm) for the T=7 prompt",
        "",
        "`reference.json` repeats ids and greedy tokens, and records the smallest greedy top-1/top-2 "
        "logit margin, the smallest MoE router gap between the k-th and (k+1)-th expert probability "
        "(qwen3_next), which GDN helper functions transformers called, and the versions.",
        "",
        "Numerical agreement to expect (logits std ~1.3, max ~5.5). The random weights are chosen to be "
        "well conditioned for f32: in the linear-attention layers each k projection row and conv tap is "
        "correlated (0.8) with the matching q one and the beta rows are scaled by 0.5, so no head's delta-rule "
        "output is a near-cancelling sum that the gated RMSNorm would blow up; the final norm's gain is ~0.5. "
        "Every f32 reference is then compared with the same transformers code run entirely in float64 (a copy "
        "of the modeling module with its float32 upcasts turned into float64 — `model.double()` alone still "
        "runs the RMSNorms, the gated norm, the softmaxes and both GDN kernels in float32): "
        "`f32_vs_f64_max_abs_logits` in reference.json is required to be <= 2e-5 for every prompt (weight and "
        "prompt seeds are searched until it holds); `f32_vs_f64_max_abs_decode_logits` records the same for "
        "the cached decode rows. The stored logits are transformers' float32 results, not the float64 ones: "
        "they are what transformers produces, and the greedy tokens come from the same f32 run. A correct f32 "
        "implementation therefore differs from them by its own round-off plus transformers' (each ~2e-5 at "
        "most): expect a few 1e-5 and use 1e-4 as the tolerance; transformers' own chunked-prefill and "
        "recurrent-decode paths agree to ~1e-5 (`max_abs_decode_logits_vs_full_forward`). Require exact "
        "greedy tokens (the smallest top-1/top-2 margin is recorded and is > 5e-3).",
        "",
        "Sizes (bytes):",
        "",
    ]
    for name, files in sizes:
        for f, s in files:
            lines.append(f"- `{name}/{f}`: {s}")
    lines.append("")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "golden"))
    ap.add_argument("--no-verify", action="store_true", help="skip reloading the saved checkpoints")
    ap.add_argument(
        "--only",
        choices=("qwen3_next", "qwen3_5", "qwen3_5_moe"),
        help="regenerate one family only (the others' folders are left as they are)",
    )
    args = ap.parse_args()
    t0 = time.time()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead (and results stay reproducible)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass
    os.makedirs(args.out, exist_ok=True)
    counter = CallCounter()
    verify_ = not args.no_verify

    if args.only in (None, "qwen3_next"):
        print("qwen3_next ...")
        build_next(args.out, counter, verify_)
    if args.only in (None, "qwen3_5"):
        print("qwen3_5 ...")
        m35, prompts35, tensors35 = build_q35(args.out, counter, verify_)
        print("qwen3_5_bf16 ...")
        build_q35_bf16(args.out, counter, verify_, m35, prompts35)
        print("qwen3_5_sharded ...")
        build_q35_sharded(args.out, counter, verify_, m35, prompts35, tensors35)
    if args.only in (None, "qwen3_5_moe"):
        print("qwen3_5_moe, qwen3_5_moe_bf16, qwen3_5_moe_sharded ...")
        build_q35moe(args.out, counter, verify_)

    sizes = []
    total = 0
    for name in ("qwen3_next", "qwen3_5", "qwen3_5_bf16", "qwen3_5_sharded", "qwen3_5_moe",
                 "qwen3_5_moe_bf16", "qwen3_5_moe_sharded"):
        d = os.path.join(args.out, name)
        tidy(d)
        files = [(f, os.path.getsize(os.path.join(d, f))) for f in sorted(os.listdir(d))]
        total += sum(s for _, s in files)
        sizes.append((name, files))
    write_readme(args.out, sizes)
    print(f"total {total} bytes in {args.out}; {time.time() - t0:.1f} s")
    if total > 5.5e6:
        print("WARNING: golden data larger than ~5.5 MB", file=sys.stderr)


if __name__ == "__main__":
    main()
