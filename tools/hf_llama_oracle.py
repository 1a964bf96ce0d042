#!/usr/bin/python3
"""Independent check of `braid export --format hf` for Llama-family models:
builds LlamaForCausalLM from the exported directory alone -- config.json and
the safetensors (one file, or the shards model.safetensors.index.json maps),
read by this script's own reader -- as transformers computes it (RMSNorm with
eps rms_norm_eps, rotary positions rotating halves with theta rope_theta and
Llama 3's rope_scaling, grouped-query attention repeating each key/value head
for its query heads, SiLU-gated MLP, optional biases, the head lm_head or the
tied embedding), in float64 PyTorch, and scores a token file the way `braid
eval` does: consecutive non-overlapping windows of T tokens from the file's
start, window w predicting tokens[wT+1 .. wT+T] from tokens[wT .. wT+T-1].

Usage: /usr/bin/python3 tools/hf_llama_oracle.py DIR TOKENS --seq-len T [--max-windows N]
Prints one JSON object: {"loss", "windows", "tokens", "params"}.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gpt2_oracle import arguments, read_safetensors, score_windows  # noqa: E402  (its own reader, not braid's)


def read_tensors(d):
    """name -> float64 tensor from model.safetensors or the index's shards."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    weight_map = json.load(open(index))["weight_map"]
    out = {}
    for f in sorted(set(weight_map.values())):
        out.update(read_safetensors(os.path.join(d, f)))
    assert set(out) >= set(weight_map), "a shard lacks a tensor of the index"
    return out


def inverse_frequencies(cfg, hs):
    """transformers' default rotary frequencies, then rope_type llama3's scaling."""
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    sc = cfg.get("rope_scaling")
    if sc:
        assert sc.get("rope_type", sc.get("type")) == "llama3", sc
        f, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        orig = sc["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        llama = torch.where(wavelen > orig / lo, inv / f, inv)
        smooth = (orig / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * llama / f + smooth * llama
        medium = ~(wavelen < orig / hi) & ~(wavelen > orig / lo)
        inv = torch.where(medium, smoothed, llama)
    return inv


def llama_loss(P, cfg, x, y):
    """Mean cross-entropy of LlamaForCausalLM on x -> y, both (B, T) int64."""
    B, T = x.shape
    C, NH, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    NKV = cfg.get("num_key_value_heads") or NH
    hs = cfg.get("head_dim") or C // NH
    eps = cfg["rms_norm_eps"]

    def rms(h, k):
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * P[k]

    def lin(h, k):
        y = h @ P[k + ".weight"].t()
        return y + P[k + ".bias"] if k + ".bias" in P else y

    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inverse_frequencies(cfg, hs)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1).to(torch.float64)
    cos, sin = emb.cos(), emb.sin()

    def rope(t):
        half = t.shape[-1] // 2
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin

    h = P["model.embed_tokens.weight"][x]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        pre = f"model.layers.{i}."
        a = rms(h, pre + "input_layernorm.weight")
        q = lin(a, pre + "self_attn.q_proj").view(B, T, NH, hs).transpose(1, 2)
        k = lin(a, pre + "self_attn.k_proj").view(B, T, NKV, hs).transpose(1, 2)
        v = lin(a, pre + "self_attn.v_proj").view(B, T, NKV, hs).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        h = h + lin((att @ v).transpose(1, 2).reshape(B, T, NH * hs), pre + "self_attn.o_proj")
        m = rms(h, pre + "post_attention_layernorm.weight")
        h = h + lin(F.silu(lin(m, pre + "mlp.gate_proj")) * lin(m, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    head = P["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else P["lm_head.weight"]
    logits = rms(h, "model.norm.weight") @ head.t()
    return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(B * T))


def main():
    a = arguments()
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"], cfg
    assert cfg.get("hidden_act", "silu") == "silu", cfg
    P = read_tensors(a.dir)
    assert P["model.embed_tokens.weight"].shape[0] == cfg["vocab_size"]
    score_windows(llama_loss, P, cfg, a)


if __name__ == "__main__":
    main()
