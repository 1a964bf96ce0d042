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
of the softmax.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


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

    def ln(x, pre):
        return F.layer_norm(x, (C,), P[pre + ".weight"], P[pre + ".bias"], eps=1e-5)

    def lin(x, pre):
        return x @ P[pre + ".weight"].t() + P[pre + ".bias"]

    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T]
    for l in range(L):
        h = f"h.{l}."
        qkv = lin(ln(x, h + "ln_1"), h + "attn.c_attn")
        q, k, v = qkv.split(C, dim=2)
        q, k, v = [t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, h + "attn.c_proj")
        m = F.gelu(lin(ln(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh")
        x = x + lin(m, h + "mlp.c_proj")
    x = ln(x, "ln_f")
    logits = x @ P["wte.weight"].t()  # (B, T, Vp), tied head
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
