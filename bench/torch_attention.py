#!/usr/bin/python3
"""Peer for `braid bench-attention`: PyTorch's explicit causal attention,
softmax(Q K^T / sqrt(hs) + mask) V (Debian's python3-torch 1.13.1 has no fused
attention), forward + backward on random q, k, v of one shape. Prints one JSON
object like braid's: median forward and backward milliseconds and the process's
peak resident memory.

With --kv-heads K < H (grouped-query attention) each key/value head is
repeated for its group of query heads first (transformers' repeat_kv), inside
the timed forward, so its backward sums their gradients.

Usage: /usr/bin/python3 bench/torch_attention.py --seq-len T [--batch B]
       [--heads H] [--kv-heads K] [--head-dim D] [--dtype f32|bf16] [--reps N] [--threads N]
"""
import argparse
import json
import resource
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dt = torch.float32 if a.dtype == "f32" else torch.bfloat16
    B, H, T, D = a.batch, a.heads, a.seq_len, a.head_dim
    K = a.kv_heads or H
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, H, T, D, generator=g).to(dt).requires_grad_()
    k, v = (torch.randn(B, K, T, D, generator=g).to(dt).requires_grad_() for _ in range(2))
    dout = torch.randn(B, H, T, D, generator=g).to(dt)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)

    def forward():
        kk, vv = (k, v) if K == H else (t.repeat_interleave(H // K, dim=1) for t in (k, v))
        s = (q @ kk.transpose(-2, -1)) / (D ** 0.5)
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ vv

    fwd, bwd = [], []
    for r in range(a.reps + 1):  # the first is warm-up
        t0 = time.perf_counter()
        y = forward()
        t1 = time.perf_counter()
        y.backward(dout)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        del y
        if r:
            fwd.append((t1 - t0) * 1e3), bwd.append((t2 - t1) * 1e3)
    print(json.dumps({"kernel": "torch", "dtype": a.dtype, "B": B, "heads": H, "kv_heads": K, "head_dim": D, "T": T,
                      "threads": a.threads, "forward_ms": statistics.median(fwd),
                      "backward_ms": statistics.median(bwd),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
