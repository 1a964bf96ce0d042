#!/usr/bin/env bash
# End-to-end: pipeline parallelism under mpirun (one process per rank): GPipe,
# 1F1B, ZB-H1 and interleaved 1F1B over 2 and 4 stages, fp16 with ZeRO-1 under
# ZB-H1, and a 3D layout (TP=2 x DP=2 x PP=2 on 8 ranks) train the single-rank run; a Chrome trace is written; braid schedule
# prints a checked table; bad stage splits are refused with the fix. 1F1B on 4
# stages and 3D also over TCP, bitwise the same, the trace on rank 0's clock.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 4 300 "the september october term jury had been charged by fulton superior court judge durwood pye"
common=(--model tiny --n-layer 4 --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32
        --batch 8 --micro-batch 2 --steps 3 --val-every 3 --val-batches 1 --check-replicas --grad-clip 0.5)

run single 1
run gpipe2 2 --pp 2 --schedule gpipe
run f1b4 4 --pp 4 --schedule 1f1b --trace-out "$tmp/trace.json"
run zb4 4 --pp 4 --schedule zb-h1
run inter2 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 1
run threed 8 --tp 2 --pp 2 --zero 1
run fp16pp 4 --pp 2 --zero 1 --precision fp16 --schedule zb-h1
grep -q "bubble" "$tmp/f1b4.txt" || fail "no bubble in the step line"
same_run loss,val_loss single gpipe2 f1b4 zb4 inter2 threed fp16pp:1e-3
same_over_tcp f1b4 threed  # f1b4's trace.json is now its TCP run's
grep -q "trace: clocks aligned to rank 0, max error .* us over 4 ranks" "$tmp/f1b4.tcp.txt" || fail "no clock alignment line"
/usr/bin/python3 - "$tmp" <<'PY' || fail "trace"
import json, sys, os
tr = json.load(open(os.path.join(sys.argv[1], "trace.json")))
pids = {e["pid"] for e in tr["traceEvents"] if e.get("ph") == "X"}
assert pids == {0, 1, 2, 3}, pids
assert any(e["name"].startswith("B") for e in tr["traceEvents"])
meta = tr["otherData"]
assert len(meta["clock_offset_us"]) == len(meta["clock_error_us"]) == 4, meta
assert meta["clock_offset_us"][0] == 0 and meta["clock_max_error_us"] == max(meta["clock_error_us"]), meta
assert min(e["ts"] for e in tr["traceEvents"] if e.get("ph") == "X") >= 0
PY
"$BRAID" schedule --pp 4 --micro-batches 8 --schedule 1f1b --svg "$tmp/s.svg" > "$tmp/s.txt" || fail "schedule"
grep -q "bubble 27.3%" "$tmp/s.txt" || { cat "$tmp/s.txt"; fail "schedule bubble"; }
grep -q "<svg" "$tmp/s.svg" || fail "svg"
"$BRAID" schedule --pp 4 --micro-batches 8 --schedule zb-h1 > "$tmp/z.txt" || fail "schedule zb-h1"
grep -q "bubble 11.1%" "$tmp/z.txt" || { cat "$tmp/z.txt"; fail "zb-h1 bubble"; }
out=$(timeout 120 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --pp 2 --pp-layers 1,2 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "summing to 4" <<< "$out" || fail "pp-layers message rc=$rc: $out"
echo "e2e pp: ok"
