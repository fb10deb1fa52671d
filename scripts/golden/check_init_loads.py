#!/usr/bin/env python3
"""Checks that `hypic model init` writes checkpoints transformers loads as they are.
Takes: about a minute (needs torch and transformers).

For each architecture (qwen3_next, qwen3_5, qwen3_5_moe) and each stored dtype (f32, bf16), the tiny
preset is written with hypic and loaded with transformers' AutoModelForCausalLM:
no missing, unexpected or mismatched keys; every parameter equals the stored tensor;
a forward pass gives finite, non-degenerate logits. For every preset the parameter
count of the model transformers builds from the written config.json (on the meta
device, no weights) must equal the count hypic reports.

A development check (needs torch, transformers, safetensors); the C++ tests do not run it.

    python3 scripts/golden/check_init_loads.py [--hypic build/src/hypic] [--keep DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM


def find_hypic(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for build in ("build", "build-io", "build-release"):
        p = os.path.join(root, build, "src", "hypic")
        if os.path.exists(p):
            return p
    sys.exit("hypic binary not found; pass --hypic PATH")


def hypic_params(hypic, model_dir):
    out = subprocess.run([hypic, "model", "info", "--model", model_dir], check=True,
                         capture_output=True, text=True).stdout
    m = re.search(r"^parameters\s*:\s*(\d+)", out, re.M)
    return int(m.group(1))


def stored_tensors(model_dir):
    """name -> float32 tensor of every tensor in the folder's safetensors file(s)."""
    files = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
    out = {}
    for f in files:
        with safe_open(os.path.join(model_dir, f), "pt") as st:
            for k in st.keys():
                out[k] = st.get_tensor(k).float()
    return out


def expected_state(stored, state_keys):
    """Maps the checkpoint's names onto transformers' in-memory names: Qwen3.5's
    `model.language_model.` level is dropped, Qwen3-Next's per-expert tensors are
    stacked into experts.gate_up_proj / experts.down_proj."""
    exp = {}
    experts = {}
    for k, v in stored.items():
        k2 = k.replace("model.language_model.", "model.", 1)
        m = re.match(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", k2)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
            continue
        exp[k2] = v
    for base, per in experts.items():
        ids = sorted(per)
        exp[base + ".gate_up_proj"] = torch.stack(
            [torch.cat([per[e]["gate"], per[e]["up"]], 0) for e in ids])
        exp[base + ".down_proj"] = torch.stack([per[e]["down"] for e in ids])
    if "lm_head.weight" in state_keys and "lm_head.weight" not in exp:
        exp["lm_head.weight"] = exp["model.embed_tokens.weight"]  # tied
    return exp


def check_load(hypic, work, arch, dtype):
    d = os.path.join(work, f"{arch}-tiny-{dtype}")
    subprocess.run([hypic, "model", "init", "--arch", arch, "--preset", "tiny", "--seed", "7",
                    "--out", d, "--dtype", dtype], check=True, capture_output=True)
    model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True,
                                                       dtype=torch.float32)
    problems = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
    if info.get("error_msgs"):
        problems["error_msgs"] = info["error_msgs"]
    state = model.state_dict()
    exp = expected_state(stored_tensors(d), state.keys())
    missing_values = sorted(set(state) - set(exp))
    unused_values = sorted(set(exp) - set(state))
    mismatched = [k for k in state if k in exp and not torch.equal(state[k].float(), exp[k])]
    ids = torch.arange(0, 40).remainder(model.config.vocab_size).unsqueeze(0)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    finite = bool(torch.isfinite(logits).all())
    std = float(logits.std())
    distinct_argmax = len(set(logits.argmax(-1).tolist()))
    ok = (not problems and not missing_values and not unused_values and not mismatched
          and finite and std > 0.1 and distinct_argmax > 1)
    print(f"{arch:10s} tiny {dtype:4s}: {type(model).__name__}, {len(state)} tensors, "
          f"loading info {problems or 'clean'}, values equal: {not mismatched and not missing_values and not unused_values}, "
          f"logits finite: {finite}, std {std:.3f}, distinct argmax over 40 positions: "
          f"{distinct_argmax} -> {'OK' if ok else 'FAIL'}")
    if not ok:
        for name, lst in (("in model, not in file", missing_values),
                          ("in file, not in model", unused_values), ("value mismatch", mismatched)):
            if lst:
                print(f"    {name}: {lst[:8]}")
    return ok


def check_count(hypic, work, arch, preset):
    d = os.path.join(work, f"{arch}-{preset}-count")
    os.makedirs(d, exist_ok=True)
    # The real preset in bf16, so that `model info` reads what init wrote.
    subprocess.run([hypic, "model", "init", "--arch", arch, "--preset", preset, "--seed", "1",
                    "--out", d, "--dtype", "bf16"], check=True, capture_output=True)
    ours = hypic_params(hypic, d)
    cfg = AutoConfig.from_pretrained(d)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    theirs = sum(p.numel() for p in model.parameters())  # tied weights count once
    ok = ours == theirs
    print(f"{arch:10s} {preset:5s} parameters: hypic {ours:,} transformers {theirs:,} -> "
          f"{'OK' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hypic", help="path of the hypic binary")
    ap.add_argument("--keep", help="write the checkpoints here and keep them")
    ap.add_argument("--skip-bench", action="store_true", help="skip the bench-preset count")
    args = ap.parse_args()
    hypic = find_hypic(args.hypic)
    import transformers
    print(f"hypic {hypic}; transformers {transformers.__version__}, torch {torch.__version__}")
    work = args.keep or tempfile.mkdtemp(prefix="hypic-init-")
    os.makedirs(work, exist_ok=True)
    ok = True
    for arch in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        for dtype in ("f32", "bf16"):
            ok &= check_load(hypic, work, arch, dtype)
    for arch in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        for preset in ("tiny", "small") + (() if args.skip_bench else ("bench",)):
            ok &= check_count(hypic, work, arch, preset)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("ALL OK" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
