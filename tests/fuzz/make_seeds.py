"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<harness>/): small valid
files of each format and version, and a few texts. Run from the repository
root: /usr/bin/python3 tests/fuzz/make_seeds.py"""
import json, os, struct, sys, zlib

sys.path.insert(0, "tools")
import token_file  # noqa: E402

out = "tests/fuzz/corpus"
for h in ("token_file", "checkpoint", "tokenizer", "safetensors", "sharded_metadata"):
    os.makedirs(os.path.join(out, h), exist_ok=True)


def put(h, name, data):
    with open(os.path.join(out, h, name), "wb") as f:
        f.write(data)


# Token files: version 2 (via the independent writer) and version 1.
token_file.write(os.path.join(out, "token_file", "v2_small.bin"), [50256, 464, 14570, 531, 13], 50257)
token_file.write(os.path.join(out, "token_file", "v2_empty.bin"), [], 50257)
ids = [50256, 40, 1101, 257, 3797, 13]
put("token_file", "v1_small.bin", struct.pack("<8sIIQ", b"BRAIDTOK", 1, 50257, len(ids)) + struct.pack(f"<{len(ids)}H", *ids))

# A small model (the tiny preset's sizes overridden): its tensors in braid's
# order (model/param_layout.cpp) and its flat size (each tensor aligned to 16 floats).
L, H, C, V, BLOCK = 1, 1, 2, 3, 4
VP = (V + 63) // 64 * 64
tensors = [("wte.weight", [VP, C]), ("wpe.weight", [BLOCK, C])]
for l in range(L):
    b = f"h.{l}."
    tensors += [(b + "ln_1.weight", [C]), (b + "ln_1.bias", [C]), (b + "attn.c_attn.weight", [3 * C, C]),
                (b + "attn.c_attn.bias", [3 * C]), (b + "attn.c_proj.weight", [C, C]), (b + "attn.c_proj.bias", [C]),
                (b + "ln_2.weight", [C]), (b + "ln_2.bias", [C]), (b + "mlp.c_fc.weight", [4 * C, C]),
                (b + "mlp.c_fc.bias", [4 * C]), (b + "mlp.c_proj.weight", [C, 4 * C]), (b + "mlp.c_proj.bias", [C])]
tensors += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
numel = lambda shape: shape[0] * (shape[1] if len(shape) > 1 else 1)
n = 0
for _, shape in tensors:
    n = (n + 15) // 16 * 16 + numel(shape)
n = (n + 15) // 16 * 16

# Checkpoints: version 2 with checksums (and a loss scale), version 1.
arrays = [struct.pack(f"<{n}f", *[0.5 * i + k for i in range(n)]) for k in range(3)]
header = {"format": "braid-checkpoint", "model": "tiny", "step": 3, "n_params": n, "seed": 1337,
          "global_batch": 4, "seq_len": 16, "n_layer": L, "n_head": H, "n_embd": C, "vocab_size": V, "block_size": BLOCK,
          "loss_scale": {"scale": 65536.0, "growth_tracker": 2, "hysteresis_left": 2}}
v2 = dict(header, crc32=[zlib.crc32(a) for a in arrays])
h = json.dumps(v2).encode()
put("checkpoint", "v2_small.ckpt", b"BRAIDCKP" + struct.pack("<IQI", 2, len(h), zlib.crc32(h)) + h + b"".join(arrays))
h1 = json.dumps(header).encode()
put("checkpoint", "v1_small.ckpt", b"BRAIDCKP" + struct.pack("<IQ", 1, len(h1)) + h1 + b"".join(arrays))

# Sharded checkpoint metadata of the same model: every tensor's three states
# in two halves, from two piece files (formats/sharded_checkpoint.h).
pieces, off = [], [0, 0]
for t, (_, shape) in enumerate(tensors):
    whole = [0, 0, 1, shape[0]] if len(shape) == 1 else [0, 0, shape[0], shape[1]]
    k = numel(shape)
    for state in ("param", "exp_avg", "exp_avg_sq"):
        for f, (b, e) in enumerate(((0, k // 2), (k // 2, k))):
            if b == e:
                continue
            data = struct.pack(f"<{e - b}f", *range(b, e))
            pieces.append({"tensor": t, "state": state, "box": whole, "range": [b, e], "file": f,
                           "offset": off[f], "crc32": [zlib.crc32(data)]})
            off[f] += len(data)
meta = {"format": "braid-sharded-checkpoint", "chunk_bytes": 1 << 20, "header": header,
        "layout": {"world": 2, "tp": 1, "pp": 1}, "tensors": [{"name": a, "shape": b} for a, b in tensors],
        "files": [{"name": f"r{r}.0123456789abcdef.bin", "rank": r, "bytes": off[r]} for r in range(2)],
        "pieces": pieces}
mj = json.dumps(meta).encode()
put("sharded_metadata", "two_ranks", b"BRAIDSHD" + struct.pack("<IQI", 1, len(mj), zlib.crc32(mj)) + mj)

# llm.c token file (by its magic).
put("token_file", "llmc_small.bin", struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + struct.pack(f"<{len(ids)}H", *ids))

# Safetensors: an f32 matrix and a bf16 vector, with metadata; and an empty file.
st = {"__metadata__": {"format": "pt"}, "a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
      "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}
sh = json.dumps(st).encode()
put("safetensors", "small.safetensors", struct.pack("<Q", len(sh)) + sh + struct.pack("<4f", 1, 2, 3, 4) + bytes(6))
put("safetensors", "empty.safetensors", struct.pack("<Q", 2) + b"{}")

# Texts: English, whitespace runs, contractions, numbers, non-Latin scripts, emoji, bytes that are not UTF-8.
for i, t in enumerate([b"The jury said it did find that many of Georgia's registration laws are outmoded.",
                       b"  indented\n\n\ttabs   and    spaces\r\n", b"I'm you're we'll they'd it's 1234 56.78",
                       "Grüße, 東京, Ελληνικά, русский".encode(), "emoji 🎉👍🏽 and ZWJ 👨‍👩‍👧".encode(),
                       b"\xff\xfe invalid \xc3\x28 utf-8 \xed\xa0\x80"]):
    put("tokenizer", f"text{i}.txt", t)
print("seeds written to", out)
