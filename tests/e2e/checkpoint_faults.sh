#!/usr/bin/env bash
# End-to-end, the single-file form (--checkpoint-format file; the sharded
# form's faults are sharded_checkpoints.sh's): a checkpoint writer killed at each phase of a save (mid-payload,
# before the file fsync, before the rename, before the directory fsync) leaves
# the newest durable checkpoint loadable: `--resume DIR` (and `auto`) picks it,
# the next start removes the interrupted save's temporary file and says so, and
# the resumed run's losses equal the uninterrupted run's bitwise. Also: a
# damaged checkpoint is skipped for the newest that verifies, --keep-last
# prunes, and `braid verify` names the damaged file.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 5 300 "a grand jury took the report of the county under study and found it in order"

common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "" --seq-len 32 --batch 4 --micro-batch 2
        --checkpoint-format file)
STEPS=6

# The uninterrupted run, on 2 ranks (DDP) as every run below.
run full 2 --steps $STEPS

# crash_and_resume NAME PHASE: the save of step 4 is killed at PHASE, then the
# run resumes from the directory and must end as `full` did.
crash_and_resume() {
  local name="$1" phase="$2"
  timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps $STEPS --save "$tmp/$name" --save-every 1 \
    --metrics-out "$tmp/$name.jsonl" --inject-save-fault "4:$phase" > "$tmp/$name.crash.txt" 2>&1 \
    && { cat "$tmp/$name.crash.txt"; fail "$name: the killed save did not end the job"; }
  [ -f "$tmp/$name/step_3.ckpt" ] || fail "$name: step 3's checkpoint is missing"
  case "$phase" in
    before-dir-fsync) [ -f "$tmp/$name/step_4.ckpt" ] || fail "$name: the renamed file is missing" ;;
    *) [ ! -e "$tmp/$name/step_4.ckpt" ] || fail "$name: a half-written step 4 is visible"
       ls "$tmp/$name" | grep -q '^step_4\.ckpt\.tmp\.' || fail "$name: no temporary file left to clean" ;;
  esac
  local want=3; [ "$phase" = before-dir-fsync ] && want=4
  run "$name" 2 --steps $STEPS --save "$tmp/$name" --resume auto
  grep -q "resumed from $tmp/$name/step_$want.ckpt at step $want" "$tmp/$name.txt" \
    || { cat "$tmp/$name.txt"; fail "$name: did not resume from step $want"; }
  if [ "$phase" != before-dir-fsync ]; then
    grep -q "removed $tmp/$name/step_4.ckpt.tmp.[0-9]*, left by an interrupted save" "$tmp/$name.txt" \
      || { cat "$tmp/$name.txt"; fail "$name: the temporary file's removal was not said"; }
    ls "$tmp/$name" | grep -q '\.tmp\.' && fail "$name: a temporary file is still there"
  fi
  same_run loss,grad_norm full "$name:0"
}
crash_and_resume mid_payload payload:5000
crash_and_resume before_fsync before-file-fsync
crash_and_resume before_rename before-rename
crash_and_resume before_dir_fsync before-dir-fsync

# A damaged newest checkpoint is skipped (and said so) for the newest that verifies.
run keep 2 --steps 4 --save "$tmp/keep" --save-every 1 --keep-last 2
[ "$(ls "$tmp/keep" | tr '\n' ' ')" = "step_3.ckpt step_4.ckpt " ] || { ls "$tmp/keep"; fail "--keep-last 2 kept the wrong files"; }
/usr/bin/python3 - "$tmp/keep/step_4.ckpt" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:  # flip one bit in the last parameter block
    f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 0x10]))
PY
"$BRAID" verify "$tmp/keep" > "$tmp/verify.txt" 2>&1 || { cat "$tmp/verify.txt"; fail "verify: one good file left"; }
grep -q "step_4.ckpt: FAILED | checkpoint $tmp/keep/step_4.ckpt is damaged: the checksum of its AdamW v does not match" \
  "$tmp/verify.txt" || { cat "$tmp/verify.txt"; fail "verify did not name the damaged array"; }
grep -q "1 of 2 checkpoints verify" "$tmp/verify.txt" || { cat "$tmp/verify.txt"; fail "verify count"; }
"$BRAID" verify "$tmp/keep/step_4.ckpt" > /dev/null 2>&1; rc=$?
[ $rc -eq 3 ] || fail "verify of a damaged file: exit code $rc, want 3"
run keep_resume 2 --steps $STEPS --resume "$tmp/keep"
grep -q "resumed from $tmp/keep/step_3.ckpt at step 3" "$tmp/keep_resume.txt" || { cat "$tmp/keep_resume.txt"; fail "resume skipped to the wrong file"; }
grep -q "skipping a checkpoint that does not verify: checkpoint $tmp/keep/step_4.ckpt is damaged" "$tmp/keep_resume.txt" \
  || { cat "$tmp/keep_resume.txt"; fail "the skip was not said"; }
# Loading the damaged file itself is refused, naming the file.
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps $STEPS --resume "$tmp/keep/step_4.ckpt" \
  > "$tmp/bad.txt" 2>&1; rc=$?
[ $rc -eq 3 ] || { cat "$tmp/bad.txt"; fail "a damaged checkpoint: exit code $rc, want 3 (a data error)"; }
grep -q "checkpoint $tmp/keep/step_4.ckpt is damaged" "$tmp/bad.txt" || { cat "$tmp/bad.txt"; fail "no damage message"; }
# --keep-last counts only this run's past: resuming from step 3 past the damaged
# step 4 and saving steps 4..6 with --keep-last 1 replaces step 4 and keeps step 6 alone.
run keep_prune 2 --steps $STEPS --save "$tmp/keep" --save-every 1 --keep-last 1 --resume auto
[ "$(ls "$tmp/keep" | tr '\n' ' ')" = "step_6.ckpt " ] || { ls "$tmp/keep"; fail "--keep-last 1 after a resume kept the wrong files"; }
# A damaged file of a later step than the run reaches is never pruned.
mkdir -p "$tmp/later" && cp "$tmp/keep/step_6.ckpt" "$tmp/later/step_9.ckpt"
printf 'x' >> "$tmp/later/step_9.ckpt"
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps 2 --save "$tmp/later" --resume auto \
  > "$tmp/later.txt" 2>&1; rc=$?
[ $rc -eq 3 ] || { cat "$tmp/later.txt"; fail "--resume auto over only damaged files: exit code $rc, want 3"; }
grep -q "none of its 1 checkpoints verifies" "$tmp/later.txt" || { cat "$tmp/later.txt"; fail "no 'none verifies' message"; }
[ -f "$tmp/later/step_9.ckpt" ] || fail "the damaged file was removed"
# A fresh run into a directory that holds checkpoints is refused: it would overwrite them.
timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps 2 --save "$tmp/keep" > "$tmp/fresh.txt" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "already holds 1 checkpoints" "$tmp/fresh.txt" || { cat "$tmp/fresh.txt"; fail "fresh run into a used directory (exit $rc)"; }
# A fault that could never fire is refused.
"$BRAID" train "${common[@]}" --steps 2 --save "$tmp/nf" --inject-save-fault 1:before-rename > "$tmp/nf.txt" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "no checkpoint is saved at step 1" "$tmp/nf.txt" || { cat "$tmp/nf.txt"; fail "a fault that never fires (exit $rc)"; }
echo "checkpoint fault tests passed"
