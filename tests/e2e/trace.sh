#!/usr/bin/env bash
# End-to-end: --trace-out in every layout. Each trace holds every rank, its lanes
# nest, and it shows what the layout does: each unit's forward and backward, DDP
# buckets, ZeRO-1's reduce-scatters and parameter all-gathers, ZeRO-3/FSDP's
# prefetches and per-unit reduce-scatters, HSDP's shard and replica groups, the
# tensor-parallel all-reduces, recomputation, and the split backward of ZB-H1.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 5 200 "the grand jury commented on a number of other topics among them the atlanta and fulton county purchasing departments"
common=(--model tiny --n-layer 2 --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32
        --batch 8 --micro-batch 2 --steps 2 --val-every 2 --val-batches 1 --bucket-mb 0.05)
check() {  # check NAME RANKS LANE:SPAN...
  local name="$1" np="$2"; shift 2
  /usr/bin/python3 "$SRC/tests/e2e/lib/check_trace.py" "$tmp/$name.json" "$np" "$@" || fail "trace of $name"
}
units=("main:step" "main:forward embedding" "main:forward block 1" "main:forward head" "main:backward head"
       "main:backward block 0" "main:backward embedding" "main:optimizer")

run ddp 2 --trace-out "$tmp/ddp.json"
check ddp 2 "${units[@]}" "comm dp:all_reduce bucket 0" "main:wait bucket 0"
run zero1 2 --zero 1 --trace-out "$tmp/zero1.json"
check zero1 2 "comm dp:reduce_scatter bucket 0" "comm dp:all_gather bucket 0 parameters" "main:wait bucket parameters"
run zero3 2 --zero 3 --recompute full --trace-out "$tmp/zero3.json"
check zero3 2 "${units[@]}" "comm dp:all_gather prefetch unit" "comm dp:reduce_scatter unit 1 gradients" \
      "main:wait parameters of unit" "main:wait gradients of unit" "main:recompute block 0"
run hsdp 4 --fsdp --fsdp-shard-size 2 --trace-out "$tmp/hsdp.json"
check hsdp 4 "comm shard:reduce_scatter unit 1 gradients" "main:all_reduce gradient shard across replicas@replicate"
run tp 2 --tp 2 --sequence-parallel --trace-out "$tmp/tp.json"
check tp 2 "${units[@]}" "main:all_gather@tp" "main:reduce_scatter@tp"
run zb 2 --pp 2 --schedule zb-h1 --trace-out "$tmp/zb.json"
check zb 2 "main:backward input block" "main:backward weight block" "main:F" "main:W"
echo "e2e trace: ok"
