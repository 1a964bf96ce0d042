#!/usr/bin/env bash
# End-to-end: a trained Llama-family model leaves braid and comes back.
# `braid export --format hf` writes a LlamaForCausalLM directory that an
# independent PyTorch Llama (tools/hf_llama_oracle.py: its own safetensors
# reader, the model built from config.json alone) scores to braid eval's loss
# within 1e-5; braid -> HF -> braid keeps every weight bitwise and HF -> braid
# -> HF every tensor; a sharded directory (model.safetensors.index.json) reads
# as the single file does; eval agrees across layouts; a resume with other
# block parts, configurations braid cannot compute and directories whose
# weights and configuration disagree are refused by name.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 3 300 "the jury said that an investigation of the election produced no evidence of irregularities in the city"
PY=/usr/bin/python3

timeout 300 "$BRAID" train --backend local --ranks 1 --model llama-tiny --train-data "$tmp/t_train.bin" --val-data '' \
  --seq-len 32 --batch 4 --micro-batch 2 --steps 8 --quiet --save "$tmp/run" --checkpoint-format file > "$tmp/train.txt" 2>&1 \
  || { cat "$tmp/train.txt"; fail "train llama-tiny"; }
ck="$tmp/run/step_8.ckpt"

# 1. Export; the oracle reproduces braid eval's loss.
"$BRAID" export --checkpoint "$ck" --format hf "$tmp/hf" > "$tmp/export.txt" 2>&1 || { cat "$tmp/export.txt"; fail "export hf"; }
grep -q "LlamaForCausalLM" "$tmp/export.txt" || { cat "$tmp/export.txt"; fail "export did not write a Llama"; }
for f in model.safetensors config.json vocab.json merges.txt tokenizer_config.json; do
  [ -s "$tmp/hf/$f" ] || fail "export wrote no $f"
done
"$BRAID" eval --backend local --checkpoint "$ck" --data "$tmp/t_val.bin" --seq-len 32 --micro-batch 2 --max-windows 12 --json \
  > "$tmp/eval.json" 2> "$tmp/eval.err" || { cat "$tmp/eval.err"; fail "eval"; }
"$PY" "$SRC/tools/hf_llama_oracle.py" "$tmp/hf" "$tmp/t_val.bin" --seq-len 32 --max-windows 12 > "$tmp/oracle.json" \
  || fail "oracle"
"$PY" - "$tmp/eval.json" "$tmp/oracle.json" "$tmp/hf/config.json" <<'PY' || fail "export: the oracle's loss differs from braid eval's"
import json, sys
b, o, c = (json.load(open(p)) for p in sys.argv[1:4])
assert b["windows"] == o["windows"] == 12 and b["tokens"] == o["tokens"], (b, o)
assert abs(b["loss"] - o["loss"]) <= 1e-5 * o["loss"], (b["loss"], o["loss"])
for k, v in {"num_key_value_heads": 2, "intermediate_size": 176, "tie_word_embeddings": False, "hidden_act": "silu",
             "attention_bias": False, "mlp_bias": False, "head_dim": 16}.items():
    assert c[k] == v, (k, c[k])
print(f"braid eval {b['loss']:.7f} vs PyTorch Llama on the exported model {o['loss']:.7f}")
PY

