#!/usr/bin/env bash
# End-to-end: tensor parallelism under mpirun (one process per rank): TP=2 with
# and without sequence parallelism and DP=2 x TP=2 with ZeRO-1 train the
# single-rank run; replicas and TP-replicated tensors are checked every step; a
# TP checkpoint resumes on one rank; a TP degree that does not divide the heads
# is refused with the fix. DP=2 x TP=2 also over TCP, bitwise the same.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 3 300 "the fulton county grand jury said friday an investigation of recent primary election produced no evidence"
common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "$tmp/t_val.bin" --seq-len 32 --batch 4
        --micro-batch 2 --steps 4 --val-every 2 --val-batches 1 --check-replicas --grad-clip 0.5 --dropout 0.1)

run single 1
run tp2 2 --tp 2 --save "$tmp/tp2.ckpt" --sample-tokens 4
grep -q -- "--- sample" "$tmp/tp2.txt" || fail "no sample under TP"
grep -q "tp=2" "$tmp/tp2.txt" || fail "header does not show tp"
run tp2sp 2 --tp 2 --sequence-parallel
run dp2tp2 4 --tp 2 --zero 1 --micro-batch 1 --sequence-parallel
same_run loss,val_loss single tp2 tp2sp dp2tp2
same_over_tcp dp2tp2
timeout 300 "$BRAID" train "${common[@]}" --steps 6 --resume "$tmp/tp2.ckpt" > "$tmp/resume.txt" 2>&1 \
  || { cat "$tmp/resume.txt"; fail "TP checkpoint did not resume on one rank"; }
out=$(timeout 120 "${MPIRUN[@]}" -np 3 "$BRAID" train "${common[@]}" --batch 6 --micro-batch 2 --tp 3 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "does not divide n_head=4" <<< "$out" || fail "tp message rc=$rc: $out"
echo "e2e tp: ok"
