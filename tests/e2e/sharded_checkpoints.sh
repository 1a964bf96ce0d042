#!/usr/bin/env bash
# End-to-end, sharded checkpoints (the default form) under faults: a rank
# killed at each phase of a save — inside its piece file at a random byte
# (printed, to reproduce), before its fsync, and rank 0 before, during and
# after the metadata's rename — and the same under --async-save, leaves the
# newest committed checkpoint loadable: `--resume auto` picks it, the next
# start removes the interrupted save's directory and says so, and the resumed
# run's losses equal the uninterrupted run's bitwise. A piece file that fails
# to write fails the run with the rank and the reason, sync or async, and a
# damaged piece is skipped for the newest that verifies.
source "$(dirname "$0")/lib/common.bash" "$@"
make_tokens 7 300 "the committee said the city bond issue would be sold at auction and the price was fair"

common=(--model tiny --train-data "$tmp/t_train.bin" --val-data "" --seq-len 32 --batch 4 --micro-batch 2)
STEPS=6
run full 2 --steps $STEPS

# crash_and_resume NAME FAULT FLAGS...: the save of step 4 is killed at FAULT,
# then the run resumes from the directory and must end as `full` did.
crash_and_resume() {
  local name="$1" fault="$2"; shift 2
  timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps $STEPS --save "$tmp/$name" --save-every 1 \
    --metrics-out "$tmp/$name.jsonl" --inject-save-fault "4:$fault" "$@" > "$tmp/$name.crash.txt" 2>&1 \
    && { cat "$tmp/$name.crash.txt"; fail "$name: the killed save did not end the job"; }
  [ -f "$tmp/$name/step_3/metadata" ] || fail "$name: step 3's checkpoint is not committed"
  local want=3
  case "$fault" in
    before-dir-fsync) want=4; [ -f "$tmp/$name/step_4/metadata" ] || fail "$name: the renamed metadata is missing" ;;
    *) [ ! -e "$tmp/$name/step_4/metadata" ] || fail "$name: an uncommitted step 4 has metadata" ;;
  esac
  run "$name" 2 --steps $STEPS --save "$tmp/$name" --resume auto "$@"
  grep -q "resumed from $tmp/$name/step_$want at step $want" "$tmp/$name.txt" \
    || { cat "$tmp/$name.txt"; fail "$name: did not resume from step $want"; }
  if [ $want = 3 ] && [ -d "$tmp/$name/step_4" ]; then
    fail "$name: the interrupted step 4 is still there"
  fi
  same_run loss,grad_norm full "$name:0"
}
at=$(( (RANDOM * 32768 + RANDOM) % 19000000 ))
echo "sharded checkpoint faults: rank 1 dies after byte $at of its piece file"
crash_and_resume mid_piece "payload:$at@1"
crash_and_resume before_piece_fsync before-file-fsync@1
crash_and_resume before_metadata before-metadata
crash_and_resume before_rename before-rename
crash_and_resume before_dir_fsync before-dir-fsync
# The same while training goes on: the background writer dies mid-file.
crash_and_resume async_mid_piece "payload:$at@0" --async-save
crash_and_resume async_before_metadata before-metadata --async-save
grep -q "removed $tmp/before_metadata/step_4, left by an interrupted save" "$tmp/before_metadata.txt" \
  || { cat "$tmp/before_metadata.txt"; fail "the interrupted directory's removal was not said"; }

# A piece file that cannot be written fails the run, naming the rank and why;
# the committed checkpoints stay.
for mode in sync async; do
  flags=(); [ $mode = async ] && flags=(--async-save)
  timeout 300 "${MPIRUN[@]}" -np 2 "$BRAID" train "${common[@]}" --steps $STEPS --save "$tmp/we_$mode" --save-every 1 \
    --inject-save-fault 4:write-error@1 "${flags[@]}" > "$tmp/we_$mode.txt" 2>&1; rc=$?
  [ $rc -eq 2 ] || { cat "$tmp/we_$mode.txt"; fail "write error ($mode): exit code $rc, want 2"; }
  grep -q "rank 1 could not write its checkpoint pieces: cannot write .*input/output error" "$tmp/we_$mode.txt" \
    || { cat "$tmp/we_$mode.txt"; fail "write error ($mode): the rank and reason are not named"; }
  "$BRAID" verify "$tmp/we_$mode/step_3" > /dev/null || fail "write error ($mode): step 3 does not verify"
done

# A damaged piece: braid verify names the file and the rank that wrote it, and
# --resume skips to the newest that verifies.
/usr/bin/python3 - "$tmp/before_rename/step_6" <<'PY'
import os, sys
d = sys.argv[1]
f = os.path.join(d, sorted(x for x in os.listdir(d) if x.startswith("r1."))[0])
with open(f, "r+b") as h:
    h.seek(12345); b = h.read(1); h.seek(12345); h.write(bytes([b[0] ^ 0x01]))
PY
"$BRAID" verify "$tmp/before_rename" > "$tmp/verify.txt" 2>&1
grep -q "step_6: FAILED | checkpoint $tmp/before_rename/step_6 is damaged: the checksum of .* in r1\.[0-9a-f]*\.bin, written by rank 1, does not match" \
  "$tmp/verify.txt" || { cat "$tmp/verify.txt"; fail "verify did not name the damaged piece's file and rank"; }
run skip 2 --steps $STEPS --resume "$tmp/before_rename"
grep -q "resumed from $tmp/before_rename/step_3 at step 3" "$tmp/skip.txt" || { cat "$tmp/skip.txt"; fail "did not skip to step 3"; }
echo "sharded checkpoint fault tests passed"
