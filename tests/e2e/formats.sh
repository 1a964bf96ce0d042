#!/usr/bin/env bash
# End-to-end: a trained model leaves braid and comes back. `braid export`
# writes a Hugging Face directory that an independent PyTorch GPT-2
# (tools/hf_gpt2_oracle.py, its own safetensors reader) scores to braid eval's
# loss; HF -> braid -> HF and braid -> HF -> braid keep every weight bitwise, as
# do the llm.c model file's round trips; eval and sample give the same answer
# on every layout; bad input is refused with its reason.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 3 300 "the jury said that an investigation of the election produced no evidence of irregularities in the city"
PY=/usr/bin/python3

# A model with trained (not initial) weights; the vocabulary is GPT-2's. The
# single-file form here (the Python below reads it); the same run saved sharded
# exports byte-identical weights.
timeout 300 "$BRAID" train --backend local --ranks 1 --model tiny --train-data "$tmp/t_train.bin" --val-data '' \
  --seq-len 32 --batch 4 --micro-batch 2 --steps 8 --quiet --save "$tmp/run" --checkpoint-format file > "$tmp/train.txt" 2>&1 \
  || { cat "$tmp/train.txt"; fail "train"; }
ck="$tmp/run/step_8.ckpt"
timeout 300 "$BRAID" train --backend local --ranks 1 --model tiny --train-data "$tmp/t_train.bin" --val-data '' \
  --seq-len 32 --batch 4 --micro-batch 2 --steps 8 --quiet --save "$tmp/run_sharded" > "$tmp/train2.txt" 2>&1 \
  || { cat "$tmp/train2.txt"; fail "train (sharded save)"; }
"$BRAID" export --checkpoint "$ck" --format llmc "$tmp/file.bin" >/dev/null || fail "export llmc of the file"
"$BRAID" export --checkpoint "$tmp/run_sharded/step_8" --format llmc "$tmp/sharded.bin" >/dev/null || fail "export llmc of the directory"
cmp -s "$tmp/file.bin" "$tmp/sharded.bin" || fail "the sharded checkpoint's weights differ from the file's"

# 1. Export to Hugging Face; the oracle reproduces braid eval's loss.
"$BRAID" export --checkpoint "$ck" --format hf "$tmp/hf" > "$tmp/export.txt" 2>&1 || { cat "$tmp/export.txt"; fail "export hf"; }
for f in model.safetensors config.json vocab.json merges.txt; do [ -s "$tmp/hf/$f" ] || fail "export wrote no $f"; done
"$BRAID" eval --backend local --checkpoint "$ck" --data "$tmp/t_val.bin" --seq-len 32 --micro-batch 2 --max-windows 12 --json \
  > "$tmp/eval.json" 2> "$tmp/eval.err" || { cat "$tmp/eval.err"; fail "eval"; }
"$PY" "$SRC/tools/hf_gpt2_oracle.py" "$tmp/hf" "$tmp/t_val.bin" --seq-len 32 --max-windows 12 > "$tmp/oracle.json" \
  || fail "oracle"
"$PY" - "$tmp/eval.json" "$tmp/oracle.json" <<'PY' || fail "export: the oracle's loss differs from braid eval's"
import json, sys
b, o = (json.load(open(p)) for p in sys.argv[1:3])
assert b["windows"] == o["windows"] == 12 and b["tokens"] == o["tokens"], (b, o)
assert abs(b["loss"] - o["loss"]) <= 1e-4 * o["loss"], (b["loss"], o["loss"])
print(f"braid eval {b['loss']:.6f} vs PyTorch GPT-2 on the exported model {o['loss']:.6f}")
PY

# 2. Round trips: braid -> HF -> braid keeps the parameters bitwise; HF -> braid
#    -> HF gives byte-identical tensors.
"$BRAID" import --format hf "$tmp/hf" --out "$tmp/from_hf.ckpt" >/dev/null || fail "import hf"
"$BRAID" export --checkpoint "$tmp/from_hf.ckpt" --format hf "$tmp/hf2" >/dev/null || fail "export hf again"
"$PY" - "$ck" "$tmp/from_hf.ckpt" "$tmp/hf/model.safetensors" "$tmp/hf2/model.safetensors" <<'PY' || fail "hf round trip"
import json, struct, sys
def params(path):
    raw = open(path, "rb").read()
    (h,) = struct.unpack_from("<Q", raw, 12)
    hdr = json.loads(raw[24:24 + h])
    n = hdr["n_params"]
    return raw[24 + h:24 + h + 4 * n], hdr
