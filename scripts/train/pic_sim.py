"""The forward pass of a Qwen3.5 model (transformers' Qwen3_5ForCausalLM) as hypic's pic mode
computes it, with any junction width W, differentiable, for training (train_tiny.py
--pic-share, --pic-junction).
Takes: minutes per evaluation on CPU (needs torch and transformers).

A prompt is a prefix, segments (passages) and a suffix (the question or summary request,
then the answer tokens). pic caches every segment computed on its own, then at query time
(../shared/design/MATH.md §3-5):
- the prefix, the first W tokens of every segment (its junction window, at most all but
  its last token) and the suffix are
  *fresh*: they run through every layer over everything before them;
- the other tokens of a segment are *cached*: at every layer their rows are those of the
  segment computed alone. A full-attention layer splices their keys and values (at their
  true positions: re-rotation is exact); a linear layer composes S = T·S_in + S(·|0), with
  T and S(·|0) from the isolated computation (its conv outputs included).

So two streams run, the first before the second:
1. isolated (`isolated_stream`): every segment alone (one right-padded batch, zero state,
   true positions), every layer's input kept;
2. the pic world, layer by layer: the whole prompt, where each layer's input at a cached
   position is the isolated stream's row. A full-attention layer is then plain causal
   attention over it; a linear layer is the recurrence run straight through it, with the
   conv outputs at cached positions taken from the isolated stream (the composition equals
   that recurrence). Only the fresh positions' outputs are kept.
The logits at cached positions are the isolated stream's (an LM loss there trains a
segment alone).

Training on a share of rows computed this way teaches the model to read passages whose
later-layer rows were computed without context, which is what pic gives it (block-attention
fine-tuning, for a hybrid). `python3 scripts/train/pic_sim.py --eval-jsonl ...` checks this pass
against hypic's own first-token figures; `--by-layer NAME` measures, over a dataset's
reference answers, how much of pic's divergence each layer's reading of the cached tokens
makes (`exact_below`); `kv_gap` gives the first attention layer's cached keys and values
against full recompute's, which train_tiny.py --pic-kv-match trains to agree.
"""

import torch
import torch.nn.functional as F


def _gdn(attn, x, conv_override=None):
    """A Gated DeltaNet layer from zero state over x ([B, T, d], already input-normed).
    conv_override: (positions [P], values [P, C]) replacing the conv outputs of row 0 at those
    positions. Returns (output [B, T, d], conv outputs after SiLU [B, T, C])."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    B, T, _ = x.shape
    conv = F.silu(F.conv1d(attn.in_proj_qkv(x).transpose(1, 2), attn.conv1d.weight,
                           padding=attn.conv_kernel_size - 1,
                           groups=attn.conv_dim)[:, :, :T].transpose(1, 2))
    if conv_override is not None:
        at, values = conv_override
        conv = conv.clone()
        conv[0, at] = values
    z = attn.in_proj_z(x).reshape(B, T, -1, attn.head_v_dim)
    beta = attn.in_proj_b(x).sigmoid()
    g = -attn.A_log.float().exp() * F.softplus(attn.in_proj_a(x).float() + attn.dt_bias)
    q, k, v = torch.split(conv, [attn.key_dim, attn.key_dim, attn.value_dim], dim=-1)
    core, _ = mq.torch_chunk_gated_delta_rule(
        q.reshape(B, T, -1, attn.head_k_dim), k.reshape(B, T, -1, attn.head_k_dim),
        v.reshape(B, T, -1, attn.head_v_dim), g=g, beta=beta, initial_state=None,
        output_final_state=False, use_qk_l2norm_in_kernel=True)
    core = attn.norm(core.reshape(-1, attn.head_v_dim), z.reshape(-1, attn.head_v_dim))
    return attn.out_proj(core.reshape(B, T, -1)), conv


def causal(n):
    """[1, 1, n, n], True where a row may attend (explicit, whatever attention backend)."""
    return torch.ones(n, n, dtype=torch.bool).tril()[None, None]


def _mlp(layer, h):
    return h + layer.mlp(layer.post_attention_layernorm(h))


def _kv(attn, x):
    """A full-attention layer's keys (after their norm, before RoPE, which rotates both
    streams' keys alike) and values of input-normed rows x [N, d], flattened to [N, *]."""
    k = attn.k_norm(attn.k_proj(x).view(x.shape[0], -1, attn.head_dim))
    return torch.cat([k.flatten(1), attn.v_proj(x)], dim=1)


