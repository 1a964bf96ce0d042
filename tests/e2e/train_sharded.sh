#!/usr/bin/env bash
# End-to-end: ZeRO-2/3, FSDP, HSDP and mixed precision under mpirun (one
# process per rank): same losses as DDP, replicas checked every step, sampling
# with sharded parameters, a checkpoint from one layout resumed by another,
# clear errors for bad flags. DDP and HSDP also over TCP, bitwise the same.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 2 300 "a grand jury commented on a number of other topics among them the atlanta and fulton county purchasing departments"
common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 4
        --micro-batch 1 --steps 4 --val-every 0 --check-replicas --grad-clip 0.5)

run ddp 2
# The start-up log says how the DP group moves gradients (messages only where /dev/shm lacks room).
grep -Eq "^data-parallel collectives: (zero-copy through shared memory \(2 ranks on one node\)|messages \(no shared memory)" \
  "$tmp/ddp.txt" || fail "no data-parallel collectives line: $(head -5 "$tmp/ddp.txt")"
run zero2 2 --zero 2
run zero3 2 --zero 3 --sample-tokens 4
grep -q -- "--- sample" "$tmp/zero3.txt" || fail "no sample under ZeRO-3"
run fsdp 2 --fsdp --save "$tmp/f.ckpt"
run hsdp 4 --fsdp --fsdp-shard-size 2
run bf16 2 --zero 3 --precision bf16
same_run loss ddp zero2 zero3 fsdp hsdp bf16:1e-3  # bf16: within its rounding (see test_mixed_precision)
same_over_tcp ddp hsdp
# An FSDP checkpoint of 2 ranks resumes as ZeRO-1 on 4 ranks.
timeout 300 "${MPIRUN[@]}" -np 4 "$BRAID" train "${common[@]}" --steps 6 --zero 1 \
  --resume "$tmp/f.ckpt" > "$tmp/resume.txt" 2>&1 || { cat "$tmp/resume.txt"; fail "resume across layouts"; }
grep -q "resumed from" "$tmp/resume.txt" || fail "resume line"
out=$(timeout 120 "$BRAID" train "${common[@]}" --precision nope 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "'nope' is not one of {fp32,bf16,fp16}" <<< "$out" || fail "precision message: $out"
out=$(timeout 120 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --batch 3 --fsdp --fsdp-shard-size 2 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "use a divisor of 3" <<< "$out" || fail "hsdp message rc=$rc: $out"
echo "e2e sharded: ok"