a, ha = params(sys.argv[1])
b, hb = params(sys.argv[2])
assert a == b, "braid -> HF -> braid changed parameters"
assert hb["step"] == 0 and hb["source"] == "hf", hb
def tensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    hdr = json.loads(raw[8:8 + n])
    d = raw[8 + n:]
    return {k: (v["shape"], d[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items() if k != "__metadata__"}
t1, t2 = tensors(sys.argv[3]), tensors(sys.argv[4])
assert t1 == t2, "HF -> braid -> HF changed a tensor"
assert "transformer.h.0.attn.c_attn.weight" in t1 and t1["transformer.wte.weight"][0] == [50257, 64], list(t1)[:4]
PY

# 3. llm.c: the model file out and back in, bitwise; its layout checked by offsets.
"$BRAID" export --checkpoint "$ck" --format llmc "$tmp/model.bin" >/dev/null || fail "export llmc"
"$BRAID" import --format llmc "$tmp/model.bin" --out "$tmp/from_llmc.ckpt" >/dev/null || fail "import llmc"
"$BRAID" export --checkpoint "$tmp/from_llmc.ckpt" --format llmc "$tmp/model2.bin" >/dev/null || fail "export llmc again"
cmp -s "$tmp/model.bin" "$tmp/model2.bin" || fail "llm.c -> braid -> llm.c changed bytes"
"$PY" - "$tmp/model.bin" "$tmp/hf/model.safetensors" <<'PY' || fail "llm.c layout"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
h = struct.unpack_from("<256i", raw, 0)
assert h[:8] == (20240326, 3, 64, 50257, 2, 4, 64, 50304), h[:8]
maxT, V, L, NH, C, Vp = h[2:8]
w = np.frombuffer(raw[1024:], dtype="<f4")
sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
         L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C]
assert w.size == sum(sizes), (w.size, sum(sizes))
st = open(sys.argv[2], "rb").read()
(n,) = struct.unpack_from("<Q", st, 0)
hdr = json.loads(st[8:8 + n])
def hf(name):
    e = hdr["transformer." + name]
    b, end = e["data_offsets"]
    return np.frombuffer(st[8 + n + b:8 + n + end], dtype="<f4").reshape(e["shape"])
off = np.cumsum([0] + sizes)
qkvw = w[off[4]:off[5]].reshape(L, 3 * C, C)
assert np.array_equal(qkvw[1], hf("h.1.attn.c_attn.weight").T), "qkvw of layer 1 is not HF's c_attn transposed"
wte = w[:Vp * C].reshape(Vp, C)
assert np.array_equal(wte[:V], hf("wte.weight")) and not wte[V:].any(), "wte rows"
assert np.array_equal(w[off[15]:off[16]], hf("ln_f.bias")), "ln_f.bias is not last"
PY

# 3b. llm.c's and nanoGPT's token files hold the same tokens: the same loss.
"$PY" - "$SRC/tools" "$tmp/t_val.bin" "$tmp/val_llmc.bin" "$tmp/val_nano.bin" <<'PY' || fail "writing llm.c / nanoGPT token files"
import struct, sys
sys.path.insert(0, sys.argv[1])
import token_file
_, _, ids = token_file.read(sys.argv[2])
body = struct.pack(f"<{len(ids)}H", *ids)
open(sys.argv[3], "wb").write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)) + body)
open(sys.argv[4], "wb").write(body)
PY
for spec in "$tmp/val_llmc.bin auto" "$tmp/val_nano.bin nanogpt"; do
  set -- $spec
  "$BRAID" eval --backend local --checkpoint "$ck" --data "$1" --data-format "$2" --seq-len 32 --micro-batch 2 \
    --max-windows 12 --json > "$tmp/e3.json" 2> "$tmp/e3.err" || { cat "$tmp/e3.err"; fail "eval of a $2 file"; }
  "$PY" -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:3]); assert a['loss']==b['loss'], (a,b)" \
    "$tmp/eval.json" "$tmp/e3.json" || fail "$2 token file scores differently"
done
expect_fail_early() { "$@" > "$tmp/bad.txt" 2>&1 && fail "accepted: $*"; grep -q -- "--data-format nanogpt" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "no hint"; }; }
expect_fail_early "$BRAID" eval --backend local --checkpoint "$ck" --data "$tmp/val_nano.bin" --seq-len 32
timeout 300 "$BRAID" train --backend local --model tiny --train-data "$tmp/val_llmc.bin" --val-data "$tmp/val_nano.bin" \
  --data-format auto --seq-len 16 --batch 2 --micro-batch 2 --steps 1 --quiet > "$tmp/tl.txt" 2>&1 \
  && fail "a nanoGPT val file was read without --data-format nanogpt"

# 4. eval and sample agree across layouts (TP, PP, ZeRO-3 under mpirun).
"$BRAID" sample --backend local --checkpoint "$ck" --prompt "the jury" --max-new-tokens 12 --seed 5 --seq-len 32 \
  > "$tmp/s1.txt" 2>&1 || { cat "$tmp/s1.txt"; fail "sample"; }
