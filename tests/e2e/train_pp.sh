#!/usr/bin/env bash
# End-to-end: pipeline parallelism under mpirun (one process per rank): GPipe
# and 1F1B over 2 and 4 stages and a 3D layout (TP=2 x DP=2 x PP=2 on 8
# ranks) train the single-rank run; a Chrome trace is written; braid schedule
# prints a checked table; bad stage splits are refused with the fix.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 4 300 "the september october term jury had been charged by fulton superior court judge durwood pye"
common=(--model tiny --n-layer 4 --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32
        --batch 8 --micro-batch 2 --steps 3 --val-every 3 --val-batches 1 --check-replicas --grad-clip 0.5)

run() {  # run NAME NP FLAGS...
  local name="$1" np="$2"; shift 2
  timeout 300 "${MPIRUN[@]}" -np "$np" "$BRAID" train "${common[@]}" --metrics-out "$tmp/$name.jsonl" "$@" \
    > "$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; fail "$name exited non-zero"; }
}
run single 1
run gpipe2 2 --pp 2 --schedule gpipe
run f1b4 4 --pp 4 --schedule 1f1b --trace-out "$tmp/trace.json"
run threed 8 --tp 2 --pp 2 --zero 1
grep -q "bubble" "$tmp/f1b4.txt" || fail "no bubble in the step line"
/usr/bin/python3 - "$tmp" <<'PY' || fail "losses differ"
import json, sys, os
def rows(n, key): return [json.loads(l)[key] for l in open(os.path.join(sys.argv[1], n + ".jsonl")) if '"%s"' % key in l]
for key in ("loss", "val_loss"):
    ref = rows("single", key)
    for name in ("gpipe2", "f1b4", "threed"):
        got = rows(name, key)
        assert len(got) == len(ref) > 0, (name, key, got)
        for a, b in zip(got, ref):
            assert abs(a - b) <= 1e-5 * abs(b), (name, key, a, b)
tr = json.load(open(os.path.join(sys.argv[1], "trace.json")))
pids = {e["pid"] for e in tr["traceEvents"] if e.get("ph") == "X"}
assert pids == {0, 1, 2, 3}, pids
assert any(e["name"].startswith("B") for e in tr["traceEvents"])
PY
"$BRAID" schedule --pp 4 --micro-batches 8 --schedule 1f1b --svg "$tmp/s.svg" > "$tmp/s.txt" || fail "schedule"
grep -q "bubble 27.3%" "$tmp/s.txt" || { cat "$tmp/s.txt"; fail "schedule bubble"; }
grep -q "<svg" "$tmp/s.svg" || fail "svg"
out=$(timeout 120 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --pp 2 --pp-layers 1,2 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -q "summing to 4" || fail "pp-layers message rc=$rc: $out"
echo "e2e pp: ok"