# 2. Round trips, and the sharded form of the same directory.
"$BRAID" import --format hf "$tmp/hf" --out "$tmp/from_hf.ckpt" >/dev/null || fail "import hf"
"$BRAID" export --checkpoint "$tmp/from_hf.ckpt" --format hf "$tmp/hf2" >/dev/null || fail "export hf again"
mkdir -p "$tmp/hfs" && cp "$tmp/hf/config.json" "$tmp/hfs/"
"$PY" - "$tmp/hf/model.safetensors" "$tmp/hfs" <<'PY' || fail "sharding the export"
import json, os, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack_from("<Q", raw, 0)
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
names = [k for k in hdr if k != "__metadata__"]
shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
          "model-00002-of-00002.safetensors": names[len(names) // 2:]}
weight_map = {}
for f, part in shards.items():
    h, body, at = {}, b"", 0
    for k in part:
        b, e = hdr[k]["data_offsets"]
        h[k] = {"dtype": hdr[k]["dtype"], "shape": hdr[k]["shape"], "data_offsets": [at, at + e - b]}
        body += data[b:e]; at += e - b; weight_map[k] = f
    j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
    open(os.path.join(sys.argv[2], f), "wb").write(struct.pack("<Q", len(j)) + j + body)
json.dump({"metadata": {"total_size": len(data)}, "weight_map": weight_map},
          open(os.path.join(sys.argv[2], "model.safetensors.index.json"), "w"))
PY
"$BRAID" import --format hf "$tmp/hfs" --out "$tmp/from_shards.ckpt" >/dev/null || fail "import sharded hf"
"$PY" "$SRC/tools/hf_llama_oracle.py" "$tmp/hfs" "$tmp/t_val.bin" --seq-len 32 --max-windows 12 > "$tmp/oracle_s.json" \
  || fail "oracle on the shards"
"$PY" - "$ck" "$tmp/from_hf.ckpt" "$tmp/from_shards.ckpt" "$tmp/hf/model.safetensors" "$tmp/hf2/model.safetensors" \
  "$tmp/oracle.json" "$tmp/oracle_s.json" <<'PY' || fail "hf round trip"
import json, struct, sys
def params(path):
    raw = open(path, "rb").read()
    (h,) = struct.unpack_from("<Q", raw, 12)
    hdr = json.loads(raw[24:24 + h])
    return raw[24 + h:24 + h + 4 * hdr["n_params"]], hdr
a, ha = params(sys.argv[1])
b, hb = params(sys.argv[2])
c, hc = params(sys.argv[3])
assert a == b, "braid -> HF -> braid changed parameters"
assert b == c, "the sharded directory reads differently from the single file"
assert hb["block"] == ha["block"] and hb["block"]["mlp"] == "swiglu" and hb["source"] == "hf", (ha["block"], hb)
def tensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    hdr = json.loads(raw[8:8 + n]); d = raw[8 + n:]
    return {k: (v["shape"], d[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items() if k != "__metadata__"}
t1, t2 = tensors(sys.argv[4]), tensors(sys.argv[5])
assert t1 == t2, "HF -> braid -> HF changed a tensor"
assert t1["model.layers.1.self_attn.k_proj.weight"][0] == [32, 64] and t1["lm_head.weight"][0] == [50257, 64]
assert json.load(open(sys.argv[6]))["loss"] == json.load(open(sys.argv[7]))["loss"]
PY

# 3. eval agrees on other layouts; sample runs.
for layout in "--tp 2" "--zero 3"; do
  # shellcheck disable=SC2086
  timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" eval --checkpoint "$ck" --data "$tmp/t_val.bin" --seq-len 32 --max-windows 12 \
    --json $layout > "$tmp/e2.json" 2> "$tmp/e2.err" || { cat "$tmp/e2.err"; fail "eval $layout"; }
  "$PY" - "$tmp/eval.json" "$tmp/e2.json" "$layout" <<'PY' || fail "eval differs on $layout"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["windows"] == b["windows"] and abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (sys.argv[3], a, b)
PY
done
"$BRAID" sample --backend local --checkpoint "$ck" --prompt "the jury" --max-new-tokens 8 --seq-len 32 > "$tmp/s.txt" 2>&1 \
  || { cat "$tmp/s.txt"; fail "sample"; }

# 4. Refusals, by name: a resume whose block differs; configurations braid cannot compute.
expect_fail() {  # CODE NEEDLE CMD...
  local code="$1" needle="$2"; shift 2
  "$@" > "$tmp/bad.txt" 2>&1; local rc=$?
  [ "$rc" -eq "$code" ] || { cat "$tmp/bad.txt"; fail "exit $rc, expected $code: $*"; }
  grep -qF -- "$needle" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "message lacks '$needle': $*"; }
}
expect_fail 2 "saved with --n-kv-head 2" timeout 300 "$BRAID" train --backend local --ranks 1 --model llama-tiny --n-kv-head 4 \
  --train-data "$tmp/t_train.bin" --val-data '' --seq-len 32 --batch 4 --micro-batch 2 --steps 9 --resume "$ck"
mkdir -p "$tmp/hfbad" && cp "$tmp/hf/model.safetensors" "$tmp/hfbad/"
sed 's/"silu"/"gelu"/' "$tmp/hf/config.json" > "$tmp/hfbad/config.json"
expect_fail 2 "hidden_act 'gelu'" "$BRAID" import --format hf "$tmp/hfbad" --out "$tmp/x.ckpt"
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$tmp/hf/config.json" > "$tmp/hfbad/config.json"
expect_fail 3 "model.layers.0.self_attn.k_proj.weight" "$BRAID" import --format hf "$tmp/hfbad" --out "$tmp/x.ckpt"
expect_fail 2 "--format hf" "$BRAID" export --checkpoint "$ck" --format llmc "$tmp/x.bin"
# Nothing read silently from the wrong place: an export over a sharded one is
# refused (a reader would take the old index), a directory with both forms is
# refused, and weights the configuration does not use (a tied head beside a
# trained lm_head) are named, not dropped.
expect_fail 2 "holds a sharded model" "$BRAID" export --checkpoint "$ck" --format hf "$tmp/hfs"
cp "$tmp/hf/model.safetensors" "$tmp/hfs/"
expect_fail 3 "holds both model.safetensors and model.safetensors.index.json" \
  "$BRAID" import --format hf "$tmp/hfs" --out "$tmp/x.ckpt"
sed 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$tmp/hf/config.json" > "$tmp/hfbad/config.json"
expect_fail 3 "tensor(s) its config.json does not use (lm_head.weight)" \
  "$BRAID" import --format hf "$tmp/hfbad" --out "$tmp/x.ckpt"
echo "formats_llama: ok"