[ -s "$tmp/s1.txt" ] || fail "sample printed nothing"
for layout in "--tp 2" "--pp 2 --micro-batch 1" "--zero 3"; do
  # shellcheck disable=SC2086
  timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" eval --checkpoint "$ck" --data "$tmp/t_val.bin" --seq-len 32 --max-windows 12 \
    --json $layout > "$tmp/e2.json" 2> "$tmp/e2.err" || { cat "$tmp/e2.err"; fail "eval $layout"; }
  "$PY" - "$tmp/eval.json" "$tmp/e2.json" "$layout" <<'PY' || fail "eval differs on $layout"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["windows"] == b["windows"] and abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (sys.argv[3], a, b)
PY
  # shellcheck disable=SC2086
  timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" sample --checkpoint "$ck" --prompt "the jury" --max-new-tokens 12 --seed 5 \
    --seq-len 32 $layout > "$tmp/s2.txt" 2>&1 || { cat "$tmp/s2.txt"; fail "sample $layout"; }
  cmp -s "$tmp/s1.txt" "$tmp/s2.txt" || { cat "$tmp/s1.txt" "$tmp/s2.txt"; fail "sample differs on $layout"; }
done

# 5. Fine-tuning an imported model: --resume from it trains from step 0.
timeout 300 "$BRAID" train --backend local --ranks 1 --model tiny --train-data "$tmp/t_train.bin" --val-data '' \
  --seq-len 16 --batch 2 --micro-batch 2 --steps 2 --seed 9 --resume "$tmp/from_hf.ckpt" > "$tmp/ft.txt" 2>&1 \
  || { cat "$tmp/ft.txt"; fail "fine-tune from an imported checkpoint"; }
grep -q "step     2/2" "$tmp/ft.txt" || { cat "$tmp/ft.txt"; fail "fine-tune steps"; }
grep -q "fine-tuning weights imported from hf" "$tmp/ft.txt" || { cat "$tmp/ft.txt"; fail "fine-tune line"; }
# A larger --steps continues a finished run on the new total's schedule, and says so.
timeout 300 "$BRAID" train --backend local --ranks 1 --model tiny --train-data "$tmp/t_train.bin" --val-data '' \
  --seq-len 32 --batch 4 --micro-batch 2 --steps 10 --resume "$ck" > "$tmp/more.txt" 2>&1 \
  || { cat "$tmp/more.txt"; fail "resume with a larger --steps"; }
grep -q "the saved run planned 8 steps; this one trains to --steps 10" "$tmp/more.txt" \
  || { cat "$tmp/more.txt"; fail "no schedule line on resume"; }
grep -q "step    10/10" "$tmp/more.txt" || { cat "$tmp/more.txt"; fail "resumed run did not reach step 10"; }

# 6. Bad input: named, exit code 2 (configuration) or 3 (data).
expect_fail() {  # CODE NEEDLE CMD...
  local code="$1" needle="$2"; shift 2
  "$@" > "$tmp/bad.txt" 2>&1; local rc=$?
  [ "$rc" -eq "$code" ] || { cat "$tmp/bad.txt"; fail "exit $rc, expected $code: $*"; }
  grep -qF -- "$needle" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "message lacks '$needle': $*"; }
}
expect_fail 2 "--format" "$BRAID" export --checkpoint "$ck" --format onnx "$tmp/x"
expect_fail 3 "llm.c's model magic" "$BRAID" import --format llmc "$tmp/t_val.bin" --out "$tmp/x.ckpt"
head -c 2000 "$tmp/hf/model.safetensors" > "$tmp/cut.safetensors"
mkdir -p "$tmp/hfcut" && cp "$tmp/hf/config.json" "$tmp/hfcut/" && cp "$tmp/cut.safetensors" "$tmp/hfcut/model.safetensors"
expect_fail 3 "safetensors file" "$BRAID" import --format hf "$tmp/hfcut" --out "$tmp/x.ckpt"
sed 's/"n_positions": 64/"n_positions": 100/' "$tmp/hf/config.json" > "$tmp/hfcut/config.json"
cp "$tmp/hf/model.safetensors" "$tmp/hfcut/model.safetensors"
expect_fail 3 "transformer.wpe.weight" "$BRAID" import --format hf "$tmp/hfcut" --out "$tmp/x.ckpt"
expect_fail 2 "--model does not apply to braid eval" "$BRAID" eval --backend local --checkpoint "$ck" --data "$tmp/t_val.bin" --model gpt2
"$PY" -c "import sys; sys.path.insert(0, '$SRC/tools'); import token_file; token_file.write('$tmp/short.bin', [1] * 10, 50257)"
expect_fail 2 "fewer than one sequence of --seq-len 32" "$BRAID" eval --backend local --checkpoint "$ck" --data "$tmp/short.bin" --seq-len 32
expect_fail 2 "--top-k" "$BRAID" sample --backend local --checkpoint "$ck" --top-k 0
expect_fail 2 "--temperature" "$BRAID" sample --backend local --checkpoint "$ck" --temperature 0
expect_fail 2 "--max-new-tokens" "$BRAID" sample --backend local --checkpoint "$ck" --max-new-tokens 0
echo "formats: ok"
