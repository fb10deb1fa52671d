"""The forward pass of a Qwen3.5 model (transformers' Qwen3_5ForCausalLM) as hypic's pic mode
with junction width 0 computes it, differentiable, for training (train_tiny.py --pic-share).

A prompt is a prefix, segments (passages) and a suffix (question or summary request and the
answer tokens). pic caches every segment computed on its own and, at query time
(../shared/design/MATH.md §3-5, docs/eval.md):
- linear (Gated DeltaNet) layers: each segment's tokens keep the outputs of their isolated
  computation (zero state, zero conv history); the state that reaches the suffix is the
  composition T·S_in + S(·|0) over the segments, which equals the recurrence run straight
  through the segments' isolated inputs, with the conv history cut at each segment start
  (the cached T and S(·|0) were computed that way); the suffix's conv reads the last
  segment's tail;
- full-attention layers: a segment's keys and values are those of its isolated computation
  at its true positions (re-rotation is exact), so a segment token attends to its own
  segment only; prefix and suffix tokens attend to everything before them;
- the prefix is computed in full (it is first), the suffix in full over the spliced caches.

Training on a share of rows computed this way (block-attention fine-tuning, for a hybrid)
teaches the model to read passages whose later-layer rows were computed without context,
which is what pic gives it. `check` compares this pass with hypic's own pic W = 0 figures.
"""

import torch
import torch.nn.functional as F


def _conv_silu(mixed, weight, seg):
    """Depthwise causal conv (kernel K) + SiLU with the history cut where seg changes.
    mixed: [1, T, C]; weight: [C, K]; seg: [T] segment id of each token."""
    T = mixed.shape[1]
    K = weight.shape[1]
    out = mixed * weight[:, K - 1]
    for s in range(1, K):
        if s >= T:
            break
        same = torch.zeros(T, dtype=mixed.dtype)
        same[s:] = (seg[s:] == seg[:-s]).to(mixed.dtype)
        shifted = F.pad(mixed, (0, 0, s, 0))[:, :T]
        out = out + shifted * weight[:, K - 1 - s] * same[None, :, None]
    return F.silu(out)


def _gdn(attn, x, seg, spans, delta_rule):
    """One Gated DeltaNet layer of the pic pass. x: [1, T, d] (already input-normed);
    spans: (start, end) of each segment; seg: [T] conv segment ids."""
    _, T, _ = x.shape
    mixed = _conv_silu(attn.in_proj_qkv(x), attn.conv1d.weight.squeeze(1), seg)
    z = attn.in_proj_z(x).reshape(1, T, -1, attn.head_v_dim)
    beta = attn.in_proj_b(x).sigmoid()
    g = -attn.A_log.float().exp() * F.softplus(attn.in_proj_a(x).float() + attn.dt_bias)
    q, k, v = torch.split(mixed, [attn.key_dim, attn.key_dim, attn.value_dim], dim=-1)
    q = q.reshape(1, T, -1, attn.head_k_dim)
    k = k.reshape(1, T, -1, attn.head_k_dim)
    v = v.reshape(1, T, -1, attn.head_v_dim)
    # Straight through: the prefix's and the suffix's outputs, and the composed state.
    core, _ = delta_rule(q, k, v, g=g, beta=beta, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=True)
    if not spans:
        core = attn.norm(core.reshape(-1, attn.head_v_dim), z.reshape(-1, attn.head_v_dim))
        return attn.out_proj(core.reshape(1, T, -1))
    # Each segment from zero: one right-padded batch (padding comes after, so it changes
    # no real token's output).
    L = max(e - s for s, e in spans)

    def batch(t):
        rows = [F.pad(t[0, s:e], (0, 0) * (t.dim() - 2) + (0, L - (e - s))) for s, e in spans]
        return torch.stack(rows)

    iso, _ = delta_rule(batch(q), batch(k), batch(v), g=batch(g), beta=batch(beta),
                        initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=True)
    parts, at = [], 0
    for i, (s, e) in enumerate(spans):
        parts += [core[:, at:s], iso[i:i + 1, :e - s]]
        at = e
    parts.append(core[:, at:])
    core = torch.cat(parts, dim=1)
    core = attn.norm(core.reshape(-1, attn.head_v_dim), z.reshape(-1, attn.head_v_dim))
    return attn.out_proj(core.reshape(1, T, -1))


