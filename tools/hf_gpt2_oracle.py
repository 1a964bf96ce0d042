#!/usr/bin/python3
"""Independent check of `braid export --format hf`: loads the exported
directory with its own safetensors reader, builds GPT-2 as Hugging Face's
GPT2LMHeadModel computes it (Conv1D layers y = x W + b with W stored (in, out),
pre-LayerNorm blocks, tanh GELU ("gelu_new"), causal softmax attention scaled by
1/sqrt(head size), learned positions, the head tied to wte over the unpadded
vocabulary) in PyTorch, and scores a token file the way `braid eval` does:
consecutive non-overlapping windows of T tokens from the file's start, window w
predicting tokens[wT+1 .. wT+T] from tokens[wT .. wT+T-1].

Usage: /usr/bin/python3 tools/hf_gpt2_oracle.py DIR TOKENS --seq-len T [--max-windows N]
Prints one JSON object: {"loss", "windows", "tokens", "params"}.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import token_file  # noqa: E402

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}


def read_safetensors(path):
    """name -> float64 tensor; checks the header against the file as the format requires."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out, spans = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        spans.append((b, end))
        buf = data[b:end]
        if e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            a = np.frombuffer(buf, dtype=np.dtype(DTYPES[e["dtype"]]).newbyteorder("<"))
        assert a.size == math.prod(e["shape"]), name
        out[name] = torch.from_numpy(a.astype(np.float64).reshape(e["shape"]))
    spans.sort()
    at = 0
    for b, end in spans:
        assert b == at, f"gap or overlap at byte {b}"
        at = end
    assert at == len(data), "bytes after the last tensor"
    return out


def gpt2_loss(P, cfg, x, y):
    """Mean cross-entropy of GPT2LMHeadModel on x -> y, both (B, T) int64."""
    B, T = x.shape
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    p = lambda k: P["transformer." + k] if "transformer." + k in P else P[k]

    def ln(h, k):
        return F.layer_norm(h, (C,), p(k + ".weight"), p(k + ".bias"), eps=eps)

    def conv1d(h, k):
        return h @ p(k + ".weight") + p(k + ".bias")

    h = p("wte.weight")[x] + p("wpe.weight")[torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        a = ln(h, f"h.{i}.ln_1")
        q, k, v = conv1d(a, f"h.{i}.attn.c_attn").split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        h = h + conv1d(o, f"h.{i}.attn.c_proj")
        m = conv1d(ln(h, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc")
        m = F.gelu(m, approximate="tanh")
        h = h + conv1d(m, f"h.{i}.mlp.c_proj")
    logits = ln(h, "ln_f") @ p("wte.weight").t()
    return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(B * T))


def arguments():
    """DIR TOKENS --seq-len T [--max-windows N], as both oracles take them."""
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("tokens")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--max-windows", type=int, default=0)
    return ap.parse_args()


def score_windows(loss, P, cfg, a):
    """braid eval's score of the token file a.tokens: the mean of loss(P, cfg,
    x, y) over consecutive windows of a.seq_len tokens, 8 at a time; prints
    {"loss", "windows", "tokens", "params"} as JSON."""
    _, _, ids = token_file.read(a.tokens)
    T = a.seq_len
    W = (len(ids) - 1) // T
    if a.max_windows > 0:
        W = min(W, a.max_windows)
    t = torch.tensor(ids[:W * T + 1], dtype=torch.int64)
    x = t[:W * T].view(W, T)
    y = t[1:W * T + 1].view(W, T)
    with torch.no_grad():
        total = sum(loss(P, cfg, x[i:i + 8], y[i:i + 8]).item() * len(x[i:i + 8]) for i in range(0, W, 8)) / W
    n = sum(v.numel() for v in P.values())
    print(json.dumps({"loss": total, "windows": W, "tokens": W * T, "params": n}))


def main():
    a = arguments()
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new", cfg
    P = read_safetensors(os.path.join(a.dir, "model.safetensors"))
    assert P[("transformer." if "transformer.wte.weight" in P else "") + "wte.weight"].shape[0] == cfg["vocab_size"]
    score_windows(gpt2_loss, P, cfg, a)


if __name__ == "__main__":
    main()