def isolated_stream(model, ids, spans):
    """The isolated stream of ids ([1, T]) with segments `spans`: every segment alone, in one
    right-padded batch [K, L, d] at its true positions. Returns (inputs, convs): inputs[i] is
    the batch's input to layer i (inputs[-1] the last layer's output), convs[i] a linear
    layer's conv outputs after SiLU [K, L, C] (None for attention). It does not depend on
    exact_below, so `--by-layer` computes it once per example for all its cuts."""
    base = model.model
    h = base.embed_tokens(ids)
    L = max(e - s for s, e in spans)
    hi = torch.stack([F.pad(h[0, s:e], (0, 0, 0, L - (e - s))) for s, e in spans])
    pos = torch.stack([torch.arange(s, s + L) for s, _ in spans])
    pe_i = base.rotary_emb(hi, pos)
    inputs, convs = [], []
    for layer in base.layers[:base.config.num_hidden_layers]:
        inputs.append(hi)
        x = layer.input_layernorm(hi)
        if layer.block_type == "linear_attention":
            out, conv = _gdn(layer.linear_attn, x)
        else:
            out, _ = layer.self_attn(hidden_states=x, position_embeddings=pe_i,
                                     attention_mask=causal(L))
            conv = None
        convs.append(conv)
        hi = _mlp(layer, hi + out)
    inputs.append(hi)
    return inputs, convs


def pic_logits(model, ids, spans, junction=0, exact_below=0, kv_gap=None, isolated=None):
    """Logits [1, T, V] of ids ([1, T]) as hypic's pic mode with junction width `junction`
    computes them. spans: the segments' (start, end) token ranges in order, none overlapping
    (before the first: the prefix; after the last: the suffix). No spans: a full pass.
    exact_below (a diagnostic, not a mode of hypic): layers below it read the cached
    positions as full recompute does; the layers from it on as pic does.
    kv_gap: a dict that receives "kv_gap", the first full-attention layer's keys and values
    of the cached tokens as pic has them (the segment alone) against full recompute's,
    sum |pic - full|^2 / sum |full|^2, differentiable in both (train_tiny.py
    --pic-kv-match), "full_rows", full recompute's rows into that layer at the cached
    positions [N, d] (`check` compares them with transformers'), and "at", those positions
    [N]; nothing when no token is cached or no layer is full attention. It is where this
    model's pic loses (`--by-layer`); it costs a full pass through the layers below.
    isolated: `isolated_stream(model, ids, spans)` when the caller already has it."""
    base = model.model
    T = ids.shape[1]
    h = base.embed_tokens(ids)
    pe = base.rotary_emb(h, torch.arange(T)[None])
    # Cached positions: (row in the isolated batch, column, position in the prompt).
    rows, cols, at = [], [], []
    for i, (s, e) in enumerate(spans):
        # hypic's window is min(W, n - 1) (src/pic/junction.cpp): a segment keeps at least
        # one cached token, even a header shorter than the window.
        for t in range(s + max(0, min(junction, e - s - 1)), e):
            rows.append(i)
            cols.append(t - s)
            at.append(t)
    if spans and isolated is None:
        isolated = isolated_stream(model, ids, spans)
    rows, cols, at = torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long), \
        torch.tensor(at, dtype=torch.long)
    # full recompute's rows, kept up to the first attention layer for kv_gap
    h_full = h if kv_gap is not None and len(at) else None
    for index, layer in enumerate(base.layers[:base.config.num_hidden_layers]):
        exact = index < exact_below
        if len(at):
            hi = isolated[0][index]
        if h_full is not None and layer.block_type != "linear_attention":
            full_kv = _kv(layer.self_attn, layer.input_layernorm(h_full[0, at]))
            pic_kv = _kv(layer.self_attn, layer.input_layernorm(hi[rows, cols]))
            kv_gap["kv_gap"] = (pic_kv - full_kv).pow(2).sum() / full_kv.pow(2).sum()
            kv_gap["full_rows"], kv_gap["at"] = h_full[0, at], at
            h_full = None
        elif h_full is not None:
            x_full = layer.input_layernorm(h_full)
            h_full = _mlp(layer, h_full + _gdn(layer.linear_attn, x_full)[0])
        if len(at) and not exact:
            h = h.clone()
            h[0, at] = hi[rows, cols]  # the pic world's input at cached positions
        x = layer.input_layernorm(h)
        if layer.block_type == "linear_attention":
            override = None if exact or not len(at) else (at, isolated[1][index][rows, cols])
            out, _ = _gdn(layer.linear_attn, x, override)
        else:
            out, _ = layer.self_attn(hidden_states=x, position_embeddings=pe,
                                     attention_mask=causal(T))
        h = _mlp(layer, h + out)
    if len(at) and exact_below < base.config.num_hidden_layers:
        h = h.clone()
        h[0, at] = isolated[0][-1][rows, cols]
    return model.lm_head(base.norm(h))


