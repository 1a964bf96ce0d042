#!/usr/bin/env bash
# End-to-end: braid train under mpirun on a small text file; metrics file keys;
# config errors; a failing rank stops the whole job with its message (no hang).
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 1 400 "the jury said that an investigation of the election produced no evidence of irregularities in the city"

common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 4 --micro-batch 1)

# 1. Trains under mpirun with 2 ranks and writes the metrics file.
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps 6 --val-every 3 --val-batches 1 \
  --metrics-out "$tmp/m.jsonl" --check-replicas --save "$tmp/ck" --sample-tokens 8 > "$tmp/out.txt" 2>&1 \
  || { cat "$tmp/out.txt"; fail "mpirun train exited non-zero"; }
grep -q "step     6/6" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "no step lines"; }
grep -q "val loss" "$tmp/out.txt" || fail "no validation line"
# Validation follows --train-data: t_train.bin is validated on t_val.bin beside it.
"$BRAID" train --backend local --model tiny --train-data "$tmp/t_train.bin" --seq-len 32 --batch 4 --micro-batch 1 \
  --steps 1 --val-every 1 --val-batches 1 --metrics-out "$tmp/pair.jsonl" > "$tmp/pair.txt" 2>&1 \
  || { cat "$tmp/pair.txt"; fail "train with --train-data alone"; }
grep -q "val loss" "$tmp/pair.txt" || { cat "$tmp/pair.txt"; fail "no validation on t_val.bin"; }
grep -q "t_val.bin" "$tmp/pair.jsonl" || fail "the run record does not name t_val.bin"
grep -q -- "--- sample" "$tmp/out.txt" || fail "no sample"
[ -f "$tmp/ck/step_6/metadata" ] || fail "no checkpoint written"
"$BRAID" verify "$tmp/ck" > "$tmp/verify.txt" || { cat "$tmp/verify.txt"; fail "braid verify"; }
grep -q "step_6: ok | step 6 | model tiny .* pieces in 2 files, checksums match" "$tmp/verify.txt" || { cat "$tmp/verify.txt"; fail "verify line"; }
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
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["step"] for r in rows if "step" in r]
assert steps == [1, 2, 3, 4, 5, 6], steps
# Each invocation opens with its run record; the resumed one says where it started.
assert [r["start_step"] for r in rows if "run" in r] == [0, 3], rows
PY

# 2. Config errors name the values and the fix, exit non-zero, on every launch mode.
out=$("$BRAID" train "${common[@]}" --batch 5 --micro-batch 2 --steps 1 2>&1); rc=$?
[ $rc -eq 2 ] || fail "bad batch: exit code $rc, want 2 (configuration error)"
grep -q "global batch 5 is not divisible" <<< "$out" || fail "batch message: $out"
out=$(timeout 120 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --dp 3 --steps 1 2>&1); rc=$?
[ $rc -eq 2 ] || fail "dp mismatch: exit code $rc under mpirun, want 2"
grep -q -- "--dp 3 but the job has 2 ranks" <<< "$out" || fail "dp message: $out"
out=$("$BRAID" train --model tiny --train-data "$tmp/missing.bin" --steps 1 2>&1); rc=$?
[ $rc -eq 2 ] || fail "missing data: exit code $rc, want 2"
grep -q "missing.bin' not found" <<< "$out" || fail "missing-file message: $out"
out=$("$BRAID" train "${common[@]}" --model huge --steps 1 2>&1); rc=$?
[ $rc -eq 2 ] && grep -qi "tiny" <<< "$out" || fail "unknown model (exit $rc): $out"
out=$("$BRAID" train "${common[@]}" --steps 1 --no-such-flag 2>&1); rc=$?
[ $rc -eq 2 ] || fail "an unknown flag: exit code $rc, want 2"
head -c 100 "$tmp/t_train.bin" > "$tmp/cut.bin"
out=$("$BRAID" train "${common[@]}" --train-data "$tmp/cut.bin" --steps 1 2>&1); rc=$?
[ $rc -eq 3 ] && grep -q "cut.bin is corrupt" <<< "$out" || fail "a truncated token file (exit $rc, want 3): $out"
out=$("$BRAID" train "${common[@]}" --backend local --ranks 2 --steps 3 --inject-failure 1:1 2>&1); rc=$?
[ $rc -eq 4 ] && grep -q "rank 1: injected failure" <<< "$out" || fail "a failed rank as a thread (exit $rc, want 4): $out"

# 2b. A model that cannot fit fails at once, before allocating, naming what would fit.
t0=$SECONDS
out=$(timeout 60 "$BRAID" train "${common[@]}" --model gpt2 --seq-len 1024 --micro-batch 4 --steps 1 --max-memory 3GiB 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "rank 0 needs .* but has 3.0 GiB (--max-memory 3.0 GiB per rank); would fit: " <<< "$out" \
  || fail "a model that cannot fit (exit $rc): $out"
[ $((SECONDS - t0)) -le 20 ] || fail "the memory check took $((SECONDS - t0)) s"
out=$("$BRAID" train "${common[@]}" --steps 1 --max-memory lots 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q -- "--max-memory 'lots' is not a size" <<< "$out" || fail "a bad --max-memory (exit $rc): $out"

# 3. A failing rank takes the job down with its rank and reason, never a hang.
out=$(timeout 120 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --batch 6 --steps 10 --val-every 0 \
  --inject-failure 1:2 2>&1); rc=$?
[ $rc -ne 124 ] || fail "job hung after a rank failed"
[ $rc -eq 4 ] || fail "job exited $rc after a rank failed, want 4 (a failed rank)"
grep -q "rank 1: injected failure on rank 1 at step 2" <<< "$out" || fail "failure message: $out"
# 4. Parameter server under mpirun: synchronous (replicas checked) and asynchronous.
timeout 300 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --dp-mode ps --steps 3 --val-every 0 \
  --check-replicas > "$tmp/ps.txt" 2>&1 || { cat "$tmp/ps.txt"; fail "ps sync"; }
grep -q "parameter server" "$tmp/ps.txt" || fail "ps header"
timeout 300 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --dp-mode ps --ps-async --staleness 1 \
  --steps 3 --val-every 0 > "$tmp/psa.txt" 2>&1 || { cat "$tmp/psa.txt"; fail "ps async"; }
grep -q "staleness <=" "$tmp/psa.txt" || fail "ps async records"
echo "PASS"
