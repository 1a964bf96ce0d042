"""Peer benchmark: one GPT-2 training step (forward, backward, AdamW) in PyTorch,
fp32 on the CPU, with the same model, batch and thread count as `braid bench-step`.

Run with the system interpreter that has Debian's python3-torch:
    /usr/bin/python3 bench/torch_step.py --model gpt2 --batch 4 --seq-len 64 --threads 2
Prints one JSON object (tokens/s, step ms) on the last line.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {  # n_layer, n_head, n_embd, block_size (as braid's GPTConfig::preset)
    "tiny": (2, 4, 64, 64),
    "small": (4, 4, 256, 256),
    "gpt2": (12, 12, 768, 1024),
}


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, block, vocab=50304):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(block, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)))

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    L, H, C, block = CONFIGS[a.model]
    model = GPT(L, H, C, block)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    x = torch.randint(0, 50257, (a.batch, a.seq_len))
    y = torch.randint(0, 50257, (a.batch, a.seq_len))
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    med = statistics.median(times)
    tps = a.batch * a.seq_len / med
    print(f"torch {torch.__version__} | model {a.model} | B={a.batch} T={a.seq_len} | threads {a.threads}")
    print(f"step: median {med * 1e3:.1f} ms over {a.steps} steps | {tps:.1f} tokens/s")
    print(json.dumps({"impl": "pytorch", "version": torch.__version__, "model": a.model, "B": a.batch,
                      "T": a.seq_len, "threads": a.threads, "step_ms": med * 1e3, "tokens_per_sec": tps}))


if __name__ == "__main__":
    main()
