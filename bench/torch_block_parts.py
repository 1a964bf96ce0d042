#!/usr/bin/python3
"""Peer for `braid bench-block-parts`: PyTorch's eager compositions of the
Llama-family block's parts (Debian's python3-torch 1.13.1 has no RMSNorm module
and no fused rotary or SwiGLU kernel; these are transformers' LlamaRMSNorm,
apply_rotary_pos_emb with rotate_half, and LlamaMLP's silu(gate) * up), forward +
backward by autograd on random inputs of one shape, fp32. Prints one JSON object
a part, like braid's: median forward and backward milliseconds.

Usage: /usr/bin/python3 bench/torch_block_parts.py [--batch B] [--seq-len T]
       [--width C] [--hidden H] [--heads NH] [--kv-heads NKV] [--reps N] [--threads N]
"""
import argparse
import json
import statistics
import time

import torch


def timed(reps, forward, grads, warmup=3):
    """Median ms of forward() and of the backward of its output by `grads`,
    after `warmup` untimed passes (autograd's buffers settle over the first few)."""
    fwd, bwd = [], []
    for r in range(reps + warmup):
        t0 = time.perf_counter()
        outs = forward()
        t1 = time.perf_counter()
        torch.autograd.backward(outs, grads)
        t2 = time.perf_counter()
        if r >= warmup:
            fwd.append((t1 - t0) * 1e3), bwd.append((t2 - t1) * 1e3)
    return statistics.median(fwd), statistics.median(bwd)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("batch", 8), ("seq-len", 128), ("width", 256), ("hidden", 688), ("heads", 4),
                          ("kv-heads", 2), ("reps", 9), ("threads", 2)]:
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    B, T, C, H, NH, NKV = a.batch, a.seq_len, a.width, a.hidden, a.heads, a.kv_heads
    hs = C // NH
    g = torch.Generator().manual_seed(11)
    rnd = lambda *shape: torch.randn(*shape, generator=g)

    x, w, dy = rnd(B, T, C).requires_grad_(), rnd(C).requires_grad_(), rnd(B, T, C)
    rms = timed(a.reps, lambda: w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)), dy)

    q, k = rnd(B, NH, T, hs).requires_grad_(), rnd(B, NKV, T, hs).requires_grad_()
    dq, dk = rnd(B, NH, T, hs), rnd(B, NKV, T, hs)
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    freqs = torch.arange(T).float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    rope = timed(a.reps, lambda: (q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin), (dq, dk))

    gu, dglu = rnd(B, T, 2 * H).requires_grad_(), rnd(B, T, H)
    glu = timed(a.reps, lambda: torch.nn.functional.silu(gu[..., :H]) * gu[..., H:], dglu)

    for part, (f, b) in [("rmsnorm", rms), ("rope", rope), ("swiglu", glu)]:
        print(json.dumps({"part": part, "peer": "torch", "B": B, "T": T, "C": C, "hidden": H, "heads": NH,
                          "kv_heads": NKV, "threads": a.threads, "forward_ms": f, "backward_ms": b}))


if __name__ == "__main__":
    main()
