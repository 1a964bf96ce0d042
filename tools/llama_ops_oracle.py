#!/usr/bin/python3
"""PyTorch oracle for braid's Llama-family kernels (tests/kernels/test_llama_kernels.cpp).

Usage: /usr/bin/python3 tools/llama_ops_oracle.py DIR N C H B T NH HS THETA FACTOR LOW HIGH ORIG

Reads from DIR (float32, little-endian, raw):
  norm_x.bin (N, C), norm_w.bin (C), norm_dy.bin (N, C)        RMSNorm
  glu_x.bin (N, 2H) [gate | up], glu_dy.bin (N, H)             SwiGLU
  rope_x.bin (B, T, NH*HS), rope_dy.bin (B, T, NH*HS)           RoPE at positions
  rope_pos.bin (T) int64                                        (one per t)
  rope_inv.bin (HS/2)  braid's inverse frequencies, which turn rope_x here, so
                       the rotation is checked apart from the frequencies
Writes to DIR (float32): norm_y, norm_dx, norm_dw, glu_y, glu_dx, rope_y, rope_dx,
rope_inv_freq (HS/2).

Everything is float64 and written with PyTorch 1.13's own operations, following
transformers' LlamaRMSNorm, LlamaMLP (silu(gate) * up), rotate_half /
apply_rotary_pos_emb and _compute_llama3_parameters; the inverse frequencies
are formed in float32 as transformers forms them, then widened.
"""
import math
import sys

import numpy as np
import torch

D = torch.float64


def load(d, name, shape):
    return torch.tensor(np.fromfile(f"{d}/{name}.bin", dtype=np.float32).reshape(shape), dtype=D,
                        requires_grad=True)


def save(d, name, t):
    t.detach().numpy().astype(np.float32).tofile(f"{d}/{name}.bin")


def inv_freq_llama3(hs, theta, factor, low, high, orig):
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    if factor == 1.0:
        return inv
    low_wavelen, high_wavelen = orig / low, orig / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def main():
    d = sys.argv[1]
    N, C, H, B, T, NH, HS = map(int, sys.argv[2:9])
    theta, factor, low, high = map(float, sys.argv[9:13])
    orig = int(sys.argv[13])

    x, w, dy = load(d, "norm_x", (N, C)), load(d, "norm_w", (C,)), load(d, "norm_dy", (N, C))
    y = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    (y * dy).sum().backward()
    save(d, "norm_y", y), save(d, "norm_dx", x.grad), save(d, "norm_dw", w.grad)

    g, gdy = load(d, "glu_x", (N, 2 * H)), load(d, "glu_dy", (N, H))
    gate, up = g[:, :H], g[:, H:]
    gy = torch.nn.functional.silu(gate) * up
    (gy * gdy).sum().backward()
    save(d, "glu_y", gy), save(d, "glu_dx", g.grad)

    r, rdy = load(d, "rope_x", (B, T, NH, HS)), load(d, "rope_dy", (B, T, NH, HS))
    pos = torch.tensor(np.fromfile(f"{d}/rope_pos.bin", dtype=np.int64))
    inv = inv_freq_llama3(HS, theta, factor, low, high, orig)
    braid_inv = torch.tensor(np.fromfile(f"{d}/rope_inv.bin", dtype=np.float32))
    freqs = (braid_inv[None, :] * pos[:, None].float())  # (T, HS/2), fp32 as transformers
    emb = torch.cat((freqs, freqs), dim=-1).to(D)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    ry = r * cos + rotate_half(r) * sin
    (ry * rdy).sum().backward()
    save(d, "rope_y", ry), save(d, "rope_dx", r.grad), save(d, "rope_inv_freq", inv)


if __name__ == "__main__":
    main()
