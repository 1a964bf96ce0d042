#!/usr/bin/python3
"""PyTorch oracle for braid's GPT-2 (tests/kernels/test_model_reference.cpp).

Usage: /usr/bin/python3 tools/make_reference.py DIR

Reads from DIR (written by the C++ test):
  input.json   config {vocab_size, padded_vocab_size, block_size, n_layer, n_head,
               n_embd}, B, T, adamw {lr, beta1, beta2, eps, weight_decay},
               params: [{name, shape, offset, numel, weight_decay}], num_params,
               dtype ("float64" default: the oracle is then exact to fp32 rounding)
  params.bin   float32[num_params], braid's flat layout (nn.Linear (out, in) matrices)
  tokens.bin, targets.bin   int32[B*T]
Writes to DIR (all float32, little-endian, raw):
  ref_logits.bin  (B, T, Vp) logits, padded columns included
  ref_loss.bin    (1) mean cross-entropy over B*T (vocabulary [0, V) only)
  ref_grads.bin   (num_params) d loss / d params in the flat layout (gaps 0)
  ref_adamw.bin   (num_params) params after one torch.optim.AdamW step using
                  those gradients, with weight decay only where the table says so

The model is an independent minimal GPT-2: pre-LN blocks, learned positions,
tanh GELU, causal softmax attention, LM head tied to wte, padded vocab masked out
of the softmax; or, when input.json names Llama's parts (norm "rmsnorm",
positions "rope" with rope_theta and rope_scaling, mlp "swiglu", n_kv_head,
norm_eps), transformers' Llama block written out: RMSNorm, rotate_half rotary
positions, grouped-query attention by repeating key/value heads, SiLU-gated
MLP from the packed [gate | up] c_fc, and lm_head.weight when untied.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def rope_angles(cfg, hs, T, dtype):
    """cos, sin (T, hs) of transformers' rotary embedding with Llama 3 scaling."""
    theta = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    sc = cfg.get("rope_scaling", {"factor": 1.0})
    if sc["factor"] != 1.0:
        lo, hi, orig = sc["low_freq_factor"], sc["high_freq_factor"], sc["original_context"]
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > orig / lo, inv / sc["factor"], inv)
        mid = (1 - smooth) * scaled / sc["factor"] + smooth * scaled
        medium = (wavelen >= orig / hi) & (wavelen <= orig / lo)
        inv = torch.where(medium, mid, scaled)
    angles = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([angles, angles], dim=-1).to(torch.float64)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate(x, cos, sin):
    """transformers' apply_rotary_pos_emb: x (B, heads, T, hs)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def main(d):
    with open(os.path.join(d, "input.json")) as f:
        cfg = json.load(f)
    dtype = getattr(torch, cfg.get("dtype", "float64"))
    B, T = cfg["B"], cfg["T"]
    V, Vp = cfg["vocab_size"], cfg["padded_vocab_size"]
    L, NH, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype=np.float32)
    assert flat.size == cfg["num_params"], (flat.size, cfg["num_params"])
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32)
                              .astype(np.int64).reshape(B, T))
    targets = torch.from_numpy(np.fromfile(os.path.join(d, "targets.bin"), dtype=np.int32)
                               .astype(np.int64).reshape(B, T))

    P = {}
    for p in cfg["params"]:
        a = flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"])
        P[p["name"]] = torch.tensor(a, dtype=dtype, requires_grad=True)

    # The block's parts (GPT-2's when the config does not name them).
    norm = cfg.get("norm", "layernorm")
    positions = cfg.get("positions", "learned")
    mlp = cfg.get("mlp", "gelu")
    NKV = cfg.get("n_kv_head", NH)
    eps = cfg.get("norm_eps", 1e-5)

    def ln(x, pre):
        if norm == "rmsnorm":  # transformers' LlamaRMSNorm
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * P[pre + ".weight"]
        return F.layer_norm(x, (C,), P[pre + ".weight"], P[pre + ".bias"], eps=eps)

    def lin(x, pre):
        y = x @ P[pre + ".weight"].t()
        return y + P[pre + ".bias"] if pre + ".bias" in P else y

    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = P["wte.weight"][tokens]
    if positions == "learned":
        x = x + P["wpe.weight"][:T]
    else:
        cos, sin = rope_angles(cfg, hs, T, dtype)
    for l in range(L):
        h = f"h.{l}."
        qkv = lin(ln(x, h + "ln_1"), h + "attn.c_attn")
        q, k, v = qkv.split([C, NKV * hs, NKV * hs], dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k, v = [t.view(B, T, NKV, hs).transpose(1, 2) for t in (k, v)]
        if positions == "rope":
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # Grouped-query attention: each key/value head serves NH / NKV query heads.
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, h + "attn.c_proj")
        u = lin(ln(x, h + "ln_2"), h + "mlp.c_fc")
        if mlp == "swiglu":
            gate, up = u.chunk(2, dim=-1)
            m = F.silu(gate) * up
        else:
            m = F.gelu(u, approximate="tanh")
        x = x + lin(m, h + "mlp.c_proj")
    x = ln(x, "ln_f")
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["wte.weight"]
    logits = x @ head.t()  # (B, T, Vp)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    loss.backward()

    n = cfg["num_params"]
    grads = np.zeros(n, dtype=np.float32)
    for p in cfg["params"]:
        grads[p["offset"]:p["offset"] + p["numel"]] = \
            P[p["name"]].grad.detach().to(torch.float32).numpy().reshape(-1)

    ad = cfg["adamw"]
    decay = [P[p["name"]] for p in cfg["params"] if p["weight_decay"]]
    no_decay = [P[p["name"]] for p in cfg["params"] if not p["weight_decay"]]
    # Step from the fp32-rounded gradients the C++ side will read back.
    for p in cfg["params"]:
        t = P[p["name"]]
        t.grad = torch.from_numpy(grads[p["offset"]:p["offset"] + p["numel"]]
                                  .reshape(p["shape"]).copy()).to(dtype)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": ad["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=ad["lr"], betas=(ad["beta1"], ad["beta2"]), eps=ad["eps"])
    opt.step()
    after = np.zeros(n, dtype=np.float32)
    for p in cfg["params"]:
        after[p["offset"]:p["offset"] + p["numel"]] = \
            P[p["name"]].detach().to(torch.float32).numpy().reshape(-1)

    logits.detach().to(torch.float32).numpy().tofile(os.path.join(d, "ref_logits.bin"))
    np.array([loss.item()], dtype=np.float32).tofile(os.path.join(d, "ref_loss.bin"))
    grads.tofile(os.path.join(d, "ref_grads.bin"))
    after.tofile(os.path.join(d, "ref_adamw.bin"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_reference.py DIR")
    main(sys.argv[1])