def prompt(row, t, tok):
    """The token ids and the segments' spans of a dataset row, as hypic eval builds them with
    the "passages" rule (src/eval/datasets.cpp) on this project's own files."""
    import re

    texts = [p.strip("\n") for p in re.split(r"Passage \d+:\n", row["context"]) if p.strip()]
    pieces = [t["prefix"]]
    for k, x in enumerate(texts):  # a header is a segment of its own
        if t.get("header"):
            pieces.append(t["header"].format(index=k + 1))
        pieces.append(t["segment"].format(text=x))
    pieces.append(t["suffix"].format(input=row.get("input", "")))
    ids, spans = [], []
    for i, p in enumerate(pieces):
        e = tok.encode(p, add_special_tokens=False).ids
        if 0 < i < len(pieces) - 1:
            spans.append((len(ids), len(ids) + len(e)))
        ids += e
    return ids, spans


def by_layer(model_dir, data_file, name, examples, junction, templates_file=None):
    """Where pic's divergence from full recompute comes from: the mean per-token KL(full ||
    pic) over each example's reference answer (teacher-forced), with the layers below L read
    as full recompute reads them and the others as pic does, for L = 0 (pic) … all (full)."""
    import json
    from tokenizers import Tokenizer
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    templates = json.load(open(templates_file or "inputs/datasets/templates.json"))
    if name not in templates:
        raise SystemExit(f"pic_sim.py: no template '{name}' (known: {', '.join(templates)})")
    t = templates[name]
    n_layers = model.config.num_hidden_layers
    kinds = model.config.layer_types
    total = [0.0] * n_layers
    n = 0
    with torch.no_grad():
        for line in open(data_file):
            if n == examples:
                break
            n += 1
            row = json.loads(line)
            ids, spans = prompt(row, t, tok)
            start = len(ids)
            ids = torch.tensor([ids + tok.encode(" " + row["answers"][0],
                                                 add_special_tokens=False).ids])
            # the logits that predict the answer's tokens: from the suffix's last token on
            full = model(input_ids=ids).logits[0, start - 1:-1].log_softmax(-1)
            out = []
            iso = isolated_stream(model, ids, spans)  # the same for every cut
            for below in range(n_layers):
                pic = pic_logits(model, ids, spans, junction, below, isolated=iso)
                pic = pic[0, start - 1:-1].log_softmax(-1)
                kl = (full.exp() * (full - pic)).sum(-1).mean().item()
                total[below] += kl
                out.append(f"{kl:.4f}")
            print(f"{row['_id']}: {ids.shape[1] - start} answer tokens; KL per layer cut "
                  f"{' '.join(out)}", flush=True)
    print(f"\nmean per-token KL(full || pic W={junction}) over the reference answers of {n} "
          f"examples, with the layers below L exact:")
    print("| L | layers read as pic | KL |\n|---:|---|---:|")
    for below in range(n_layers):
        names = ", ".join(f"{i} ({kinds[i].split('_')[0]})" for i in range(below, n_layers))
        print(f"| {below} | {names} | {total[below] / max(n, 1):.4f} |")
    print(f"| {n_layers} | none (full recompute) | 0 |")


