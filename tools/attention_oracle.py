#!/usr/bin/python3
"""PyTorch oracle for braid's fused attention (tests/kernels/test_flash_attention.cpp).

Usage: /usr/bin/python3 tools/attention_oracle.py DIR B T C NH

Reads from DIR (float32, little-endian, raw):
  qkv.bin   (B, T, 3C) packed [q | k | v], heads of C / NH features inside each
  dout.bin  (B, T, C)  gradient of the output
Writes to DIR (float32):
  ref_out.bin   (B, T, C)  causal softmax(q k^T / sqrt(hs)) v, heads concatenated
  ref_dqkv.bin  (B, T, 3C) gradient of sum(out * dout) in qkv

Computed in float64 with the explicit softmax(QK^T)V (no fused kernel), so every
difference from braid is braid's fp32 rounding.
"""
import sys

import numpy as np
import torch


def main():
    d, B, T, C, NH = sys.argv[1], *map(int, sys.argv[2:6])
    hs = C // NH
    qkv = np.fromfile(f"{d}/qkv.bin", dtype=np.float32).reshape(B, T, 3 * C)
    dout = np.fromfile(f"{d}/dout.bin", dtype=np.float32).reshape(B, T, C)
    x = torch.tensor(qkv, dtype=torch.float64, requires_grad=True)
    q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in x.split(C, dim=2))
    s = q @ k.transpose(-2, -1) / (hs ** 0.5)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    out = (p @ v).transpose(1, 2).reshape(B, T, C)
    (out * torch.tensor(dout, dtype=torch.float64)).sum().backward()
    out.detach().numpy().astype(np.float32).tofile(f"{d}/ref_out.bin")
    x.grad.numpy().astype(np.float32).tofile(f"{d}/ref_dqkv.bin")


if __name__ == "__main__":
    main()
