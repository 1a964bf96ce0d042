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
# Version 3: uint32 ids of Llama 3's 128,256-token vocabulary.
token_file.write(os.path.join(out, "token_file", "v3_llama3.bin"), [128000, 791, 65535, 65536, 128255], 128256)
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

# Sharded checkpoint metadata of a model: every tensor's three states in two
# halves, from two piece files (formats/sharded_checkpoint.h).
def sharded_metadata(tensors, header):
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
    return b"BRAIDSHD" + struct.pack("<IQI", 1, len(mj), zlib.crc32(mj)) + mj


put("sharded_metadata", "two_ranks", sharded_metadata(tensors, header))

# The same for a Llama-family block (RMSNorm, rotary positions, SwiGLU of
# hidden 4, one key/value head of 2 for 2 query heads, no biases, untied head),
# its parts in the header's "block" (formats/model_header.h).
LH, LKV, HID = 2, 1, 4
llama = [("wte.weight", [VP, C])]
for l in range(L):
    b = f"h.{l}."
    llama += [(b + "ln_1.weight", [C]), (b + "attn.c_attn.weight", [C + 2 * LKV * (C // LH), C]),
              (b + "attn.c_proj.weight", [C, C]), (b + "ln_2.weight", [C]), (b + "mlp.c_fc.weight", [2 * HID, C]),
              (b + "mlp.c_proj.weight", [C, HID])]
llama += [("ln_f.weight", [C]), ("lm_head.weight", [VP, C])]
ln = 0
for _, shape in llama:
    ln = (ln + 15) // 16 * 16 + numel(shape)
ln = (ln + 15) // 16 * 16
block = {"version": 1, "norm": "rmsnorm", "norm_eps": 1e-5, "positions": "rope", "rope_theta": 500000.0,
         "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 8192},
         "n_kv_head": LKV, "mlp": "swiglu", "mlp_hidden": HID, "bias": False, "tied_head": False}
llama_header = dict(header, model="llama-tiny", n_head=LH, n_params=ln, block=block)
put("sharded_metadata", "llama_two_ranks", sharded_metadata(llama, llama_header))

# Hugging Face Llama config.json files (the fields formats/hf_llama.h reads),
# and a sharded directory's index.
for h in ("hf_config", "hf_index"):
    os.makedirs(os.path.join(out, h), exist_ok=True)
meta_8b = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
           "max_position_embeddings": 131072, "attention_bias": False, "mlp_bias": False,
           "tie_word_embeddings": False, "vocab_size": 128256, "torch_dtype": "bfloat16"}
put("hf_config", "llama3.1_8b.json", json.dumps(meta_8b, indent=2).encode())
tiny = dict(meta_8b, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, rope_scaling=None, rope_theta=10000.0, max_position_embeddings=64,
            vocab_size=50257, tie_word_embeddings=True, attention_bias=True, mlp_bias=True)
put("hf_config", "tiny_tied_bias.json", json.dumps(tiny).encode())
put("hf_index", "two_shards.json", json.dumps({"metadata": {"total_size": 1024}, "weight_map": {
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00002-of-00002.safetensors"}}).encode())

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
