#!/usr/bin/env bash
# End-to-end: `--config run.toml` (a section per command; the command line
# overrides the file), the run record at the head of the metrics file,
# `--version`, case-insensitive choices, `--micro-batch auto`, and a bad config
# file refused by file, section and key before anything runs.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 5 200 "the jury said that an investigation of the election produced no evidence of irregularities in the city"
PY=/usr/bin/python3

"$BRAID" --version > "$tmp/version.txt" || fail "--version exit code"
grep -Eq '^braid [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]+(-dirty)?|unknown)\)$' "$tmp/version.txt" || { cat "$tmp/version.txt"; fail "--version"; }

cat > "$tmp/run.toml" <<TOML
# one file for several commands: each reads its own section
[train]
model = "TINY"
train-data = "$tmp/t_train.bin"
val_data = "$tmp/t_val.bin"
seq-len = 16
batch = 4
micro-batch = "auto"
steps = 5
val-every = 0
sequence-parallel = false
precision = "FP32"

[plan]
model = "small"
TOML
timeout 300 "$BRAID" train --config "$tmp/run.toml" --backend local --ranks 2 --steps 3 --metrics-out "$tmp/m.jsonl" \
  > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt"; fail "train --config"; }
grep -q "step     3/3" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "the command line's --steps 3 did not override the file's 5"; }
grep -q "options:.* steps=3" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no options line"; }
grep -q "batch 4 = 2 x 2 x 1 accum" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "--micro-batch auto did not pick batch / dp = 2"; }
grep -q "note: --warmup 40 is longer than the run (--steps 3)" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no warm-up note"; }
"$PY" - "$tmp/m.jsonl" <<'PY' || fail "run record"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = rows[0]
assert r["run"] == "braid train" and r["ranks"] == 2 and r["start_step"] == 0, r
assert r["config"]["steps"] == 3 and r["config"]["model"] == "tiny" and r["config"]["precision"] == "fp32", r["config"]
assert "steps" in r["given"] and "model" in r["given"], r["given"]
assert sorted(sum(r["hosts"].values(), [])) == [0, 1], r["hosts"]
assert r["commit"] and r["time"].endswith("Z") and r["version"], r
assert [x["step"] for x in rows if "loss" in x] == [1, 2, 3], rows
assert "peak_memory" in rows[-1], rows[-1]
PY
"$BRAID" plan --config "$tmp/run.toml" --ranks 2 > "$tmp/plan.txt" 2>&1 || { cat "$tmp/plan.txt"; fail "plan --config"; }
grep -q "model small" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "plan did not read its [plan] section"; }
# plan takes train's layout flags, --dp among them.
"$BRAID" plan --ranks 3 --dp-mode ps --dp 2 > "$tmp/plan_ps.txt" 2>&1 || { cat "$tmp/plan_ps.txt"; fail "plan --dp"; }
grep -q "dp=2 + parameter server" "$tmp/plan_ps.txt" || { cat "$tmp/plan_ps.txt"; fail "plan --dp 2 --dp-mode ps"; }
# A model given by its sizes is named by them, or by its preset and what changed.
"$BRAID" plan --model small --n-layer 8 > "$tmp/plan_l8.txt" 2>&1 || { cat "$tmp/plan_l8.txt"; fail "plan --n-layer 8"; }
grep -q "model small with n_layer=8 (L=8 " "$tmp/plan_l8.txt" || { cat "$tmp/plan_l8.txt"; fail "plan names a changed preset"; }
"$BRAID" plan --n-layer 105 --n-head 128 --n-embd 20480 --block-size 2048 --seq-len 2048 --tp 8 --pp 35 --ranks 280 \
  --batch 280 > "$tmp/plan_530b.txt" 2>&1 || { cat "$tmp/plan_530b.txt"; fail "plan of a 530B model"; }
grep -q "model L=105 H=128 C=20480 with block_size=2048 (" "$tmp/plan_530b.txt" || { cat "$tmp/plan_530b.txt"; fail "plan names a model by its sizes"; }

# The metrics file drawn: loss, throughput and per-rank memory (2 ranks).
"$PY" "$SRC/tools/plot_metrics.py" "$tmp/m.jsonl" --out "$tmp/plots" > "$tmp/plots.txt" || fail "plot_metrics"
for f in loss throughput memory; do
  head -c 8 "$tmp/plots/$f.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" || fail "$f.png is not a PNG"
  [ "$(stat -c %s "$tmp/plots/$f.png")" -gt 10000 ] || fail "$f.png is nearly empty"
done
"$PY" - "$tmp/m.jsonl" <<'PY' || fail "peak memory record"
import json, sys
mem = [json.loads(l) for l in open(sys.argv[1]) if "peak_memory" in l][-1]["peak_memory"]
assert [m["rank"] for m in mem] == [0, 1] and all(m["total"] == sum(m["bytes"].values()) for m in mem), mem
PY

# Bad config files: named by file, section and key; exit code 2; nothing runs.
bad() {  # NEEDLE TOML-TEXT
  printf '%s\n' "$2" > "$tmp/bad.toml"
  timeout 120 "$BRAID" train --config "$tmp/bad.toml" --backend local --quiet > "$tmp/bad.txt" 2>&1; local rc=$?
  [ "$rc" -eq 2 ] || { cat "$tmp/bad.txt"; fail "exit $rc for: $2"; }
  grep -qF -- "$1" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "message lacks '$1' for: $2"; }
}
bad "has no option 'stepz'" $'[train]\nstepz = 3'
bad "outside any section" 'steps = 3'
bad "names no braid command" $'[trian]\nsteps = 3'
bad "is a flag" $'[train]\nfsdp = 3'
bad "'fp8' is not one of" $'[train]\nprecision = "fp8"'
bad "bad.toml were read" $'[train]\nsteps = "five"'
"$BRAID" train --config "$tmp/nothing.toml" > "$tmp/bad.txt" 2>&1 && fail "a missing config file was accepted"
grep -q "nothing.toml" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "missing config file not named"; }

# Choices in any case; help lists them and groups the options.
"$BRAID" train --help > "$tmp/help.txt"
grep -q "{fp32,bf16,fp16}" "$tmp/help.txt" || fail "help does not list --precision's values"
grep -q "^Parallel layout:" "$tmp/help.txt" || fail "help has no option groups"
echo "config: ok"