def check(model_dir, jsonl, runs, junction, data_file=None, templates_file=None):
    """First-token KL(full || pic) of this pass against hypic eval's per-example figure."""
    import json
    from tokenizers import Tokenizer
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    templates = json.load(open(templates_file or "inputs/datasets/templates.json"))
    rows = [json.loads(line) for line in open(jsonl)]
    name = rows[0]["_id"].rsplit("-", 1)[0]
    t = templates[name]
    data = {d["_id"]: d for d in map(json.loads,
                                     open(data_file or f"inputs/datasets/{name}.jsonl"))}
    worst = 0.0
    with torch.no_grad():
        for r in rows[:runs]:
            ids, spans = prompt(data[r["_id"]], t, tok)
            if len(ids) != r["prompt_tokens"]:  # this split is a copy of hypic's rule
                raise SystemExit(f"pic_sim.py: {r['_id']}: {len(ids)} prompt tokens here, "
                                 f"{r['prompt_tokens']} in hypic eval: the passages were "
                                 "split or tokenized differently, so the KLs cannot be compared")
            ids = torch.tensor([ids])
            # one transformers pass: its logits, and its hidden states for kv_gap's rows
            ref_pass = model(input_ids=ids, output_hidden_states=True)
            full = ref_pass.logits[0, -1].log_softmax(-1)
            hand = pic_logits(model, ids, [])[0, -1].log_softmax(-1)
            gap = {}
            pic = pic_logits(model, ids, spans, junction, kv_gap=gap)[0, -1].log_softmax(-1)
            kl = (full.exp() * (full - pic)).sum().item()
            kv_note = ""
            if gap:  # kv_gap's full-recompute rows against transformers' hidden states
                first = model.config.layer_types.index("full_attention")
                hidden = ref_pass.hidden_states[first]
                kv_note = (f"; kv_gap {gap['kv_gap'].item():.4f}, its full-recompute rows "
                           f"into layer {first} against transformers: max |Δ| "
                           f"{(gap['full_rows'] - hidden[0, gap['at']]).abs().max().item():.1e}")
            ref = r["first_token_kl"]
            worst = max(worst, abs(kl - ref) / max(ref, 1e-3))
            print(f"{r['_id']}: {ids.shape[1]} tokens (hypic {r['prompt_tokens']}), "
                  f"{len(spans)} segments; this pass without segments against transformers: "
                  f"max |Δ log p| {(full - hand).abs().max().item():.1e}; first-token "
                  f"KL(full||pic W={junction}) {kl:.4g}, hypic eval {ref:.4g}{kv_note}",
                  flush=True)
    print(f"largest relative difference of the KL: {worst:.2%}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="checks the pic pass against hypic eval's output: "
                                 "run from the repository root")
    ap.add_argument("--model", required=True)
    ap.add_argument("--eval-jsonl",
                    help="a pic mode's per-example file from hypic eval (RUN/pic/NAME.jsonl)")
    ap.add_argument("--by-layer", metavar="NAME",
                    help="instead of the check: the per-token KL over the reference answers of "
                    "--input (a NAME dataset, e.g. synthsum) with the lower layers exact")
    ap.add_argument("--junction", type=int, required=True, help="the --junction of that run")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--input", help="the dataset file that run read (its --input; default "
                    "inputs/datasets/NAME.jsonl)")
    ap.add_argument("--templates", help="that run's --templates (default "
                    "inputs/datasets/templates.json)")
    a = ap.parse_args()
    if a.by_layer:
        if not a.input:
            raise SystemExit("pic_sim.py: --by-layer reads the dataset named by --input")
        by_layer(a.model, a.input, a.by_layer, a.examples, a.junction, a.templates)
    elif a.eval_jsonl:
        check(a.model, a.eval_jsonl, a.examples, a.junction, a.input, a.templates)
    else:
        raise SystemExit("pic_sim.py: give --eval-jsonl (the check) or --by-layer NAME")
