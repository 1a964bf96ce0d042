#!/usr/bin/env bash
# End-to-end: braid train under mpirun on a small text file; metrics file keys;
# config errors; a failing rank stops the whole job with its message (no hang).
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 1 400 "the jury said that an investigation of the election produced no evidence of irregularities in the city"

common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 4 --micro-batch 1)

# 1. Trains under mpirun with 2 ranks and writes the metrics file.
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps 6 --val-every 3 --val-batches 1 \
  --metrics-out "$tmp/m.jsonl" --check-replicas --save "$tmp/ck.bin" --sample-tokens 8 > "$tmp/out.txt" 2>&1 \
  || { cat "$tmp/out.txt"; fail "mpirun train exited non-zero"; }
grep -q "step     6/6" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no step lines"; }
grep -q "val loss" "$tmp/out.txt" || fail "no validation line"
grep -q -- "--- sample" "$tmp/out.txt" || fail "no sample"
[ -f "$tmp/ck.bin" ] || fail "no checkpoint written"
/usr/bin/python3 - "$tmp/m.jsonl" <<'PY' || fail "metrics file"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
vals = [r for r in rows if "val_loss" in r]
assert len(steps) == 6, steps
for r in steps:
    for k in ("step", "loss", "lr", "grad_norm", "tokens_per_sec", "mfu", "peak_mem_bytes"):
        assert k in r, (k, r)
assert [v["step"] for v in vals] == [0, 3, 6], vals
PY

# 1b. A run that dies after a checkpoint, resumed: the metrics file reads as one run.
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps 6 --val-every 0 --quiet \
  --metrics-out "$tmp/r.jsonl" --save "$tmp/r.ckpt" --save-every 3 --inject-failure 1:4 >/dev/null 2>&1 \
  && fail "injected failure did not fail"
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps 6 --val-every 0 --quiet \
  --metrics-out "$tmp/r.jsonl" --resume "$tmp/r.ckpt" > "$tmp/r.txt" 2>&1 || { cat "$tmp/r.txt"; fail "resume"; }
/usr/bin/python3 - "$tmp/r.jsonl" <<'PY' || fail "resumed metrics file"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == [1, 2, 3, 4, 5, 6], steps
PY

# 2. Config errors name the values and the fix, exit non-zero, on every launch mode.
out=$("$BRAID" train "${common[@]}" --batch 5 --micro-batch 2 --steps 1 2>&1); rc=$?
[ $rc -ne 0 ] || fail "bad batch accepted"
echo "$out" | grep -q "global batch 5 is not divisible" || fail "batch message: $out"
out=$(timeout 120 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --dp 3 --steps 1 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "dp mismatch rc=$rc"
echo "$out" | grep -q -- "--dp 3 but the job has 2 ranks" || fail "dp message: $out"
out=$("$BRAID" train --model tiny --train-data "$tmp/missing.bin" --steps 1 2>&1); rc=$?
[ $rc -ne 0 ] || fail "missing data accepted"
echo "$out" | grep -q "missing.bin' not found" || fail "missing-file message: $out"
out=$("$BRAID" train "${common[@]}" --model huge --steps 1 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -qi "tiny" || fail "unknown model message: $out"

# 3. A failing rank takes the job down with its rank and reason, never a hang.
out=$(timeout 120 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --batch 6 --steps 10 --val-every 0 \
  --inject-failure 1:2 2>&1); rc=$?
[ $rc -ne 124 ] || fail "job hung after a rank failed"
[ $rc -ne 0 ] || fail "job exited 0 after a rank failed"
echo "$out" | grep -q "rank 1: injected failure on rank 1 at step 2" || fail "failure message: $out"
# 4. Parameter server under mpirun: synchronous (replicas checked) and asynchronous.
timeout 300 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --dp-mode ps --steps 3 --val-every 0 \
  --check-replicas > "$tmp/ps.txt" 2>&1 || { cat "$tmp/ps.txt"; fail "ps sync"; }
grep -q "parameter server" "$tmp/ps.txt" || fail "ps header"
timeout 300 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --dp-mode ps --ps-async --staleness 1 \
  --steps 3 --val-every 0 > "$tmp/psa.txt" 2>&1 || { cat "$tmp/psa.txt"; fail "ps async"; }
grep -q "staleness <=" "$tmp/psa.txt" || fail "ps async records"
echo "PASS"
