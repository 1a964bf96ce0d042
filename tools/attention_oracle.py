#!/usr/bin/python3
"""PyTorch oracle for braid's fused attention (tests/kernels/test_flash_attention.cpp).

Usage: /usr/bin/python3 tools/attention_oracle.py DIR B T C NH [NKV]

Reads from DIR (float32, little-endian, raw):
  qkv.bin   (B, T, C + 2 NKV hs) packed [q | k | v], heads of hs = C / NH
            features inside each; NKV key/value heads (default NH), query head
            h reading key/value head h // (NH / NKV) (grouped-query attention,
            as transformers' repeat_kv)
  dout.bin  (B, T, C)  gradient of the output
Writes to DIR (float32):
  ref_out.bin   (B, T, C)  causal softmax(q k^T / sqrt(hs)) v, heads concatenated
  ref_dqkv.bin  (B, T, C + 2 NKV hs) gradient of sum(out * dout) in qkv

Computed in float64 with the explicit softmax(QK^T)V (no fused kernel), so every
difference from braid is braid's fp32 rounding.
"""
import sys

import numpy as np
import torch


def main():
    d, B, T, C, NH = sys.argv[1], *map(int, sys.argv[2:6])
    NKV = int(sys.argv[6]) if len(sys.argv) > 6 else NH
    hs = C // NH
    qkv = np.fromfile(f"{d}/qkv.bin", dtype=np.float32).reshape(B, T, C + 2 * NKV * hs)
    dout = np.fromfile(f"{d}/dout.bin", dtype=np.float32).reshape(B, T, C)
    x = torch.tensor(qkv, dtype=torch.float64, requires_grad=True)
    q, k, v = x.split([C, NKV * hs, NKV * hs], dim=2)
    q = q.reshape(B, T, NH, hs).transpose(1, 2)
    k, v = (t.reshape(B, T, NKV, hs).transpose(1, 2).repeat_interleave(NH // NKV, dim=1) for t in (k, v))
    s = q @ k.transpose(-2, -1) / (hs ** 0.5)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    out = (p @ v).transpose(1, 2).reshape(B, T, C)
    (out * torch.tensor(dout, dtype=torch.float64)).sum().backward()
    out.detach().numpy().astype(np.float32).tofile(f"{d}/ref_out.bin")
    x.grad.numpy().astype(np.float32).tofile(f"{d}/ref_dqkv.bin")


if __name__ == "__main__":
    main()