def segment_layout(T, spans):
    """Conv segment ids and the attention mask ([1, 1, T, T], True = may attend)."""
    seg = torch.zeros(T, dtype=torch.long)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i, (s, e) in enumerate(spans):
        seg[s:e] = i + 1
        mask[s:e, :s] = False
    if spans:
        seg[spans[-1][1]:] = len(spans)  # the suffix's conv reads the last segment's tail
    return seg, mask[None, None]


def pic_logits(model, ids, spans):
    """Logits [1, T, V] of ids ([1, T]) under pic with W = 0; spans: the segments' (start,
    end) token ranges, in order, none overlapping (before the first: the prefix; after the
    last: the suffix)."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    base = model.model
    T = ids.shape[1]
    seg, mask = segment_layout(T, spans)
    h = base.embed_tokens(ids)
    pos = torch.arange(T)[None]
    pe = base.rotary_emb(h, pos)
    for layer in base.layers[:base.config.num_hidden_layers]:
        x = layer.input_layernorm(h)
        if layer.block_type == "linear_attention":
            out = _gdn(layer.linear_attn, x, seg, spans, mq.torch_chunk_gated_delta_rule)
        else:
            out, _ = layer.self_attn(hidden_states=x, position_embeddings=pe, attention_mask=mask)
        h = h + out
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(base.norm(h))


def full_logits_by_hand(model, ids):
    """The same pass with no segments: must equal model(ids).logits (the check of the
    hand-written layer loop itself)."""
    return pic_logits(model, ids, [])


def check(model_dir, jsonl, runs):
    """First-token KL(full || pic W=0) of this pass against hypic eval's per-example figure."""
    import json
    import re
    from tokenizers import Tokenizer
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tpl = json.load(open("inputs/datasets/templates.json"))
    rows = [json.loads(line) for line in open(jsonl)]
    name = rows[0]["_id"].rsplit("-", 1)[0]
    data = {d["_id"]: d for d in map(json.loads, open(f"inputs/datasets/{name}.jsonl"))}
    rows = [dict(data[r["_id"]], first_token_kl=r.get("first_token_kl"),
                 prompt_tokens=r.get("prompt_tokens")) for r in rows]
    with torch.no_grad():
        for row in rows[:runs]:
            t = tpl[name]
            texts = [p.strip("\n") for p in re.split(r"Passage \d+:\n", row["context"]) if p.strip()]
            pieces = ([t["prefix"]] + [t["segment"].format(text=x) for x in texts]
                      + [t["suffix"].format(input=row.get("input", ""))])
            enc = [tok.encode(p, add_special_tokens=False).ids for p in pieces]
            ids, spans = [], []
            for i, e in enumerate(enc):
                if 0 < i < len(enc) - 1:
                    spans.append((len(ids), len(ids) + len(e)))
                ids += e
            ids = torch.tensor([ids])
            full = model(input_ids=ids).logits[0, -1].log_softmax(-1)
            hand = full_logits_by_hand(model, ids)[0, -1].log_softmax(-1)
            pic = pic_logits(model, ids, spans)[0, -1].log_softmax(-1)
            kl = (full.exp() * (full - pic)).sum().item()
            print(f"{row['_id']}: {ids.shape[1]} tokens (hypic {row['prompt_tokens']}), {len(spans)} segments; hand-written "
                  f"full pass max |diff| {(full - hand).abs().max().item():.2e}; first-token "
                  f"KL(full||pic W=0) {kl:.4g}; hypic eval: {row.get('first_token_kl')}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="check the pic pass against hypic eval output")
    ap.add_argument("--model", required=True)
    ap.add_argument("--eval-jsonl", required=True,
                    help="a pic W=0 mode's per-example file from hypic eval (RUN/pic/NAME.jsonl)")
    ap.add_argument("--examples", type=int, default=3)
    a = ap.parse_args()
    check(a.model, a.eval_jsonl, a.examples)
