"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<harness>/): small valid
files of each format and version, and a few texts. Run from the repository
root: /usr/bin/python3 tests/fuzz/make_seeds.py"""
import json, os, struct, sys, zlib

sys.path.insert(0, "tools")
import token_file  # noqa: E402

out = "tests/fuzz/corpus"
for h in ("token_file", "checkpoint", "tokenizer", "safetensors"):
    os.makedirs(os.path.join(out, h), exist_ok=True)


def put(h, name, data):
    with open(os.path.join(out, h, name), "wb") as f:
        f.write(data)


# Token files: version 2 (via the independent writer) and version 1.
token_file.write(os.path.join(out, "token_file", "v2_small.bin"), [50256, 464, 14570, 531, 13], 50257)
token_file.write(os.path.join(out, "token_file", "v2_empty.bin"), [], 50257)
ids = [50256, 40, 1101, 257, 3797, 13]
put("token_file", "v1_small.bin", struct.pack("<8sIIQ", b"BRAIDTOK", 1, 50257, len(ids)) + struct.pack(f"<{len(ids)}H", *ids))

# Checkpoints: version 2 with checksums (and a loss scale), version 1.
n = 4
arrays = [struct.pack(f"<{n}f", *[0.5 * i + k for i in range(n)]) for k in range(3)]
header = {"format": "braid-checkpoint", "model": "tiny", "step": 3, "n_params": n, "seed": 1337,
          "global_batch": 4, "seq_len": 16, "n_layer": 1, "n_head": 1, "n_embd": 2, "vocab_size": 3,
          "loss_scale": {"scale": 65536.0, "growth_tracker": 2, "hysteresis_left": 2}}
v2 = dict(header, crc32=[zlib.crc32(a) for a in arrays])
h = json.dumps(v2).encode()
put("checkpoint", "v2_small.ckpt", b"BRAIDCKP" + struct.pack("<IQI", 2, len(h), zlib.crc32(h)) + h + b"".join(arrays))
h1 = json.dumps(header).encode()
put("checkpoint", "v1_small.ckpt", b"BRAIDCKP" + struct.pack("<IQ", 1, len(h1)) + h1 + b"".join(arrays))

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
